"""The custom voice in Redis, shared by every replica."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import TYPE_CHECKING

from storage import RedisListing

if TYPE_CHECKING:
    from storage import RedisClient
from gateway.speech.voices.base import CustomVoiceRecord, VoiceNameTakenError, from_json

__all__ = ["RedisVoiceStore"]

# A tenant's voices in Redis, under one hash tag (``storage.RedisListing``): records by id, ids by name (the name
# index) and the ids in order (for pages; ids sort by creation).

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


class RedisVoiceStore(RedisListing[CustomVoiceRecord]):
    """Voices shared by every replica (layout above the scripts)."""

    def __init__(self, client: RedisClient, prefix: str = "tts:") -> None:
        super().__init__(client, prefix, ("voices", "voice-names", "voice-ids"), ids="voice-ids", decode=from_json)
        self._add = client.register_script(_ADD_VOICE_LUA)
        self._by_name = client.register_script(_BY_NAME_LUA)
        self._delete = client.register_script(_DELETE_VOICE_LUA)

    async def add(self, voice: CustomVoiceRecord, *, max_per_tenant: int) -> bool:
        args: list[str | int] = [voice.id, json.dumps(asdict(voice)), max_per_tenant, voice.name]
        added = int(await self._add(keys=self._keys(voice.tenant), args=args))
        if added < 0:
            raise VoiceNameTakenError(voice.name)
        return added > 0

    async def find_by_name(self, tenant: str, name: str) -> CustomVoiceRecord | None:
        records, names, _ = self._keys(tenant)
        raw = await self._by_name(keys=[records, names], args=[name])
        return from_json(raw) if raw else None

    async def list(self, tenant: str) -> list[CustomVoiceRecord]:
        raw = await self._client.hvals(self._keys(tenant)[0])
        return sorted((from_json(item) for item in raw), key=lambda v: (v.created_at, v.id))

    async def delete(self, tenant: str, voice_id: str) -> bool:
        return bool(await self._delete(keys=self._keys(tenant), args=[voice_id]))
