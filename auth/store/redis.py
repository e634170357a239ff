"""Tenants and keys in Redis, shared by every replica: :class:`RedisAuthStore`, with the Lua scripts that keep each
change atomic."""

from __future__ import annotations

import dataclasses
import json
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING

from auth.errors import AuthBackendError, TenantNotFoundError
from auth.keys import ApiKeyRecord, generate_api_key, hash_api_key, key_hint
from auth.settings import TenantLimits, TenantScheduling
from auth.store.base import (
    DEFAULT_REVOKED_RETENTION_S,
    check_key_hash,
    live_record,
    new_generation,
    new_key_id,
    same_tenant,
)
from auth.tenants import Tenant
from storage import STORAGE_ERRORS, Page

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence

    from storage import RedisClient

__all__ = ["RedisAuthStore"]


# Every script below touches keys of the one hash tag ``{auth}`` (the prefix carries it), as Redis Cluster requires;
# the ones that reach key records by a name built from ARGV stay within that slot as well.

# Creates or replaces a tenant; a replaced one keeps its generation. The record's JSON begins with its generation
# (json.dumps keeps the order it is given), which the script swaps for the stored one: JSON strings escape their
# quotes, so the pattern cannot match inside a value. KEYS: tenants hash, names. ARGV: name, record. Returns the
# generation stored.
_PUT_TENANT_LUA = """
local record = ARGV[2]
local old = redis.call('HGET', KEYS[1], ARGV[1])
local generation = old and string.match(old, '"generation": "([0-9a-f]*)"')
if generation then
  record = string.gsub(record, '"generation": "[0-9a-f]*"', '"generation": "' .. generation .. '"', 1)
else
  generation = string.match(record, '"generation": "([0-9a-f]*)"')
end
redis.call('HSET', KEYS[1], ARGV[1], record)
redis.call('ZADD', KEYS[2], 0, ARGV[1])
return generation
"""

# Creates a key record only if the tenant exists and the hash is new, atomically, so that replicas seeding the same
# configuration at once end up with one record per hash. Returns the record (new or existing), or {} without tenant.
# KEYS: tenants hash, key record, id -> hash, tenant's key ids. ARGV: tenant, hash, id, created_at, hint.
_ADD_KEY_LUA = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return {} end
if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('HSET', KEYS[2], 'id', ARGV[3], 'tenant', ARGV[1], 'key_hash', ARGV[2], 'created_at', ARGV[4],
             'revoked', '0', 'hint', ARGV[5])
  redis.call('SET', KEYS[3], ARGV[2])
  redis.call('ZADD', KEYS[4], 0, ARGV[3])
end
return redis.call('HGETALL', KEYS[2])
"""

# Deletes the tenant and its keys' records in one step, so that no key can be added in between and survive.
# KEYS: tenants hash, names, tenant's key ids. ARGV: tenant, the prefix of key records and of id -> hash entries.
_DELETE_TENANT_LUA = """
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('ZREM', KEYS[2], ARGV[1])
for _, id in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
  local hash = redis.call('GET', ARGV[2] .. 'key-id:' .. id)
  if hash then redis.call('DEL', ARGV[2] .. 'key:' .. hash) end
  redis.call('DEL', ARGV[2] .. 'key-id:' .. id)
end
redis.call('DEL', KEYS[3])
return 1
"""

# Marks a key revoked; a key the gateway issued (it has a hint) keeps its record only for the retention time, one
# issued out of band keeps it for good (re-seeding its hash must find it revoked). KEYS: id -> hash. ARGV: prefix,
# retention in seconds. Returns 1, or 0 for an unknown id.
_REVOKE_KEY_LUA = """
local hash = redis.call('GET', KEYS[1])
if not hash then return 0 end
local record = ARGV[1] .. 'key:' .. hash
if redis.call('EXISTS', record) == 0 then return 0 end
if redis.call('HGET', record, 'revoked') == '1' then return 1 end
redis.call('HSET', record, 'revoked', '1')
if redis.call('HGET', record, 'hint') ~= '' then
  redis.call('EXPIRE', record, ARGV[2])
  redis.call('EXPIRE', KEYS[1], ARGV[2])
end
return 1
"""

# One page of a tenant's keys, records included, in one round trip; ids whose records have expired (revoked keys
# past their retention) leave the index on the way. KEYS: tenant's key ids. ARGV: prefix, lower bound, count.
_PAGE_KEYS_LUA = """
local rows = {}
local wanted = tonumber(ARGV[3])
local lower = ARGV[2]
while #rows < wanted do
  local ids = redis.call('ZRANGE', KEYS[1], lower, '+', 'BYLEX', 'LIMIT', 0, wanted - #rows)
  if #ids == 0 then break end
  for _, id in ipairs(ids) do
    local hash = redis.call('GET', ARGV[1] .. 'key-id:' .. id)
    local fields = hash and redis.call('HGETALL', ARGV[1] .. 'key:' .. hash) or {}
    if #fields == 0 then redis.call('ZREM', KEYS[1], id) else rows[#rows + 1] = fields end
  end
  lower = '(' .. ids[#ids]
end
return rows
"""


@contextmanager
def _backend_errors() -> Iterator[None]:
    try:
        yield
    except STORAGE_ERRORS as exc:
        raise AuthBackendError(f"auth store unavailable: {type(exc).__name__}: {exc}") from exc
    except (ValueError, KeyError, TypeError) as exc:  # a record this code cannot read
        raise AuthBackendError(f"corrupt auth record: {type(exc).__name__}") from exc


def _text(value: bytes | str) -> str:
    # The client may or may not have been created with decode_responses=True.
    return value.decode() if isinstance(value, bytes) else value


def _tenant_to_json(tenant: Tenant, generation: str) -> str:
    models = None if tenant.models is None else sorted(tenant.models)
    return json.dumps(
        {
            "generation": generation,  # first: _PUT_TENANT_LUA finds it there
            "limits": tenant.limits.model_dump(),
            "models": models,
            "scheduling": tenant.scheduling.model_dump(),
            "pronunciation_dictionaries": list(tenant.pronunciation_dictionaries),
            "control_tokens": tenant.control_tokens,
            "voice_aliases": dict(tenant.voice_aliases),
        }
    )


def _tenant_from_json(name: str, raw: bytes | str) -> Tenant:
    data = json.loads(raw)
    models = data["models"]
    limits = TenantLimits.model_validate(data["limits"])
    scheduling = TenantScheduling.model_validate(data.get("scheduling", {}))  # absent from records before it existed
    return Tenant(
        name=name,
        limits=limits,
        models=None if models is None else frozenset(models),
        generation=data.get("generation", ""),
        scheduling=scheduling,
        pronunciation_dictionaries=tuple(data.get("pronunciation_dictionaries", ())),
        control_tokens=data.get("control_tokens", False),
        voice_aliases=tuple(sorted(data.get("voice_aliases", {}).items())),
    )


def _record_from_fields(fields: Mapping[str, str]) -> ApiKeyRecord:
    return ApiKeyRecord(
        id=fields["id"],
        tenant=fields["tenant"],
        key_hash=fields["key_hash"],
        created_at=float(fields["created_at"]),
        revoked=fields["revoked"] == "1",
        hint=fields["hint"],
    )


def _decode_hash(raw: Mapping[bytes | str, bytes | str]) -> dict[str, str]:
    return {_text(field): _text(value) for field, value in raw.items()}


def _record_from_flat(flat: Sequence[bytes | str]) -> ApiKeyRecord:
    fields = [_text(item) for item in flat]
    return _record_from_fields(dict(zip(fields[::2], fields[1::2], strict=True)))


def _lex_after(after: str | None) -> str:
    """The lower bound of a ``ZRANGE ... BYLEX`` that starts right after ``after``."""
    return "-" if after is None else f"({after}"


class RedisAuthStore:
    """Tenants and keys in Redis, shared by every replica.

    Layout (``P`` is the prefix; its ``{auth}`` hash tag keeps every key in one Redis Cluster slot, which the
    multi-key scripts need):

    * ``P tenants`` — hash: tenant name -> JSON ``{"generation", "limits", "models", "scheduling",
      "pronunciation_dictionaries", "control_tokens", "voice_aliases"}``
    * ``P tenant-names`` — sorted set of the names (all scored 0): pages in name order
    * ``P key:<sha256>`` — hash: ``id``, ``tenant``, ``key_hash``, ``created_at``, ``revoked`` (``0``/``1``), ``hint``
    * ``P key-id:<id>`` — string: the key's sha256 (revocation by id)
    * ``P tenant-keys:<name>`` — sorted set of the tenant's key ids (scored 0; ids sort by creation)

    Methods as on :class:`~auth.store.AuthStore`.
    """

    def __init__(
        self,
        client: RedisClient,
        prefix: str = "tts:{auth}:",
        *,
        owns_client: bool = False,
        revoked_retention_s: int = DEFAULT_REVOKED_RETENTION_S,
    ) -> None:
        """Use ``client`` (``decode_responses`` either way) under ``prefix``.

        Args:
            client: An asyncio Redis or Redis Cluster client.
            prefix: Prefix of every key this store writes; on Redis Cluster it must carry a hash tag.
            owns_client: Close ``client`` in :meth:`close`; leave it ``False`` when the client is shared.
            revoked_retention_s: How long a revoked key's record stays listed.
        """
        self._redis = client
        self._prefix = prefix
        self._owns_client = owns_client
        self._retention_s = revoked_retention_s
        self._tenants_key = f"{prefix}tenants"
        self._names_key = f"{prefix}tenant-names"
        self._put_tenant = client.register_script(_PUT_TENANT_LUA)
        self._add_key = client.register_script(_ADD_KEY_LUA)
        self._delete_tenant = client.register_script(_DELETE_TENANT_LUA)
        self._revoke_key = client.register_script(_REVOKE_KEY_LUA)
        self._page_keys = client.register_script(_PAGE_KEYS_LUA)

    async def put_tenant(self, tenant: Tenant) -> Tenant:
        record = _tenant_to_json(tenant, new_generation())
        with _backend_errors():
            generation = await self._put_tenant(keys=[self._tenants_key, self._names_key], args=[tenant.name, record])
            return dataclasses.replace(tenant, generation=_text(generation))

    async def get_tenant(self, name: str) -> Tenant | None:
        with _backend_errors():
            raw = await self._redis.hget(self._tenants_key, name)
            return None if raw is None else _tenant_from_json(name, raw)

    async def page_tenants(self, *, after: str | None, limit: int) -> Page[Tenant]:
        with _backend_errors():
            raw_names = await self._redis.zrange(
                self._names_key, _lex_after(after), "+", bylex=True, offset=0, num=limit + 1
            )
            names = [_text(name) for name in raw_names if isinstance(name, (bytes, str))]
            records = await self._redis.hmget(self._tenants_key, names) if names else []
            tenants = [_tenant_from_json(n, raw) for n, raw in zip(names, records, strict=True) if raw is not None]
        return Page.of(tenants, limit)

    async def delete_tenant(self, name: str) -> bool:
        keys = [self._tenants_key, self._names_key, self._tenant_keys(name)]
        with _backend_errors():
            return bool(await self._delete_tenant(keys=keys, args=[name, self._prefix]))

    async def create_key(self, tenant: str) -> tuple[str, ApiKeyRecord]:
        key = generate_api_key()
        return key, await self._add(tenant, hash_api_key(key), key_hint(key))

    async def add_key_hash(self, tenant: str, key_hash: str) -> ApiKeyRecord:
        check_key_hash(key_hash)
        return same_tenant(await self._add(tenant, key_hash, ""), tenant)

    async def find_key(self, key_hash: str) -> ApiKeyRecord | None:
        with _backend_errors():
            fields = _decode_hash(await self._redis.hgetall(self._key(key_hash)))
            return live_record(_record_from_fields(fields) if fields else None, key_hash)

    async def revoke_key(self, key_id: str) -> bool:
        with _backend_errors():
            revoked = await self._revoke_key(keys=[self._key_id(key_id)], args=[self._prefix, self._retention_s])
            return bool(revoked)

    async def list_keys(self, tenant: str) -> list[ApiKeyRecord]:
        records: list[ApiKeyRecord] = []
        after: str | None = None
        while True:  # a tenant's keys are few; pages keep each script short all the same
            page = await self.page_keys(tenant, after=after, limit=500)
            records.extend(page.data)
            if not page.has_more:
                return records
            after = page.data[-1].id

    async def page_keys(self, tenant: str, *, after: str | None, limit: int) -> Page[ApiKeyRecord]:
        with _backend_errors():
            args: list[str | int] = [self._prefix, _lex_after(after), limit + 1]
            rows = await self._page_keys(keys=[self._tenant_keys(tenant)], args=args)
            return Page.of([_record_from_flat(row) for row in rows], limit)

    async def close(self) -> None:
        if self._owns_client:
            with _backend_errors():
                await self._redis.aclose()

    async def _add(self, tenant: str, key_hash: str, hint: str) -> ApiKeyRecord:
        key_id = new_key_id()
        keys = [self._tenants_key, self._key(key_hash), self._key_id(key_id), self._tenant_keys(tenant)]
        with _backend_errors():
            flat = await self._add_key(keys=keys, args=[tenant, key_hash, key_id, repr(time.time()), hint])
            if not flat:
                raise TenantNotFoundError(tenant)
            return _record_from_flat(flat)

    def _key(self, key_hash: str) -> str:
        return f"{self._prefix}key:{key_hash}"

    def _key_id(self, key_id: str) -> str:
        return f"{self._prefix}key-id:{key_id}"

    def _tenant_keys(self, tenant: str) -> str:
        return f"{self._prefix}tenant-keys:{tenant}"
