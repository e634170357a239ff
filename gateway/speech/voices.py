"""Tenant-scoped custom voices: a name and a speaker (an engine's speaker embedding, a seed to derive one, or what the
engine made of an audio sample).

A tenant only ever sees its own voices: looking up another tenant's id answers "not found", so ids do not leak.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from redis.asyncio import Redis

__all__ = ["CustomVoiceRecord", "MemoryVoiceStore", "RedisVoiceStore", "VoiceStore", "VoiceType", "new_voice"]

# Adds a voice only while the tenant has fewer than ARGV[3], atomically, so that concurrent creations (on any
# replica) cannot overshoot the limit. KEYS: the tenant's hash. ARGV: voice id, record, limit. Returns 1 or 0.
_ADD_VOICE_LUA = """
if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[3]) then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
"""

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
    voice_id = f"voice_{secrets.token_hex(12)}"
    return CustomVoiceRecord(voice_id, tenant, name, model, speaker, time.time(), kind, consent)


def _from_json(raw: bytes | str) -> CustomVoiceRecord:
    fields: dict[str, Any] = json.loads(raw)
    # Records stored before voices had a type: what their speaker says they were made from.
    fields.setdefault("type", "seed" if fields["speaker"].startswith(SEED_SPEAKER_PREFIX) else "speaker")
    return CustomVoiceRecord(**fields)


class VoiceStore(Protocol):
    async def add(self, voice: CustomVoiceRecord, *, max_per_tenant: int) -> bool:
        """Store ``voice`` unless its tenant has ``max_per_tenant`` voices already (then ``False``)."""
        ...

    async def forget_tenant(self, tenant: str) -> None:
        """Delete every voice of the tenant (the tenant was deleted)."""
        ...

    async def get(self, tenant: str, voice_id: str) -> CustomVoiceRecord | None: ...
    async def find_by_name(self, tenant: str, name: str) -> CustomVoiceRecord | None: ...
    async def list(self, tenant: str) -> list[CustomVoiceRecord]: ...
    async def delete(self, tenant: str, voice_id: str) -> bool: ...


class MemoryVoiceStore:
    """Voices of one process (the embedded default)."""

    def __init__(self) -> None:
        self._voices: dict[str, dict[str, CustomVoiceRecord]] = {}

    async def add(self, voice: CustomVoiceRecord, *, max_per_tenant: int) -> bool:
        voices = self._voices.setdefault(voice.tenant, {})
        if len(voices) >= max_per_tenant:
            return False
        voices[voice.id] = voice
        return True

    async def forget_tenant(self, tenant: str) -> None:
        self._voices.pop(tenant, None)

    async def get(self, tenant: str, voice_id: str) -> CustomVoiceRecord | None:
        return self._voices.get(tenant, {}).get(voice_id)

    async def find_by_name(self, tenant: str, name: str) -> CustomVoiceRecord | None:
        return next((v for v in await self.list(tenant) if v.name == name), None)

    async def list(self, tenant: str) -> list[CustomVoiceRecord]:
        return sorted(self._voices.get(tenant, {}).values(), key=lambda v: v.created_at)

    async def delete(self, tenant: str, voice_id: str) -> bool:
        return self._voices.get(tenant, {}).pop(voice_id, None) is not None


class RedisVoiceStore:
    """Voices shared by every replica: one Redis hash per tenant, voice id -> JSON record."""

    def __init__(self, client: Redis, prefix: str = "tts:voices:") -> None:
        self._client = client
        self._prefix = prefix
        self._add = client.register_script(_ADD_VOICE_LUA)

    def _key(self, tenant: str) -> str:
        return f"{self._prefix}{tenant}"

    async def add(self, voice: CustomVoiceRecord, *, max_per_tenant: int) -> bool:
        added = await self._add(
            keys=[self._key(voice.tenant)], args=[voice.id, json.dumps(asdict(voice)), max_per_tenant]
        )
        return bool(added)

    async def forget_tenant(self, tenant: str) -> None:
        await self._client.delete(self._key(tenant))

    async def get(self, tenant: str, voice_id: str) -> CustomVoiceRecord | None:
        raw = await self._client.hget(self._key(tenant), voice_id)
        return _from_json(raw) if raw else None

    async def find_by_name(self, tenant: str, name: str) -> CustomVoiceRecord | None:
        return next((v for v in await self.list(tenant) if v.name == name), None)

    async def list(self, tenant: str) -> list[CustomVoiceRecord]:
        raw = await self._client.hvals(self._key(tenant))
        return sorted((_from_json(item) for item in raw), key=lambda v: v.created_at)

    async def delete(self, tenant: str, voice_id: str) -> bool:
        removed: int = await self._client.hdel(self._key(tenant), voice_id)
        return removed > 0
