"""Where tenants and API keys live: in memory (one process) or in Redis (shared by every replica).

Key lookups are never cached here: every request reads the store, so a revocation holds on every replica as soon
as the store has it (one Redis round trip per authenticated request).
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
from storage import STORAGE_ERRORS

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from redis.asyncio import Redis

__all__ = ["AuthStore", "MemoryAuthStore", "RedisAuthStore"]


class AuthStore(Protocol):
    """Tenants and API keys. Implementations: :class:`MemoryAuthStore`, :class:`RedisAuthStore`.

    Backend failures raise :class:`~auth.errors.AuthBackendError`.
    """

    async def put_tenant(self, tenant: Tenant) -> None:
        """Create the tenant, or replace the one of that name (its keys and generation stay).

        A new tenant gets a random :attr:`~auth.tenants.Tenant.generation`, whatever ``tenant`` carries.
        """

    async def get_tenant(self, name: str) -> Tenant | None:
        """The tenant called ``name``, or ``None``."""

    async def list_tenants(self) -> list[Tenant]:
        """Every tenant, by name."""

    async def delete_tenant(self, name: str) -> bool:
        """Delete the tenant and revoke all its keys; ``False`` when there was no such tenant.

        Its key records stay (revoked), so a tenant created again under the same name does not get them back.
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
        """The tenant's keys, revoked ones included, oldest first."""

    async def close(self) -> None:
        """Release what the store holds."""


def _with_generation(tenant: Tenant, existing: Tenant | None) -> Tenant:
    """``tenant`` as stored: a replaced tenant keeps its generation, a new one gets a random one."""
    generation = existing.generation if existing is not None else secrets.token_hex(8)
    return dataclasses.replace(tenant, generation=generation)


def _new_key_id() -> str:
    return f"key_{secrets.token_hex(8)}"


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


class MemoryAuthStore:
    """Tenants and keys in this process only: for a single replica and for tests (methods as on :class:`AuthStore`)."""

    def __init__(self) -> None:
        """Start empty."""
        self._tenants: dict[str, Tenant] = {}
        self._keys: dict[str, ApiKeyRecord] = {}  # by key hash
        self._hash_by_id: dict[str, str] = {}

    async def put_tenant(self, tenant: Tenant) -> None:
        self._tenants[tenant.name] = _with_generation(tenant, self._tenants.get(tenant.name))

    async def get_tenant(self, name: str) -> Tenant | None:
        return self._tenants.get(name)

    async def list_tenants(self) -> list[Tenant]:
        return [self._tenants[name] for name in sorted(self._tenants)]

    async def delete_tenant(self, name: str) -> bool:
        if self._tenants.pop(name, None) is None:
            return False
        for record in self._records_of(name):
            self._keys[record.key_hash] = _revoked(record)
        return True

    async def create_key(self, tenant: str) -> tuple[str, ApiKeyRecord]:
        key = generate_api_key()
        return key, self._add(tenant, hash_api_key(key), key_hint(key))

    async def add_key_hash(self, tenant: str, key_hash: str) -> ApiKeyRecord:
        _check_hash(key_hash)
        existing = self._keys.get(key_hash)
        return _same_tenant(existing, tenant) if existing else self._add(tenant, key_hash, "")

    async def find_key(self, key_hash: str) -> ApiKeyRecord | None:
        return _live(self._keys.get(key_hash), key_hash)

    async def revoke_key(self, key_id: str) -> bool:
        key_hash = self._hash_by_id.get(key_id)
        if key_hash is None:
            return False
        self._keys[key_hash] = _revoked(self._keys[key_hash])
        return True

    async def list_keys(self, tenant: str) -> list[ApiKeyRecord]:
        return sorted(self._records_of(tenant), key=lambda record: record.created_at)

    async def close(self) -> None:
        return None

    def _add(self, tenant: str, key_hash: str, hint: str) -> ApiKeyRecord:
        if tenant not in self._tenants:
            raise TenantNotFoundError(tenant)
        record = ApiKeyRecord(id=_new_key_id(), tenant=tenant, key_hash=key_hash, created_at=time.time(), hint=hint)
        self._keys[key_hash] = record
        self._hash_by_id[record.id] = key_hash
        return record

    def _records_of(self, tenant: str) -> list[ApiKeyRecord]:
        return [record for record in self._keys.values() if record.tenant == tenant]


def _revoked(record: ApiKeyRecord) -> ApiKeyRecord:
    return ApiKeyRecord(record.id, record.tenant, record.key_hash, record.created_at, revoked=True, hint=record.hint)


# Creates a key record only if the tenant exists and the hash is new, atomically, so that replicas seeding the same
# configuration at once end up with one record per hash. Returns the record (new or existing), or {} without tenant.
# KEYS: tenants hash, key record, id -> hash, tenant's key set. ARGV: tenant, hash, id, created_at, hint.
_ADD_KEY_LUA = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return {} end
if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('HSET', KEYS[2], 'id', ARGV[3], 'tenant', ARGV[1], 'key_hash', ARGV[2], 'created_at', ARGV[4],
             'revoked', '0', 'hint', ARGV[5])
  redis.call('SET', KEYS[3], ARGV[2])
  redis.call('SADD', KEYS[4], ARGV[2])
end
return redis.call('HGETALL', KEYS[2])
"""

# Deletes the tenant and revokes its keys in one step, so no key can be added in between and survive.
# KEYS: tenants hash, tenant's key set. ARGV: tenant, key record prefix.
_DELETE_TENANT_LUA = """
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then return 0 end
for _, key_hash in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  redis.call('HSET', ARGV[2] .. key_hash, 'revoked', '1')
end
return 1
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


def _tenant_to_json(tenant: Tenant) -> str:
    models = None if tenant.models is None else sorted(tenant.models)
    return json.dumps(
        {
            "limits": tenant.limits.model_dump(),
            "models": models,
            "generation": tenant.generation,
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


class RedisAuthStore:
    """Tenants and keys in Redis, shared by every replica.

    Layout (``P`` is the prefix):

    * ``P tenants`` — hash: tenant name -> JSON ``{"limits": {...}, "models": [...] | null, "scheduling": {...}}``
    * ``P key:<sha256>`` — hash: ``id``, ``tenant``, ``key_hash``, ``created_at``, ``revoked`` (``0``/``1``), ``hint``
    * ``P key-id:<id>`` — string: the key's sha256 (for revocation by id)
    * ``P tenant-keys:<name>`` — set: the tenant's key hashes

    The multi-key writes run as Lua scripts, so a single Redis (not Cluster) is assumed. Methods as on
    :class:`AuthStore`.
    """

    def __init__(self, client: Redis, prefix: str = "tts:auth:", *, owns_client: bool = False) -> None:
        """Use ``client`` (``decode_responses`` either way) under ``prefix``.

        Args:
            client: An asyncio Redis client.
            prefix: Prefix of every key this store writes.
            owns_client: Close ``client`` in :meth:`close`; leave it ``False`` when the client is shared.
        """
        self._redis = client
        self._prefix = prefix
        self._owns_client = owns_client
        self._tenants_key = f"{prefix}tenants"
        self._add_key = client.register_script(_ADD_KEY_LUA)
        self._delete_tenant = client.register_script(_DELETE_TENANT_LUA)

    async def put_tenant(self, tenant: Tenant) -> None:
        with _backend_errors():
            # Read, then write: replicas seeding a new tenant at once may each pick a generation, and the last write
            # wins; every replica reads the tenant per request, so they agree from then on.
            raw = await self._redis.hget(self._tenants_key, tenant.name)
            existing = None if raw is None else _tenant_from_json(tenant.name, raw)
            await self._redis.hset(self._tenants_key, tenant.name, _tenant_to_json(_with_generation(tenant, existing)))

    async def get_tenant(self, name: str) -> Tenant | None:
        with _backend_errors():
            raw = await self._redis.hget(self._tenants_key, name)
            return None if raw is None else _tenant_from_json(name, raw)

    async def list_tenants(self) -> list[Tenant]:
        with _backend_errors():
            raw = _decode_hash(await self._redis.hgetall(self._tenants_key))
            return [_tenant_from_json(name, raw[name]) for name in sorted(raw)]

    async def delete_tenant(self, name: str) -> bool:
        keys = [self._tenants_key, self._tenant_keys(name)]
        with _backend_errors():
            return bool(await self._delete_tenant(keys=keys, args=[name, f"{self._prefix}key:"]))

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
            key_hash = await self._redis.get(f"{self._prefix}key-id:{key_id}")
            if key_hash is None:
                return False
            # Key records are never deleted, so the record is still there: no race to guard against.
            await self._redis.hset(self._key(_text(key_hash)), "revoked", "1")
            return True

    async def list_keys(self, tenant: str) -> list[ApiKeyRecord]:
        with _backend_errors():
            hashes = sorted(_text(h) for h in await self._redis.smembers(self._tenant_keys(tenant)))
            async with self._redis.pipeline(transaction=False) as pipe:
                for key_hash in hashes:
                    pipe.hgetall(self._key(key_hash))
                rows = await pipe.execute()
            records = [_record_from_fields(_decode_hash(row)) for row in rows if row]
        return sorted(records, key=lambda record: record.created_at)

    async def close(self) -> None:
        if self._owns_client:
            with _backend_errors():
                await self._redis.aclose()

    async def _add(self, tenant: str, key_hash: str, hint: str) -> ApiKeyRecord:
        key_id = _new_key_id()
        keys = [self._tenants_key, self._key(key_hash), f"{self._prefix}key-id:{key_id}", self._tenant_keys(tenant)]
        with _backend_errors():
            flat = await self._add_key(keys=keys, args=[tenant, key_hash, key_id, repr(time.time()), hint])
            if not flat:
                raise TenantNotFoundError(tenant)
            fields = [_text(item) for item in flat]
            return _record_from_fields(dict(zip(fields[::2], fields[1::2], strict=True)))

    def _key(self, key_hash: str) -> str:
        return f"{self._prefix}key:{key_hash}"

    def _tenant_keys(self, tenant: str) -> str:
        return f"{self._prefix}tenant-keys:{tenant}"
