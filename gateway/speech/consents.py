"""Tenant-scoped consent recordings (``/v1/audio/voice_consents``): a label, a language, and the recording itself,
kept for audit as Ogg/Opus (``gateway/audio/samples.py``), never as uploaded.

A tenant only ever sees its own consents: another tenant's id answers "not found", as for voices. Ids sort by
creation time (``cons_`` + 12 hex digits of milliseconds + 12 random ones), so a list page starts right after its
``after`` cursor even when that consent was deleted meanwhile.

What a store holds is bounded: ``max_per_tenant`` consents per tenant, each at most
:data:`~gateway.audio.samples.MAX_RECORDING_S` of 16 kbit/s Opus (about 60 KB).
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from storage import RedisClient

__all__ = ["ConsentPage", "ConsentRecord", "ConsentStore", "MemoryConsentStore", "RedisConsentStore", "new_consent"]

# Adds a consent only while the tenant has fewer than ARGV[4], atomically across replicas, with its recording in a
# second hash. KEYS: the tenant's records, its recordings. ARGV: id, record (JSON), recording (bytes), limit.
_ADD_CONSENT_LUA = """
if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[4]) then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
return 1
"""
# Replaces a record only if it still exists: a rename racing a delete must not bring the consent back.
_REPLACE_LUA = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
"""


@dataclass(frozen=True, slots=True)
class ConsentRecord:
    """What the API shows of a consent (its recording is kept apart: listings never load audio)."""

    id: str
    tenant: str
    name: str
    language: str
    created_at: float
    duration_s: float
    """How long the recording lasts (its audit copy is stored beside the record)."""

    def public(self) -> dict[str, object]:
        """OpenAI's ``audio.voice_consent``."""
        return {
            "object": "audio.voice_consent",
            "id": self.id,
            "name": self.name,
            "language": self.language,
            "created_at": int(self.created_at),
        }


@dataclass(frozen=True, slots=True)
class ConsentPage:
    """One page of a tenant's consents, oldest first."""

    data: list[ConsentRecord]
    has_more: bool


def new_consent(tenant: str, name: str, language: str, duration_s: float) -> ConsentRecord:
    now = time.time()
    consent_id = f"cons_{int(now * 1000):012x}{secrets.token_hex(6)}"
    return ConsentRecord(consent_id, tenant, name, language, now, round(duration_s, 3))


class ConsentStore(Protocol):
    async def add(self, consent: ConsentRecord, recording: bytes, *, max_per_tenant: int) -> bool:
        """Store ``consent`` and its audit recording unless its tenant has ``max_per_tenant`` already (``False``)."""
        ...

    async def get(self, tenant: str, consent_id: str) -> ConsentRecord | None: ...

    async def recording(self, tenant: str, consent_id: str) -> bytes | None:
        """The audit copy of the recording (Ogg/Opus)."""
        ...

    async def page(self, tenant: str, *, after: str | None, limit: int) -> ConsentPage:
        """Up to ``limit`` consents whose id sorts after ``after`` (from the first when ``None``)."""
        ...

    async def rename(self, tenant: str, consent_id: str, name: str) -> ConsentRecord | None:
        """The consent under its new label, or ``None`` when the tenant has no such consent."""
        ...

    async def delete(self, tenant: str, consent_id: str) -> bool: ...

    async def forget_tenant(self, tenant: str) -> None:
        """Delete every consent of the tenant, recordings included (the tenant was deleted)."""
        ...


def _page(records: list[ConsentRecord], after: str | None, limit: int) -> ConsentPage:
    ordered = sorted((r for r in records if after is None or r.id > after), key=lambda r: r.id)
    return ConsentPage(ordered[:limit], len(ordered) > limit)


class MemoryConsentStore:
    """Consents of one process (the embedded default); bounded by the tenants and their cap."""

    def __init__(self) -> None:
        self._records: dict[str, dict[str, tuple[ConsentRecord, bytes]]] = {}

    async def add(self, consent: ConsentRecord, recording: bytes, *, max_per_tenant: int) -> bool:
        records = self._records.setdefault(consent.tenant, {})
        if len(records) >= max_per_tenant:
            return False
        records[consent.id] = (consent, recording)
        return True

    async def get(self, tenant: str, consent_id: str) -> ConsentRecord | None:
        entry = self._records.get(tenant, {}).get(consent_id)
        return entry[0] if entry else None

    async def recording(self, tenant: str, consent_id: str) -> bytes | None:
        entry = self._records.get(tenant, {}).get(consent_id)
        return entry[1] if entry else None

    async def page(self, tenant: str, *, after: str | None, limit: int) -> ConsentPage:
        return _page([record for record, _ in self._records.get(tenant, {}).values()], after, limit)

    async def rename(self, tenant: str, consent_id: str, name: str) -> ConsentRecord | None:
        records = self._records.get(tenant, {})
        if consent_id not in records:
            return None
        record, recording = records[consent_id]
        records[consent_id] = (renamed := replace(record, name=name), recording)
        return renamed

    async def delete(self, tenant: str, consent_id: str) -> bool:
        return self._records.get(tenant, {}).pop(consent_id, None) is not None

    async def forget_tenant(self, tenant: str) -> None:
        self._records.pop(tenant, None)


class RedisConsentStore:
    """Consents shared by every replica: per tenant, one hash of JSON records and one of recordings (raw bytes; the
    client does not decode responses, ``storage/redis.py``)."""

    def __init__(self, client: RedisClient, prefix: str = "tts:consents:") -> None:
        self._client = client
        self._prefix = prefix
        self._add = client.register_script(_ADD_CONSENT_LUA)
        self._replace = client.register_script(_REPLACE_LUA)

    def _keys(self, tenant: str) -> tuple[str, str]:
        # One hash tag for both: the scripts touch the two keys together, which Redis Cluster allows in one slot only.
        tagged = f"{self._prefix}{{{tenant}}}"
        return tagged, f"{tagged}:recordings"

    async def add(self, consent: ConsentRecord, recording: bytes, *, max_per_tenant: int) -> bool:
        record = json.dumps(asdict(consent))
        added = await self._add(keys=self._keys(consent.tenant), args=[consent.id, record, recording, max_per_tenant])
        return bool(added)

    async def get(self, tenant: str, consent_id: str) -> ConsentRecord | None:
        raw = await self._client.hget(self._keys(tenant)[0], consent_id)
        return ConsentRecord(**json.loads(raw)) if raw else None

    async def recording(self, tenant: str, consent_id: str) -> bytes | None:
        raw = await self._client.hget(self._keys(tenant)[1], consent_id)
        # Bytes from this gateway's client (it never decodes); a client that decodes could not hold audio at all.
        return raw if isinstance(raw, bytes) else None

    async def page(self, tenant: str, *, after: str | None, limit: int) -> ConsentPage:
        # A tenant holds at most its cap of records, so reading them all to sort is cheap and exact.
        raw = await self._client.hvals(self._keys(tenant)[0])
        return _page([ConsentRecord(**json.loads(item)) for item in raw], after, limit)

    async def rename(self, tenant: str, consent_id: str, name: str) -> ConsentRecord | None:
        record = await self.get(tenant, consent_id)
        if record is None:
            return None
        renamed = replace(record, name=name)
        replaced = await self._replace(keys=self._keys(tenant)[:1], args=[consent_id, json.dumps(asdict(renamed))])
        return renamed if replaced else None

    async def delete(self, tenant: str, consent_id: str) -> bool:
        records, recordings = self._keys(tenant)
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.hdel(records, consent_id)
            pipe.hdel(recordings, consent_id)
            removed, _ = await pipe.execute()
        return bool(removed)

    async def forget_tenant(self, tenant: str) -> None:
        await self._client.delete(*self._keys(tenant))
