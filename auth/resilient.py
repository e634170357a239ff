"""Keep authenticating callers while the shared store is unreachable (the limits' fail-open mode, for keys).

Each key and tenant the store vouched for is remembered, in a bounded least-recently-used memory; when the store
fails, the last answer stands in. What this replica learns was revoked or deleted — from a lookup that no longer
finds a key it had served, or from a revocation announced by any replica (:mod:`auth.revocations`) — is remembered
as such, so an outage never brings it back. Keys never seen valid are not remembered (a flood of random keys costs
no memory); during an outage they cannot be checked and are refused. Everything else passes straight through.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

from auth.errors import AuthBackendError
from storage import OutageLatch

if TYPE_CHECKING:
    from auth.keys import ApiKeyRecord
    from auth.revocations import Revocation
    from auth.store import AuthStore
    from auth.tenants import Tenant

__all__ = ["OutageTolerantStore"]

logger = logging.getLogger("tts_gateway.auth")

T = TypeVar("T")

DEFAULT_MAX_ENTRIES = 10_000


@dataclass(frozen=True, slots=True)
class _Gone:
    """A key this replica learned was revoked, or a tenant it learned was deleted."""


_GONE = _Gone()


class _Recent(Generic[T]):
    """The last answers about at most ``max_entries`` subjects; the least recently used go first."""

    def __init__(self, max_entries: int) -> None:
        self._entries: OrderedDict[str, T | _Gone] = OrderedDict()
        self._max_entries = max_entries

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, subject: str) -> T | _Gone | None:
        answer = self._entries.get(subject)
        if answer is not None:
            self._entries.move_to_end(subject)
        return answer

    def put(self, subject: str, answer: T | _Gone) -> None:
        self._entries[subject] = answer
        self._entries.move_to_end(subject)
        while len(self._entries) > self._max_entries:
            self._entries.popitem(last=False)

    def forget_if_known(self, subject: str) -> None:
        """A subject the store no longer knows: ``gone`` if it was remembered, else still not remembered."""
        if subject in self._entries:
            self.put(subject, _GONE)

    def items(self) -> list[tuple[str, T | _Gone]]:
        return list(self._entries.items())


class OutageTolerantStore:
    """An :class:`~auth.store.AuthStore` that answers key and tenant lookups from memory during an outage.

    Args:
        inner: The shared store.
        max_entries: Keys remembered, and tenants remembered (each memory holds at most this many).
    """

    def __init__(self, inner: AuthStore, *, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        self._inner = inner
        self._keys: _Recent[ApiKeyRecord] = _Recent(max_entries)
        self._tenants: _Recent[Tenant] = _Recent(max_entries)
        self._outage = OutageLatch(
            logger,
            "the auth store is unreachable: answering from the last known keys and tenants",
            "the auth store answers again",
        )

    def remembered(self) -> int:
        """How many keys and tenants are remembered (bounded by twice ``max_entries``)."""
        return len(self._keys) + len(self._tenants)

    async def find_key(self, key_hash: str) -> ApiKeyRecord | None:
        try:
            record = await self._inner.find_key(key_hash)
        except AuthBackendError as exc:
            return self._answer(self._keys.get(key_hash), exc)
        self._outage.worked()
        if record is None:
            self._keys.forget_if_known(key_hash)
        else:
            self._keys.put(key_hash, record)
        return record

    async def get_tenant(self, name: str) -> Tenant | None:
        try:
            tenant = await self._inner.get_tenant(name)
        except AuthBackendError as exc:
            return self._answer(self._tenants.get(name), exc)
        self._outage.worked()
        if tenant is None:
            self._tenants.forget_if_known(name)
        else:
            self._tenants.put(name, tenant)
        return tenant

    def revoked(self, revocation: Revocation) -> None:
        """A revocation announced by any replica: never answer for that key or tenant again until the store does."""
        if revocation.kind == "tenant":
            self._tenants.put(revocation.subject, _GONE)
            gone = [
                key_hash
                for key_hash, answer in self._keys.items()
                if not isinstance(answer, _Gone) and answer.tenant == revocation.subject
            ]
        else:
            gone = [
                key_hash
                for key_hash, answer in self._keys.items()
                if not isinstance(answer, _Gone) and answer.id == revocation.subject
            ]
        for key_hash in gone:  # a scan, but revocations are rare and the memory is bounded
            self._keys.put(key_hash, _GONE)

    def _answer(self, remembered: T | _Gone | None, error: AuthBackendError) -> T | None:
        self._outage.failed(error)
        if remembered is None:
            raise AuthBackendError("the auth store is unreachable and this credential was not seen before")
        return None if isinstance(remembered, _Gone) else remembered

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
