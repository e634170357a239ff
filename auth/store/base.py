"""The contract of a tenant and key store (:class:`AuthStore`), and the rules every implementation follows alike."""

from __future__ import annotations

import hmac
import secrets
from typing import TYPE_CHECKING, Protocol

from auth.keys import is_key_hash
from storage import sortable_id

if TYPE_CHECKING:
    from auth.keys import ApiKeyRecord
    from auth.tenants import Tenant
    from storage import Page

__all__ = [
    "DEFAULT_REVOKED_RETENTION_S",
    "AuthStore",
    "ForwardingAuthStore",
    "check_key_hash",
    "live_record",
    "new_generation",
    "new_key_id",
    "same_tenant",
]

DEFAULT_REVOKED_RETENTION_S = 30 * 24 * 3600
"""How long the record of a revoked key (issued by the gateway) stays listed for audit."""


class AuthStore(Protocol):
    """Tenants and API keys. Implementations: :class:`~auth.store.MemoryAuthStore`, :class:`~auth.store.RedisAuthStore`.

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


# The rules below are the contract's, kept here so that both stores follow them alike.


def new_generation() -> str:
    """A new tenant's :attr:`~auth.tenants.Tenant.generation`."""
    return secrets.token_hex(8)


def new_key_id() -> str:
    """A new key's id; ids sort by creation."""
    return sortable_id("key_")


def check_key_hash(key_hash: str) -> None:
    """Raise :class:`ValueError` unless ``key_hash`` is a lowercase hex SHA-256."""
    if not is_key_hash(key_hash):
        raise ValueError("key hash must be a lowercase hex SHA-256 (64 characters)")


def same_tenant(record: ApiKeyRecord, tenant: str) -> ApiKeyRecord:
    """``record``, when it belongs to ``tenant``; else :class:`ValueError` (a key is never moved between tenants)."""
    if record.tenant != tenant:
        raise ValueError(f"key {record.id} already belongs to tenant {record.tenant!r}")
    return record


def live_record(record: ApiKeyRecord | None, key_hash: str) -> ApiKeyRecord | None:
    """``record`` when it is the live key of ``key_hash``; ``None`` when it is absent, revoked or filed wrongly."""
    # The lookup itself is by hash, so its timing reveals nothing useful about the key; the final check is still
    # constant-time so that no store implementation can turn into a string-compare oracle.
    if record is None or record.revoked or not hmac.compare_digest(record.key_hash, key_hash):
        return None
    return record
