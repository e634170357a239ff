# ruff: noqa: PLC0415 - torch, transformers and ChatTTS are imported lazily: the server process never loads them
"""Speakers: one stable embedding per OpenAI voice name, and custom speaker strings (read and checked by
``engines/chattts/speaker_strings.py``, as the server checks them when a voice is made).

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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engines.base import OPENAI_VOICES, InvalidSynthesisRequestError
from engines.chattts.speaker_strings import (
    SAMPLE_PREFIX,
    SAMPLE_SEPARATOR,
    SampleCodes,
    SpeakerShape,
    read_embedding,
    read_speaker,
    sample_frames,
)

if TYPE_CHECKING:
    import torch

__all__ = ["SAMPLE_PREFIX", "SampleVoice", "SpeakerBank", "sample_frames", "voice_seed"]


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
        self._shape = SpeakerShape(self.dim, num_vq, num_audio_tokens, sample_frames(max_sample_s))
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
        return f"{SAMPLE_PREFIX}{prompt}{SAMPLE_SEPARATOR}{transcript}"

    def resolve(self, voice: str, spk_emb: str | None) -> torch.Tensor | SampleVoice:
        """The voice of a request: its custom speaker when given (see the module's docstring), else the named voice.

        Raises:
            InvalidSynthesisRequestError: an unknown voice or a malformed speaker (``param`` ``voice``).
        """
        import torch

        if spk_emb is None:
            if voice not in self.named:
                raise InvalidSynthesisRequestError(f"unknown voice {voice!r} for ChatTTS", param="voice")
            return self.named[voice]
        speaker = read_speaker(spk_emb, self._shape, param="voice")  # the rules a voice was checked by when made
        if isinstance(speaker, SampleCodes):
            return SampleVoice(torch.from_numpy(speaker.codes).t().contiguous(), speaker.transcript)
        if isinstance(speaker, int):
            return self.sample(speaker)
        return torch.from_numpy(speaker)

    def parse(self, spk_emb: str) -> torch.Tensor:
        """Decode and check a custom embedding; anything malformed is the client's error, never a crash."""
        import torch

        return torch.from_numpy(read_embedding(spk_emb, self.dim, param="voice"))
