"""Incremental decoding: audio for new tokens only, with left context and a crossfade, at linear cost.

ChatTTS's stock ``stream=True`` waits for 72 tokens and then re-decodes the whole prefix for every chunk (quadratic in
the length). Here each chunk decodes only the tokens not yet final plus ``left_context`` tokens before them; the last
``holdback`` tokens of a chunk are provisional (their right context is not generated yet) and are decoded again with
the next chunk, and the two versions of the ``crossfade`` samples where chunks meet are blended, so that chunks join
without clicks. The first chunk leaves after ``first_tokens`` tokens.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy.typing as npt

__all__ = ["SAMPLES_PER_TOKEN", "StreamDecoder", "decode_hiddens", "to_int16"]

SAMPLES_PER_TOKEN = 512
"""Each audio token becomes two mel frames of 256 samples at 24 kHz."""


@torch.inference_mode()
def decode_hiddens(chat: Any, hiddens: torch.Tensor) -> npt.NDArray[np.float32]:
    """Decode GPT hidden states ``(tokens, hidden)`` to float audio with ChatTTS's decoder and Vocos."""
    mel = chat.decoder(hiddens.to(chat.device, dtype=torch.float32).T.unsqueeze(0))
    audio: npt.NDArray[np.float32] = chat.vocos.decode(mel).float().cpu().numpy()[0]
    return audio


def to_int16(audio: npt.NDArray[np.float32]) -> npt.NDArray[np.int16]:
    return (np.clip(audio, -1.0, 1.0) * 32767.0).astype(np.int16)


class StreamDecoder:
    """Turns one sequence's hidden states, pushed one token at a time, into float audio chunks."""

    def __init__(  # noqa: PLR0917
        self,
        decode: Callable[[torch.Tensor], npt.NDArray[np.float32]],
        first_tokens: int = 24,
        chunk_tokens: int = 24,
        left_context: int = 40,
        holdback: int = 4,
        crossfade: int = 1024,
    ) -> None:
        if crossfade > holdback * SAMPLES_PER_TOKEN:
            raise ValueError("the crossfade must fit in the held-back tokens")
        self._decode = decode
        self._first, self._chunk, self._left, self._holdback = first_tokens, chunk_tokens, left_context, holdback
        self._fade_in = np.linspace(0.0, 1.0, crossfade, dtype=np.float32)
        self._hiddens: list[torch.Tensor] = []
        self._emitted = 0  # absolute sample up to which audio has left (without the pending tail)
        self._tail = np.zeros(0, dtype=np.float32)  # provisional audio from ``_emitted`` on, to crossfade
        self._decoded_tokens = 0

    @property
    def tokens(self) -> int:
        return len(self._hiddens)

    def push(self, hidden: torch.Tensor) -> npt.NDArray[np.float32] | None:
        """Add one token; returns a chunk when one is due."""
        self._hiddens.append(hidden)
        due = self._first if self._decoded_tokens == 0 else self._decoded_tokens + self._chunk
        if self.tokens < due:
            return None
        return self._emit(final=False)

    def finish(self) -> npt.NDArray[np.float32]:
        """The rest of the audio, once the sequence has ended."""
        if not self._hiddens:
            return np.zeros(0, dtype=np.float32)
        return self._emit(final=True)

    def _emit(self, final: bool) -> npt.NDArray[np.float32]:
        tokens = self.tokens
        self._decoded_tokens = tokens
        start_token = max(0, self._emitted // SAMPLES_PER_TOKEN - self._left)
        audio = self._decode(torch.stack(self._hiddens[start_token:]))
        offset = start_token * SAMPLES_PER_TOKEN  # absolute sample of audio[0]
        end = offset + len(audio) if final else (tokens - self._holdback) * SAMPLES_PER_TOKEN
        segment = audio[self._emitted - offset : end - offset].copy()
        fade = min(len(self._tail), len(segment))
        if fade:
            ramp = self._fade_in[:fade] if fade == len(self._fade_in) else np.linspace(0, 1, fade, dtype=np.float32)
            segment[:fade] = self._tail[:fade] * (1.0 - ramp) + segment[:fade] * ramp
        if final:
            self._emitted += len(segment)
            self._tail = np.zeros(0, dtype=np.float32)
            return segment
        keep = min(len(self._fade_in), len(segment))
        self._tail = segment[len(segment) - keep :]
        chunk = segment[: len(segment) - keep]
        self._emitted += len(chunk)
        return chunk
