# ruff: noqa: PLC0415 - torch, transformers and ChatTTS are imported lazily: the server process never loads them
"""Speakers: one stable embedding per OpenAI voice name, and validation of custom speaker strings.

A named voice is sampled the way ChatTTS's ``Speaker.sample_random`` samples (``randn * std + mean`` from the
weights' speaker statistics), but from a ``torch.Generator`` seeded with a hash of the name: the same name gives the
same embedding on every machine and after every restart, for given weights.

A custom speaker string is one of:

- a ChatTTS ``spk_emb`` (base16384 of LZMA-compressed float16, as ``Chat.sample_random_speaker`` writes it);
- ``seed:N``: the embedding sampled from the seed N;
- ``smp:<spk_smp>|<transcript>``: a voice from a sample (``ChatTTSEngine.speaker_from_sample``). ``spk_smp`` is
  ChatTTS's own speaker prompt (``Chat.sample_audio_speaker``: the sample's DVAE codes, ``num_vq`` by frames, LZMA
  and base16384), and the transcript is what the sample says, exactly. Base16384 never writes ``|``, so the first
  one ends the prompt; the transcript may hold any character.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engines.base import OPENAI_VOICES, InvalidSynthesisRequestError

if TYPE_CHECKING:
    import torch

__all__ = ["SAMPLE_PREFIX", "SampleVoice", "SpeakerBank", "sample_frames", "voice_seed"]

_MAX_SPK_EMB_CHARS = 16384
SAMPLE_PREFIX = "smp:"
_SAMPLE_SEPARATOR = "|"
_FRAMES_PER_S = 24000 / 512
"""DVAE codes per second of audio: a mel frame every 256 samples at 24 kHz, two frames a code (as a GPT token)."""


def sample_frames(seconds: float) -> int:
    """The most DVAE frames a sample of ``seconds`` encodes to (the mel's centred padding adds one)."""
    return math.ceil(seconds * _FRAMES_PER_S) + 1


@dataclass(frozen=True, slots=True)
class SampleVoice:
    """A voice from a sample: its audio codes and its transcript, the prompt generation goes on from."""

    codes: torch.Tensor
    """``(frames, num_vq)`` int64 audio codes."""
    transcript: str


def voice_seed(name: str) -> int:
    """A 63-bit seed derived from a voice name (stable across processes, unlike ``hash()``)."""
    return int.from_bytes(hashlib.sha256(f"chattts-voice:{name}".encode()).digest()[:8], "big") >> 1


class SpeakerBank:
    """The named voices of one loaded model, and a parser for custom embeddings of the right size."""

    def __init__(
        self, speaker: Any, *, num_vq: int = 4, num_audio_tokens: int = 626, max_sample_s: float = 60.0
    ) -> None:
        self._speaker = speaker  # ChatTTS.model.Speaker: std, mean (float16) and dim
        self.dim: int = int(speaker.dim)
        self._num_vq = num_vq
        self._eos = num_audio_tokens - 1
        self._max_frames = sample_frames(max_sample_s)
        self.named: dict[str, torch.Tensor] = {name: self.sample(voice_seed(name)) for name in OPENAI_VOICES}

    def sample(self, seed: int) -> torch.Tensor:
        """One embedding drawn from the speaker statistics with a seeded generator."""
        import torch

        generator = torch.Generator().manual_seed(seed)
        noise = torch.randn(self.dim, generator=generator, dtype=torch.float32)
        std, mean = self._speaker.std.float().cpu(), self._speaker.mean.float().cpu()
        embedding: torch.Tensor = (noise * std + mean).to(torch.float16)
        return embedding

    def encode(self, embedding: torch.Tensor) -> str:
        """The ``spk_emb`` string ChatTTS users exchange (base16384 of LZMA-compressed float16)."""
        encoded: str = self._speaker._encode(embedding)
        return encoded

    def sample_speaker(self, codes: torch.Tensor, transcript: str) -> str:
        """The speaker string of a sample's DVAE ``codes`` ``(num_vq, frames)`` and its transcript."""
        prompt: str = self._speaker.encode_prompt(codes)
        return f"{SAMPLE_PREFIX}{prompt}{_SAMPLE_SEPARATOR}{transcript}"

    def resolve(self, voice: str, spk_emb: str | None) -> torch.Tensor | SampleVoice:
        """The voice of a request: its custom speaker when given (see the module's docstring), else the named voice.

        Raises:
            InvalidSynthesisRequestError: an unknown voice or a malformed speaker (``param`` ``voice``).
        """
        if spk_emb is not None and spk_emb.startswith(SAMPLE_PREFIX):
            return self.parse_sample(spk_emb)
        if spk_emb is not None and spk_emb.startswith("seed:"):
            try:
                return self.sample(int(spk_emb.removeprefix("seed:")) % 2**63)
            except ValueError:
                raise InvalidSynthesisRequestError("a 'seed:N' speaker needs an integer N", param="voice") from None
        if spk_emb is not None:
            return self.parse(spk_emb)
        if voice not in self.named:
            raise InvalidSynthesisRequestError(f"unknown voice {voice!r} for ChatTTS", param="voice")
        return self.named[voice]

    def parse(self, spk_emb: str) -> torch.Tensor:
        """Decode and check a custom embedding; anything malformed is the client's error, never a crash."""
        import numpy as np
        import torch

        if not isinstance(spk_emb, str) or not spk_emb or len(spk_emb) > _MAX_SPK_EMB_CHARS:
            raise InvalidSynthesisRequestError("the ChatTTS speaker embedding is empty or too long", param="voice")
        try:
            values = self._speaker._decode(spk_emb)
        except Exception as exc:  # base16384, LZMA and numpy each raise their own kinds
            message = f"the ChatTTS speaker embedding is not a valid spk_emb string ({type(exc).__name__})"
            raise InvalidSynthesisRequestError(message, param="voice") from exc
        if values.shape != (self.dim,):
            message = f"the ChatTTS speaker embedding has {values.size} values; these weights need {self.dim}"
            raise InvalidSynthesisRequestError(message, param="voice")
        if not np.isfinite(values).all() or not np.abs(values.astype(np.float32)).sum() > 0:
            message = "the ChatTTS speaker embedding is not finite and non-zero"
            raise InvalidSynthesisRequestError(message, param="voice")
        return torch.from_numpy(values)

    def parse_sample(self, speaker: str) -> SampleVoice:
        """Decode and check a ``smp:`` speaker; anything malformed is the client's error, never a crash."""
        import torch

        prompt, separator, transcript = speaker.removeprefix(SAMPLE_PREFIX).partition(_SAMPLE_SEPARATOR)
        if not separator or not prompt or not transcript.strip() or len(speaker) > _MAX_SPK_EMB_CHARS:
            raise InvalidSynthesisRequestError(
                "a ChatTTS sample speaker is 'smp:<spk_smp>|<transcript>', both non-empty", param="voice"
            )
        try:
            codes = self._speaker.decode_prompt(prompt)
        except Exception as exc:  # base16384, LZMA and numpy each raise their own kinds
            message = f"the ChatTTS sample speaker's prompt is not a valid spk_smp string ({type(exc).__name__})"
            raise InvalidSynthesisRequestError(message, param="voice") from exc
        if codes.dim() != 2 or codes.size(0) != self._num_vq or not 0 < codes.size(1) <= self._max_frames:
            message = f"the ChatTTS sample speaker's prompt must be {self._num_vq} by 1 to {self._max_frames} codes"
            raise InvalidSynthesisRequestError(message, param="voice")
        if int(codes.min()) < 0 or int(codes.max()) >= self._eos:
            raise InvalidSynthesisRequestError("the ChatTTS sample speaker's codes are out of range", param="voice")
        return SampleVoice(codes.t().to(torch.long).contiguous(), transcript)
