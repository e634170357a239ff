"""Where tenants and API keys live: in memory (one process) or in Redis (shared by every replica).

The stores here answer from their backend every time; a replica's memory of recent answers, invalidated by the
revocation channel, is :mod:`auth.cached`. What they hold is bounded by what exists: a deleted tenant takes its key
records with it, and a revoked key leaves its record only for ``revoked_retention_s`` (for the audit listing), except
a key issued out of band (configured by its hash), whose revoked record stays so that re-seeding the configuration
cannot bring it back.
"""

from __future__ import annotations

import dataclasses
import hmac
import json
import secrets
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol

from auth.errors import AuthBackendError, TenantNotFoundError
from auth.keys import ApiKeyRecord, generate_api_key, hash_api_key, is_key_hash, key_hint
from auth.settings import TenantLimits, TenantScheduling
from auth.tenants import Tenant
from storage import STORAGE_ERRORS, Page, sortable_id

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence

    from storage import RedisClient

__all__ = ["DEFAULT_REVOKED_RETENTION_S", "AuthStore", "ForwardingAuthStore", "MemoryAuthStore", "RedisAuthStore"]

DEFAULT_REVOKED_RETENTION_S = 30 * 24 * 3600
"""How long the record of a revoked key (issued by the gateway) stays listed for audit."""


class AuthStore(Protocol):
    """Tenants and API keys. Implementations: :class:`MemoryAuthStore`, :class:`RedisAuthStore`.

    Backend failures raise :class:`~auth.errors.AuthBackendError`.
    """

    async def put_tenant(self, tenant: Tenant) -> Tenant:
        """Create the tenant, or replace the one of that name (its keys and generation stay); returns it as stored.

        A new tenant gets a random :attr:`~auth.tenants.Tenant.generation`, whatever ``tenant`` carries.
        """

    async def get_tenant(self, name: str) -> Tenant | None:
        """The tenant called ``name``, or ``None``."""

    async def page_tenants(self, *, after: str | None, limit: int) -> Page[Tenant]:
        """Tenants by name, the first ``limit`` after ``after`` (a name, which need not exist any more)."""

    async def delete_tenant(self, name: str) -> bool:
        """Delete the tenant and its keys' records; ``False`` when there was no such tenant.

        A tenant created again under the same name starts without keys.
        """

    async def create_key(self, tenant: str) -> tuple[str, ApiKeyRecord]:
        """Issue a new key for ``tenant``: the plaintext is returned this once and only its hash is stored.

        Raises:
            TenantNotFoundError: No such tenant.
        """

    async def add_key_hash(self, tenant: str, key_hash: str) -> ApiKeyRecord:
        """Register a key issued out of band by its hex SHA-256. Idempotent: a known hash returns its record as is.

        Raises:
            TenantNotFoundError: No such tenant.
            ValueError: ``key_hash`` is not a lowercase hex SHA-256, or the key belongs to another tenant.
        """

    async def find_key(self, key_hash: str) -> ApiKeyRecord | None:
        """The live key with this hash; ``None`` when it is unknown or revoked."""

    async def revoke_key(self, key_id: str) -> bool:
        """Revoke the key; ``False`` when no key has this id (revoking twice is ``True`` both times)."""

    async def list_keys(self, tenant: str) -> list[ApiKeyRecord]:
        """The tenant's keys, revoked ones still retained included, oldest first."""

    async def page_keys(self, tenant: str, *, after: str | None, limit: int) -> Page[ApiKeyRecord]:
        """The tenant's keys by id (oldest first), the first ``limit`` after the key id ``after``."""

    async def close(self) -> None:
        """Release what the store holds."""


class ForwardingAuthStore:
    """An :class:`AuthStore` that hands every call to ``inner``: the base of stores that add to some of them."""

    def __init__(self, inner: AuthStore) -> None:
        self._inner = inner

    async def put_tenant(self, tenant: Tenant) -> Tenant:
        return await self._inner.put_tenant(tenant)

    async def get_tenant(self, name: str) -> Tenant | None:
        return await self._inner.get_tenant(name)

    async def page_tenants(self, *, after: str | None, limit: int) -> Page[Tenant]:
        return await self._inner.page_tenants(after=after, limit=limit)

    async def delete_tenant(self, name: str) -> bool:
        return await self._inner.delete_tenant(name)

    async def create_key(self, tenant: str) -> tuple[str, ApiKeyRecord]:
        return await self._inner.create_key(tenant)

    async def add_key_hash(self, tenant: str, key_hash: str) -> ApiKeyRecord:
        return await self._inner.add_key_hash(tenant, key_hash)

    async def find_key(self, key_hash: str) -> ApiKeyRecord | None:
        return await self._inner.find_key(key_hash)

    async def revoke_key(self, key_id: str) -> bool:
        return await self._inner.revoke_key(key_id)

    async def list_keys(self, tenant: str) -> list[ApiKeyRecord]:
        return await self._inner.list_keys(tenant)

    async def page_keys(self, tenant: str, *, after: str | None, limit: int) -> Page[ApiKeyRecord]:
        return await self._inner.page_keys(tenant, after=after, limit=limit)

    async def close(self) -> None:
        await self._inner.close()


def _new_generation() -> str:
    return secrets.token_hex(8)


def _new_key_id() -> str:
    return sortable_id("key_")


def _check_hash(key_hash: str) -> None:
    if not is_key_hash(key_hash):
        raise ValueError("key hash must be a lowercase hex SHA-256 (64 characters)")


def _same_tenant(record: ApiKeyRecord, tenant: str) -> ApiKeyRecord:
    if record.tenant != tenant:
        raise ValueError(f"key {record.id} already belongs to tenant {record.tenant!r}")
    return record


def _live(record: ApiKeyRecord | None, key_hash: str) -> ApiKeyRecord | None:
    # The lookup itself is by hash, so its timing reveals nothing useful about the key; the final check is still
    # constant-time so that no store implementation can turn into a string-compare oracle.
    if record is None or record.revoked or not hmac.compare_digest(record.key_hash, key_hash):
        return None
    return record


def _after(items: Sequence[str], after: str | None) -> list[str]:
    return sorted(item for item in items if after is None or item > after)


class MemoryAuthStore:
    """Tenants and keys in this process only: for a single replica and for tests (methods as on :class:`AuthStore`).

    Revoked keys stay listed for ``revoked_retention_s`` here too, so both stores answer alike.
    """

    def __init__(self, *, revoked_retention_s: float = DEFAULT_REVOKED_RETENTION_S) -> None:
        """Start empty."""
        self._tenants: dict[str, Tenant] = {}
        self._keys: dict[str, ApiKeyRecord] = {}  # by key hash
        self._hash_by_id: dict[str, str] = {}
        self._expiries: dict[str, float] = {}  # key hash -> when its revoked record goes
        self._retention_s = revoked_retention_s

    async def put_tenant(self, tenant: Tenant) -> Tenant:
        existing = self._tenants.get(tenant.name)
        generation = existing.generation if existing is not None else _new_generation()
        stored = self._tenants[tenant.name] = dataclasses.replace(tenant, generation=generation)
        return stored

    async def get_tenant(self, name: str) -> Tenant | None:
        return self._tenants.get(name)

    async def page_tenants(self, *, after: str | None, limit: int) -> Page[Tenant]:
        names = _after(list(self._tenants), after)[: limit + 1]
        return Page.of([self._tenants[name] for name in names], limit)

    async def delete_tenant(self, name: str) -> bool:
        if self._tenants.pop(name, None) is None:
            return False
        for record in self._records_of(name):
            self._forget(record)
        return True

    async def create_key(self, tenant: str) -> tuple[str, ApiKeyRecord]:
        key = generate_api_key()
        return key, self._add(tenant, hash_api_key(key), key_hint(key))

    async def add_key_hash(self, tenant: str, key_hash: str) -> ApiKeyRecord:
        _check_hash(key_hash)
        existing = self._record(key_hash)
        return _same_tenant(existing, tenant) if existing else self._add(tenant, key_hash, "")

    async def find_key(self, key_hash: str) -> ApiKeyRecord | None:
        return _live(self._record(key_hash), key_hash)

    async def revoke_key(self, key_id: str) -> bool:
        key_hash = self._hash_by_id.get(key_id)
        if key_hash is None or (record := self._record(key_hash)) is None:
            return False
        if not record.revoked:
            self._keys[key_hash] = _revoked(record)
            if record.hint:  # issued here: its record is only kept for the audit listing
                self._expiries[key_hash] = time.monotonic() + self._retention_s
        return True

    async def list_keys(self, tenant: str) -> list[ApiKeyRecord]:
        return sorted(self._records_of(tenant), key=lambda record: record.id)

    async def page_keys(self, tenant: str, *, after: str | None, limit: int) -> Page[ApiKeyRecord]:
        records = [record for record in await self.list_keys(tenant) if after is None or record.id > after]
        return Page.of(records[: limit + 1], limit)

    async def close(self) -> None:
        return None

    def _add(self, tenant: str, key_hash: str, hint: str) -> ApiKeyRecord:
        if tenant not in self._tenants:
            raise TenantNotFoundError(tenant)
        record = ApiKeyRecord(id=_new_key_id(), tenant=tenant, key_hash=key_hash, created_at=time.time(), hint=hint)
        self._keys[key_hash] = record
        self._hash_by_id[record.id] = key_hash
        return record

    def _record(self, key_hash: str) -> ApiKeyRecord | None:
        record = self._keys.get(key_hash)
        expiry = self._expiries.get(key_hash)
        if record is not None and expiry is not None and expiry <= time.monotonic():
            self._forget(record)
            return None
        return record

    def _forget(self, record: ApiKeyRecord) -> None:
        self._keys.pop(record.key_hash, None)
        self._hash_by_id.pop(record.id, None)
        self._expiries.pop(record.key_hash, None)

    def _records_of(self, tenant: str) -> list[ApiKeyRecord]:
        records = (self._record(key_hash) for key_hash in list(self._keys))
        return [record for record in records if record is not None and record.tenant == tenant]


def _revoked(record: ApiKeyRecord) -> ApiKeyRecord:
    return dataclasses.replace(record, revoked=True)


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

    * ``P tenants`` — hash: tenant name -> JSON ``{"generation", "limits", "models", "scheduling"}``
    * ``P tenant-names`` — sorted set of the names (all scored 0): pages in name order
    * ``P key:<sha256>`` — hash: ``id``, ``tenant``, ``key_hash``, ``created_at``, ``revoked`` (``0``/``1``), ``hint``
    * ``P key-id:<id>`` — string: the key's sha256 (revocation by id)
    * ``P tenant-keys:<name>`` — sorted set of the tenant's key ids (scored 0; ids sort by creation)

    Methods as on :class:`AuthStore`.
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
        record = _tenant_to_json(tenant, _new_generation())
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
        _check_hash(key_hash)
        return _same_tenant(await self._add(tenant, key_hash, ""), tenant)

    async def find_key(self, key_hash: str) -> ApiKeyRecord | None:
        with _backend_errors():
            fields = _decode_hash(await self._redis.hgetall(self._key(key_hash)))
            return _live(_record_from_fields(fields) if fields else None, key_hash)

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
        key_id = _new_key_id()
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
