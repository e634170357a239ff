"""Incremental decoding: audio for new tokens only, with left context and a crossfade, at linear cost.

ChatTTS's stock ``stream=True`` waits for 72 tokens and then re-decodes the whole prefix for every chunk (quadratic in
the length). Here each chunk decodes only the tokens not yet final plus ``left_context`` tokens before them; the last
``holdback`` tokens of a chunk are provisional (their right context is not generated yet) and are decoded again with
the next chunk, and the two versions of the ``crossfade`` samples where chunks meet are blended, so that chunks join
without clicks. The first chunk leaves after ``first_tokens`` tokens.

Each chunk re-decodes ``left_context`` tokens, so small chunks cost decoding (24-token chunks decode each token about
2.5 times). Later chunks therefore grow, doubling from ``chunk_tokens`` up to ``max_chunk_tokens``, unless the
listener would run out of audio first: while generation keeps up with real time, a chunk of at least ``chunk_tokens``
leaves as soon as waiting one more token would leave the listener's audio (what has left, played from the first
chunk on) shorter than that token's time, the last decode's time and :data:`MARGIN_S`. When generation is slower than
real time the listener waits whatever the chunk size, and bigger chunks end the audio sooner.

That schedule follows the clock, and a chunk's audio depends on where its window was cut (the decoder's convolutions
see other context, the crossfades fall elsewhere): a seeded request, whose audio must repeat byte for byte, takes
``fixed_chunks`` instead, cut at token counts alone: its first chunk after ``first_tokens``, every later one
``chunk_tokens`` on, and its last one once every such chunk its tokens reach has left.

A batch's rows decode together: the engine adds each row's token (:meth:`StreamDecoder.add`), takes the windows of
the rows whose chunk is due (:meth:`StreamDecoder.window`), decodes them in one call per window length
(:func:`decode_windows`: no padding, so each row's audio is what it would be alone, to float rounding: a seeded
request's window is decoded in a call of its own) and hands each its audio back (:meth:`StreamDecoder.emit`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from engines.chattts.engine import SAMPLE_RATE
from engines.chattts.threads import torch_threads

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy.typing as npt

    from engines.chattts.audio_graph import AudioGraph

__all__ = [
    "MARGIN_S", "SAMPLES_PER_TOKEN", "StreamDecoder", "decode_hiddens", "decode_windows", "to_int16",
]  # fmt: skip

SAMPLES_PER_TOKEN = 512
"""Each audio token becomes two mel frames of 256 samples at 24 kHz."""
TOKEN_S = SAMPLES_PER_TOKEN / SAMPLE_RATE
"""Audio seconds per token."""
MARGIN_S = 0.2
"""Audio a growing chunk leaves the listener for what comes after the decode: encoding, the network, the client."""


@torch.inference_mode()
def decode_hiddens(chat: Any, hiddens: torch.Tensor) -> npt.NDArray[np.float32]:
    """Decode GPT hidden states ``(tokens, hidden)`` to float audio with ChatTTS's decoder and Vocos."""
    mel = chat.decoder(hiddens.to(chat.device, dtype=torch.float32).T.unsqueeze(0))
    audio: npt.NDArray[np.float32] = chat.vocos.decode(mel).float().cpu().numpy()[0]
    return audio


@torch.inference_mode()
def decode_windows(
    chat: Any, windows: list[torch.Tensor], threads: int | None = None, graph: AudioGraph | None = None
) -> list[npt.NDArray[np.float32]]:
    """Decode several ``(tokens, hidden)`` windows, those of one length in one batched call; in ``windows``' order;
    on ``threads`` torch threads (``None``: as many as torch has), through ``graph`` where given
    (``engines/chattts/audio_graph.py``), else in torch."""
    with torch_threads(threads):
        return _decode_windows(chat, windows, graph)


def _decode_windows(chat: Any, windows: list[torch.Tensor], graph: AudioGraph | None) -> list[npt.NDArray[np.float32]]:
    by_length: dict[int, list[int]] = {}
    for position, window in enumerate(windows):
        by_length.setdefault(len(window), []).append(position)
    audio: list[npt.NDArray[np.float32]] = [np.zeros(0, dtype=np.float32)] * len(windows)
    for positions in by_length.values():
        hiddens = torch.stack([windows[p] for p in positions]).to(chat.device, dtype=torch.float32)
        if graph is not None:
            waveforms = graph.decode(chat.vocos.head, hiddens)
        else:
            waveforms = chat.vocos.decode(chat.decoder(hiddens.transpose(1, 2)))
        decoded = waveforms.float().cpu().numpy()
        for row, position in enumerate(positions):
            audio[position] = decoded[row]
    return audio


def to_int16(audio: npt.NDArray[np.float32]) -> npt.NDArray[np.int16]:
    return (np.clip(audio, -1.0, 1.0) * 32767.0).astype(np.int16)


class StreamDecoder:
    """Turns one sequence's hidden states, added one token at a time, into float audio chunks (the caller decodes
    each due :meth:`window`, usually several sequences' at once with :func:`decode_windows`)."""

    def __init__(  # noqa: PLR0917 - the streaming options, each with its default
        self,
        first_tokens: int = 24,
        chunk_tokens: int = 24,
        left_context: int = 40,
        holdback: int = 4,
        crossfade: int = 1024,
        max_chunk_tokens: int = 96,
        clock: Callable[[], float] | None = None,
        *,
        fixed_chunks: bool = False,
    ) -> None:
        if crossfade > holdback * SAMPLES_PER_TOKEN:
            raise ValueError("the crossfade must fit in the held-back tokens")
        self._first, self._chunk, self._left, self._holdback = first_tokens, chunk_tokens, left_context, holdback
        self.fixed_chunks = fixed_chunks
        """Chunks cut at token counts alone (see the module's docstring): ``first_tokens``, then ``chunk_tokens``
        each; they never grow, wait or follow the clock."""
        self._max_chunk = chunk_tokens if fixed_chunks else max(chunk_tokens, max_chunk_tokens)
        self._clock = clock if clock is not None else time.monotonic  # looked up here: tests may stop the clock
        self._fade_in = np.linspace(0.0, 1.0, crossfade, dtype=np.float32)
        self._hiddens: list[torch.Tensor] = []
        self._emitted = 0  # absolute sample up to which audio has left (without the pending tail)
        self._tail = np.zeros(0, dtype=np.float32)  # provisional audio from ``_emitted`` on, to crossfade
        self._decoded_tokens = 0
        self._window_start = 0  # the first token of the last window handed out
        self._window_end = 0  # the tokens there were then
        self._next_chunk = chunk_tokens  # doubles with every chunk, up to ``max_chunk_tokens``
        self._played_until = 0.0  # clock time at which the listener's audio runs out
        self._emitted_at = 0.0  # clock time of the last chunk
        self._windowed_at = 0.0  # clock time of the last window: its decode ends at the next emit
        self._decode_s = 0.0  # how long the last decode took

    @property
    def tokens(self) -> int:
        return len(self._hiddens)

    @property
    def first_tokens(self) -> int:
        """Tokens before the first chunk (the engine shortens it in a slower, bigger batch, until it is decoded)."""
        return self._first

    @first_tokens.setter
    def first_tokens(self, tokens: int) -> None:
        self._first = tokens

    def add(self, hidden: torch.Tensor) -> bool:
        """Add one token; ``True`` when a chunk is due (decode :meth:`window`, then :meth:`emit` its audio)."""
        self._hiddens.append(hidden)
        return self.due()

    def due(self) -> bool:
        """Whether a chunk is due now (what :meth:`add` said for the last token, asked again: a chunk that fell due
        while the previous one was still being decoded, beside the token loop)."""
        if self._decoded_tokens == 0:
            return self.tokens >= self._first
        pending = self.tokens - self._decoded_tokens
        if pending < self._chunk:
            return False
        return pending >= self._next_chunk or self._listener_runs_short(pending)

    @property
    def started(self) -> bool:
        """Whether the first chunk has been decoded."""
        return self._decoded_tokens > 0

    def may_wait(self) -> bool:
        """Whether a due later chunk may wait a few more tokens (while another sequence's first chunk is coming): not
        with fixed chunks, not a first chunk, not at ``max_chunk_tokens`` yet, and the listener keeps audio enough
        meanwhile (or generation is slower than real time: the listener waits anyway, and a bigger chunk costs less)."""
        pending = self.tokens - self._decoded_tokens
        if self.fixed_chunks or not self.started:
            return False
        return pending < self._max_chunk and not self._listener_runs_short(pending)

    def _listener_runs_short(self, pending: int) -> bool:
        """Whether a chunk must leave now, smaller than it could grow, so that the listener's audio lasts."""
        now = self._clock()
        step_s = (now - self._emitted_at) / pending  # per token since the last chunk, its decode included
        if step_s >= TOKEN_S:
            return False  # slower than real time: the listener waits anyway, and bigger chunks finish sooner
        return self._played_until - now < step_s + self._decode_s + MARGIN_S

    def window(self, final: bool = False) -> torch.Tensor:
        """The hidden states ``(tokens, hidden)`` the next chunk decodes: the tokens not yet final and their left
        context (with ``fixed_chunks``, unless ``final``: up to the chunk's own end, the later tokens go with the next
        chunk). Empty when no token came at all."""
        self._window_start = max(0, self._emitted // SAMPLES_PER_TOKEN - self._left)
        self._window_end = self.tokens  # tokens may come on while it is decoded: they go with the next chunk
        if self.fixed_chunks and not final:
            self._window_end = min(self.tokens, self._decoded_tokens + (self._chunk if self.started else self._first))
        self._windowed_at = self._clock()
        if not self._hiddens:
            return torch.zeros(0)
        return torch.stack(self._hiddens[self._window_start : self._window_end])

    def emit(self, audio: npt.NDArray[np.float32], final: bool = False) -> npt.NDArray[np.float32]:
        """The chunk that leaves now, from ``audio``, the decoded :meth:`window`; ``final`` once the sequence ended
        (then the rest of the audio leaves)."""
        tokens = self._window_end
        self._decoded_tokens = tokens
        offset = self._window_start * SAMPLES_PER_TOKEN  # absolute sample of audio[0]
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
        self._pace(len(chunk))
        return chunk

    def _pace(self, samples: int) -> None:
        """Account for a chunk that leaves now: the listener's audio, the decode's time, the next chunk's size."""
        now = self._clock()
        self._decode_s = now - self._windowed_at
        self._played_until = max(self._played_until, now) + samples / SAMPLE_RATE
        self._emitted_at = now
        self._next_chunk = min(self._max_chunk, 2 * self._next_chunk)
