# ruff: noqa: PLC0415 - torch, transformers and ChatTTS are imported lazily: the server process never loads them
"""Speaker embeddings: one stable embedding per OpenAI voice name, and validation of custom ``spk_emb`` strings.

A named voice is sampled the way ChatTTS's ``Speaker.sample_random`` samples (``randn * std + mean`` from the
weights' speaker statistics), but from a ``torch.Generator`` seeded with a hash of the name: the same name gives the
same embedding on every machine and after every restart, for given weights.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from engines.base import OPENAI_VOICES, InvalidSynthesisRequestError

if TYPE_CHECKING:
    import torch

__all__ = ["SpeakerBank", "voice_seed"]

_MAX_SPK_EMB_CHARS = 16384


def voice_seed(name: str) -> int:
    """A 63-bit seed derived from a voice name (stable across processes, unlike ``hash()``)."""
    return int.from_bytes(hashlib.sha256(f"chattts-voice:{name}".encode()).digest()[:8], "big") >> 1


class SpeakerBank:
    """The named voices of one loaded model, and a parser for custom embeddings of the right size."""

    def __init__(self, speaker: Any) -> None:
        self._speaker = speaker  # ChatTTS.model.Speaker: std, mean (float16) and dim
        self.dim: int = int(speaker.dim)
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

    def resolve(self, voice: str, spk_emb: str | None) -> torch.Tensor:
        """The embedding for a request: its custom speaker when given, else the named voice.

        A custom speaker is a ChatTTS ``spk_emb`` string, or ``seed:N`` to sample one from the seed N.
        """
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
