"""Tenant-scoped custom voices: a name and a speaker (an engine's speaker embedding, a seed to derive one, or what the
engine made of an audio sample).

A tenant only ever sees its own voices: looking up another tenant's id answers "not found", so ids do not leak.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from gateway.schemas import CUSTOM_VOICE_PREFIX
from storage import Page, sortable_id

if TYPE_CHECKING:
    from storage import RedisClient

__all__ = [
    "CustomVoiceRecord",
    "MemoryVoiceStore",
    "RedisVoiceStore",
    "VoiceNameTakenError",
    "VoiceStore",
    "VoiceType",
    "new_voice",
]

# A tenant's voices in Redis, under one hash tag ({<tenant>}: one Redis Cluster slot for the scripts): records by
# id, ids by name (the name index) and the ids in order (for pages; ids sort by creation).

# Adds a voice only while the tenant has fewer than ARGV[3] and none of its name, atomically, so that concurrent
# creations (on any replica) can overshoot neither. KEYS: records, names, ids. ARGV: id, record, limit, name.
# Returns 1, 0 (at the limit) or -1 (the name is taken).
_ADD_VOICE_LUA = """
if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[3]) then return 0 end
if redis.call('HSETNX', KEYS[2], ARGV[4], ARGV[1]) == 0 then return -1 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[3], 0, ARGV[1])
return 1
"""
# The record of the voice of this name, in one round trip. KEYS: records, names. ARGV: name.
_BY_NAME_LUA = """
local id = redis.call('HGET', KEYS[2], ARGV[1])
if not id then return false end
return redis.call('HGET', KEYS[1], id)
"""
# Deletes a voice and its entries in the indexes. KEYS: records, names, ids. ARGV: id. Returns 1, or 0 if unknown.
_DELETE_VOICE_LUA = """
local record = redis.call('HGET', KEYS[1], ARGV[1])
if not record then return 0 end
local name = cjson.decode(record)['name']
if redis.call('HGET', KEYS[2], name) == ARGV[1] then redis.call('HDEL', KEYS[2], name) end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
return 1
"""
# One page of records in id order. KEYS: records, ids. ARGV: lower bound (BYLEX), count.
_PAGE_LUA = """
local ids = redis.call('ZRANGE', KEYS[2], ARGV[1], '+', 'BYLEX', 'LIMIT', 0, tonumber(ARGV[2]))
if #ids == 0 then return {} end
return redis.call('HMGET', KEYS[1], unpack(ids))
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
    voice_id = sortable_id(CUSTOM_VOICE_PREFIX)
    return CustomVoiceRecord(voice_id, tenant, name, model, speaker, time.time(), kind, consent)


def _from_json(raw: bytes | str) -> CustomVoiceRecord:
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


class MemoryVoiceStore:
    """Voices of one process (the embedded default)."""

    def __init__(self) -> None:
        self._voices: dict[str, dict[str, CustomVoiceRecord]] = {}

    async def add(self, voice: CustomVoiceRecord, *, max_per_tenant: int) -> bool:
        voices = self._voices.setdefault(voice.tenant, {})
        if len(voices) >= max_per_tenant:
            return False
        if any(existing.name == voice.name for existing in voices.values()):
            raise VoiceNameTakenError(voice.name)
        voices[voice.id] = voice
        return True

    async def forget_tenant(self, tenant: str) -> None:
        self._voices.pop(tenant, None)

    async def get(self, tenant: str, voice_id: str) -> CustomVoiceRecord | None:
        return self._voices.get(tenant, {}).get(voice_id)

    async def find_by_name(self, tenant: str, name: str) -> CustomVoiceRecord | None:
        return next((v for v in self._voices.get(tenant, {}).values() if v.name == name), None)

    async def list(self, tenant: str) -> list[CustomVoiceRecord]:
        return sorted(self._voices.get(tenant, {}).values(), key=lambda v: (v.created_at, v.id))

    async def page(self, tenant: str, *, after: str | None, limit: int) -> Page[CustomVoiceRecord]:
        voices = [voice for voice in await self.list(tenant) if after is None or voice.id > after]
        return Page.of(voices[: limit + 1], limit)

    async def delete(self, tenant: str, voice_id: str) -> bool:
        return self._voices.get(tenant, {}).pop(voice_id, None) is not None


class RedisVoiceStore:
    """Voices shared by every replica (layout above the scripts)."""

    def __init__(self, client: RedisClient, prefix: str = "tts:") -> None:
        self._client = client
        self._prefix = prefix
        self._add = client.register_script(_ADD_VOICE_LUA)
        self._by_name = client.register_script(_BY_NAME_LUA)
        self._delete = client.register_script(_DELETE_VOICE_LUA)
        self._page = client.register_script(_PAGE_LUA)

    def _keys(self, tenant: str) -> tuple[str, str, str]:
        """The tenant's records, name index and ordered ids."""
        tag = f"{{{tenant}}}"
        return f"{self._prefix}voices:{tag}", f"{self._prefix}voice-names:{tag}", f"{self._prefix}voice-ids:{tag}"

    async def add(self, voice: CustomVoiceRecord, *, max_per_tenant: int) -> bool:
        args: list[str | int] = [voice.id, json.dumps(asdict(voice)), max_per_tenant, voice.name]
        added = int(await self._add(keys=self._keys(voice.tenant), args=args))
        if added < 0:
            raise VoiceNameTakenError(voice.name)
        return added > 0

    async def forget_tenant(self, tenant: str) -> None:
        await self._client.delete(*self._keys(tenant))

    async def get(self, tenant: str, voice_id: str) -> CustomVoiceRecord | None:
        raw = await self._client.hget(self._keys(tenant)[0], voice_id)
        return _from_json(raw) if raw else None

    async def find_by_name(self, tenant: str, name: str) -> CustomVoiceRecord | None:
        records, names, _ = self._keys(tenant)
        raw = await self._by_name(keys=[records, names], args=[name])
        return _from_json(raw) if raw else None

    async def list(self, tenant: str) -> list[CustomVoiceRecord]:
        raw = await self._client.hvals(self._keys(tenant)[0])
        return sorted((_from_json(item) for item in raw), key=lambda v: (v.created_at, v.id))

    async def page(self, tenant: str, *, after: str | None, limit: int) -> Page[CustomVoiceRecord]:
        records, _, ids = self._keys(tenant)
        lower = "-" if after is None else f"({after}"
        raw = await self._page(keys=[records, ids], args=[lower, limit + 1])
        return Page.of([_from_json(item) for item in raw if item], limit)

    async def delete(self, tenant: str, voice_id: str) -> bool:
        return bool(await self._delete(keys=self._keys(tenant), args=[voice_id]))
