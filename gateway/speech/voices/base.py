"""The custom voice store's contract and its records."""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from gateway.schemas import CUSTOM_VOICE_PREFIX
from storage import Page, sortable_id

__all__ = [
    "SEED_SPEAKER_PREFIX",
    "CustomVoiceRecord",
    "VoiceNameTakenError",
    "VoiceStore",
    "VoiceType",
    "from_json",
    "new_voice",
]

SEED_SPEAKER_PREFIX = "seed:"

VoiceType = Literal["audio_sample", "speaker", "seed"]
"""How a voice was made: OpenAI's ``audio_sample`` (a recording, with a consent), or this gateway's JSON form with an
engine's ``speaker`` or a ``seed``."""


@dataclass(frozen=True, slots=True)
class CustomVoiceRecord:
    id: str
    tenant: str
    name: str
    model: str
    """The engine the speaker belongs to (an embedding only makes sense for its engine and weights)."""
    speaker: str
    """The engine's speaker string: a ChatTTS ``spk_emb``, or ``seed:N`` to derive one from a seed."""
    created_at: float
    type: VoiceType = "speaker"
    consent: str | None = None
    """The consent recording (``cons_...``) an ``audio_sample`` voice was made with."""

    @property
    def speaker_sha256(self) -> str:
        """The voice's identity for the audio cache: what it sounds like, not what the tenant called it."""
        return hashlib.sha256(self.speaker.encode()).hexdigest()

    def public(self) -> dict[str, object]:
        """OpenAI's ``audio.voice``, with this gateway's ``model``, ``speaker_sha256`` and (samples) ``consent``."""
        shown: dict[str, object] = {
            "id": self.id,
            "object": "audio.voice",
            "name": self.name,
            "type": self.type,
            "model": self.model,
            "created_at": int(self.created_at),
            "speaker_sha256": self.speaker_sha256,
        }
        if self.consent is not None:
            shown["consent"] = self.consent
        return shown


def new_voice(
    tenant: str,
    name: str,
    model: str,
    speaker: str,
    *,
    type: VoiceType | None = None,  # noqa: A002 - OpenAI's field name
    consent: str | None = None,
) -> CustomVoiceRecord:
    kind: VoiceType = type or ("seed" if speaker.startswith(SEED_SPEAKER_PREFIX) else "speaker")
    voice_id = sortable_id(CUSTOM_VOICE_PREFIX)
    return CustomVoiceRecord(voice_id, tenant, name, model, speaker, time.time(), kind, consent)


def from_json(raw: bytes | str) -> CustomVoiceRecord:
    fields: dict[str, Any] = json.loads(raw)
    # Records stored before voices had a type: what their speaker says they were made from.
    fields.setdefault("type", "seed" if fields["speaker"].startswith(SEED_SPEAKER_PREFIX) else "speaker")
    return CustomVoiceRecord(**fields)


class VoiceStore(Protocol):
    async def add(self, voice: CustomVoiceRecord, *, max_per_tenant: int) -> bool:
        """Store ``voice`` unless its tenant has ``max_per_tenant`` voices already (then ``False``).

        Raises:
            VoiceNameTakenError: the tenant has a voice of this name (checked atomically with the add).
        """
        ...

    async def forget_tenant(self, tenant: str) -> None:
        """Delete every voice of the tenant (the tenant was deleted)."""
        ...

    async def get(self, tenant: str, voice_id: str) -> CustomVoiceRecord | None: ...

    async def find_by_name(self, tenant: str, name: str) -> CustomVoiceRecord | None:
        """The tenant's voice called ``name``: one index lookup, however many voices the tenant has."""
        ...

    async def list(self, tenant: str) -> list[CustomVoiceRecord]:
        """Every voice of the tenant, oldest first (bounded by ``voices.max_per_tenant``)."""
        ...

    async def page(self, tenant: str, *, after: str | None, limit: int) -> Page[CustomVoiceRecord]:
        """The tenant's voices by id (oldest first), the first ``limit`` after the voice id ``after``."""
        ...

    async def delete(self, tenant: str, voice_id: str) -> bool: ...


class VoiceNameTakenError(Exception):
    """The tenant already has a voice of this name."""
