"""Keep authenticating callers while the shared store is unreachable (the limits' fail-open mode, for keys).

Every successful lookup of a key or tenant is remembered; when the store fails, the last answer it gave stands in.
Keys first seen during an outage cannot be checked and are refused; a revocation made during an outage takes effect
once the store answers again. Everything else passes straight through.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, TypeVar

from auth.errors import AuthBackendError
from storage import OutageLatch

if TYPE_CHECKING:
    from auth.keys import ApiKeyRecord
    from auth.store import AuthStore
    from auth.tenants import Tenant

__all__ = ["OutageTolerantStore"]

logger = logging.getLogger("tts_gateway.auth")

T = TypeVar("T")


class OutageTolerantStore:
    """An :class:`~auth.store.AuthStore` that answers key and tenant lookups from memory during an outage."""

    def __init__(self, inner: AuthStore) -> None:
        self._inner = inner
        self._keys: dict[str, ApiKeyRecord | None] = {}
        self._tenants: dict[str, Tenant | None] = {}
        self._outage = OutageLatch(logger, "the auth store is unreachable: answering from the last known keys and "
                                           "tenants", "the auth store answers again")

    async def find_key(self, key_hash: str) -> ApiKeyRecord | None:
        try:
            record = await self._inner.find_key(key_hash)
        except AuthBackendError as exc:
            return self._remembered(self._keys, key_hash, exc)
        self._recovered()
        self._keys[key_hash] = record
        return record

    async def get_tenant(self, name: str) -> Tenant | None:
        try:
            tenant = await self._inner.get_tenant(name)
        except AuthBackendError as exc:
            return self._remembered(self._tenants, name, exc)
        self._recovered()
        self._tenants[name] = tenant
        return tenant

    def _remembered(self, answers: dict[str, T | None], key: str, error: AuthBackendError) -> T | None:
        self._outage.failed(error)
        if key not in answers:
            raise AuthBackendError("the auth store is unreachable and this credential was not seen before")
        return answers[key]

    def _recovered(self) -> None:
        self._outage.worked()

    async def put_tenant(self, tenant: Tenant) -> None:
        await self._inner.put_tenant(tenant)

    async def list_tenants(self) -> list[Tenant]:
        return await self._inner.list_tenants()

    async def delete_tenant(self, name: str) -> bool:
        return await self._inner.delete_tenant(name)

    async def create_key(self, tenant: str) -> tuple[str, ApiKeyRecord]:
        return await self._inner.create_key(tenant)

    async def add_key_hash(self, tenant: str, key_hash: str) -> ApiKeyRecord:
        return await self._inner.add_key_hash(tenant, key_hash)

    async def revoke_key(self, key_id: str) -> bool:
        return await self._inner.revoke_key(key_id)

    async def list_keys(self, tenant: str) -> list[ApiKeyRecord]:
        return await self._inner.list_keys(tenant)

    async def close(self) -> None:
        await self._inner.close()
