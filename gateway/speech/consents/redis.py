"""Consents in Redis, shared by every replica: :class:`RedisConsentStore`."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from storage import Page, RedisClient
from gateway.speech.consents.base import ConsentRecord, page_of

__all__ = ["RedisConsentStore"]

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

    async def page(self, tenant: str, *, after: str | None, limit: int) -> Page[ConsentRecord]:
        # A tenant holds at most its cap of records, so reading them all to sort is cheap and exact.
        raw = await self._client.hvals(self._keys(tenant)[0])
        return page_of([ConsentRecord(**json.loads(item)) for item in raw], after, limit)

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
