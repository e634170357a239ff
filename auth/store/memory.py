"""Tenants and keys in this process's memory: :class:`MemoryAuthStore`, for a single replica and for tests."""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING

from auth.errors import TenantNotFoundError
from auth.keys import ApiKeyRecord, generate_api_key, hash_api_key, key_hint
from auth.store.base import (
    DEFAULT_REVOKED_RETENTION_S,
    check_key_hash,
    live_record,
    new_generation,
    new_key_id,
    same_tenant,
)
from storage import Page

if TYPE_CHECKING:
    from collections.abc import Sequence

    from auth.tenants import Tenant

__all__ = ["MemoryAuthStore"]


class MemoryAuthStore:
    """Tenants and keys in this process only: for a single replica and for tests (methods as on
    :class:`~auth.store.AuthStore`).

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
        generation = existing.generation if existing is not None else new_generation()
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
        check_key_hash(key_hash)
        existing = self._record(key_hash)
        return same_tenant(existing, tenant) if existing else self._add(tenant, key_hash, "")

    async def find_key(self, key_hash: str) -> ApiKeyRecord | None:
        return live_record(self._record(key_hash), key_hash)

    async def revoke_key(self, key_id: str) -> bool:
        key_hash = self._hash_by_id.get(key_id)
        if key_hash is None or (record := self._record(key_hash)) is None:
            return False
        if not record.revoked:
            self._keys[key_hash] = dataclasses.replace(record, revoked=True)
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
        record = ApiKeyRecord(id=new_key_id(), tenant=tenant, key_hash=key_hash, created_at=time.time(), hint=hint)
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


def _after(items: Sequence[str], after: str | None) -> list[str]:
    return sorted(item for item in items if after is None or item > after)
