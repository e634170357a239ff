"""Dictionaries in Redis, shared by the replicas: :class:`RedisDictionaryStore`.

A tenant's dictionaries live under one hash tag (``{<tenant>}``: one Redis Cluster slot for the scripts): ``P pron:{t}``
(hash: id -> the dictionary's JSON, with the latest rules), ``P pron-ids:{t}`` (sorted set of ids, for pages; ids sort
by creation), ``P pron-rules:{t}`` (hash: ``<id>/<version_id>`` -> that version's rules) and ``P pron-latest:{t}``
(hash: id -> its latest version id). A request reads, in one script, the latest version of each dictionary it applies
and whether each version it pins is still kept, before it finds their compiled lexicon in memory: a version one
replica compiled is refused there too once dropped. A new version is written only if the dictionary's latest version is
still the one it was made from (a script compares), so concurrent changes on any replicas are applied one after the
other, none lost.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from storage import RedisListing

if TYPE_CHECKING:
    from collections.abc import Sequence

    from gateway.text.lexicon import Rule
    from storage import RedisClient
from gateway.speech.dictionaries.base import DictionaryRecord, rules_from, rules_json, text_of

__all__ = ["RedisDictionaryStore"]

_UPDATE_TRIES = 5


_ADD_LUA = """
if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[4]) then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], 0, ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1] .. '/' .. ARGV[3], ARGV[5])
redis.call('HSET', KEYS[4], ARGV[1], ARGV[3])
return 1
"""
# Writes a new latest version if the latest is still ARGV[2]. KEYS: records, rules, latest. ARGV: id, made from,
# record, version id, rules, then the version ids to delete. Returns 1, 0 (changed meanwhile) or -1 (gone).
_REPLACE_LUA = """
local current = redis.call('HGET', KEYS[3], ARGV[1])
if not current then return -1 end
if current ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('HSET', KEYS[2], ARGV[1] .. '/' .. ARGV[4], ARGV[5])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[4])
for i = 6, #ARGV do redis.call('HDEL', KEYS[2], ARGV[1] .. '/' .. ARGV[i]) end
return 1
"""

# The version each locator names: a pinned one still kept, or the latest; '' where none. KEYS: rules, latest. ARGV: a
# dictionary id and a version id ('' for the latest) per locator.
_VERSIONS_LUA = """
local found = {}
for i = 1, #ARGV, 2 do
  local id, version = ARGV[i], ARGV[i + 1]
  if version == '' then
    found[#found + 1] = redis.call('HGET', KEYS[2], id) or ''
  elseif redis.call('HEXISTS', KEYS[1], id .. '/' .. version) == 1 then
    found[#found + 1] = version
  else
    found[#found + 1] = ''
  end
end
return found
"""


class RedisDictionaryStore(RedisListing[DictionaryRecord]):
    """Dictionaries shared by every replica (layout in the module's docstring)."""

    def __init__(self, client: RedisClient, prefix: str = "tts:") -> None:
        # The tenant's records, ordered ids, versions' rules and latest versions.
        layout = ("pron", "pron-ids", "pron-rules", "pron-latest")
        super().__init__(client, prefix, layout, ids="pron-ids", decode=DictionaryRecord.from_json)
        self._add = client.register_script(_ADD_LUA)
        self._replace = client.register_script(_REPLACE_LUA)
        self._versions = client.register_script(_VERSIONS_LUA)

    async def add(self, record: DictionaryRecord, *, max_per_tenant: int) -> bool:
        args: list[str | int] = [record.id, record.to_json(), record.version_id, max_per_tenant]
        args.append(rules_json(record.rules))
        return bool(int(await self._add(keys=self._keys(record.tenant), args=args)))

    async def rules(self, tenant: str, dictionary_id: str, version_id: str) -> tuple[Rule, ...] | None:
        raw = await self._client.hget(self._keys(tenant)[2], f"{dictionary_id}/{version_id}")
        return rules_from(json.loads(raw)) if raw else None

    async def versions(self, tenant: str, locators: Sequence[tuple[str, str | None]]) -> list[str | None]:
        _, _, rules, latest = self._keys(tenant)
        args = [part for dictionary_id, version_id in locators for part in (dictionary_id, version_id or "")]
        found = await self._versions(keys=[rules, latest], args=args)
        return [text_of(version) or None for version in found]

    async def replace(self, updated: DictionaryRecord, *, made_from: str, dropped: Sequence[str]) -> bool | None:
        records, _, rules, latest = self._keys(updated.tenant)
        args = [updated.id, made_from, updated.to_json(), updated.version_id, rules_json(updated.rules), *dropped]
        done = int(await self._replace(keys=[records, rules, latest], args=args))
        return None if done < 0 else bool(done)
