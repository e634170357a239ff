"""A replica's memory of key and tenant lookups: no Redis round trip to authenticate a known caller, and callers
still served while the shared store is unreachable (the limits' fail-open mode, for keys).

Each key and tenant the store vouched for is remembered, in a bounded least-recently-used memory, and answers lookups
without asking the store again while it is fresh: younger than ``fresh_s`` and remembered while the revocation
channel was heard without a gap. Every change that could make an answer wrong is announced on that channel by the
replica that made it (:mod:`auth.revocations`: a key revoked, a tenant deleted or changed), and a replica that may
have missed announcements (its subscription was lost) forgets that its answers are fresh; ``fresh_s`` bounds what an
unnoticed miss can cost.

What this replica learns was revoked or deleted — from a lookup that no longer finds a key it had served, or from
an announcement — is remembered as such, so an outage never brings it back. Keys never seen valid are not remembered
(a flood of random keys costs no memory); they always ask the store, and during an outage they cannot be checked and
are refused. Everything else passes straight through.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

from auth.errors import AuthBackendError
from auth.store import ForwardingAuthStore
from lifecycle import naming
from storage import OutageLatch

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from auth.keys import ApiKeyRecord
    from auth.revocations import Revocation
    from auth.store import AuthStore
    from auth.tenants import Tenant

__all__ = ["DEFAULT_FRESH_S", "DEFAULT_MAX_ENTRIES", "CachedAuthStore"]

logger = naming.logger("auth")

T = TypeVar("T")

DEFAULT_MAX_ENTRIES = 10_000
DEFAULT_FRESH_S = 60.0


@dataclass(frozen=True, slots=True)
class _Gone:
    """A key this replica learned was revoked, or a tenant it learned was deleted."""


_GONE = _Gone()


@dataclass(frozen=True, slots=True)
class _Answer(Generic[T]):
    value: T | _Gone
    at: float
    """When the store gave it (monotonic)."""
    epoch: int
    """The memory's epoch then: a gap in the revocation channel starts a new one, staling every older answer."""


class _Recent(Generic[T]):
    """The last answers about at most ``max_entries`` subjects; the least recently used go first."""

    def __init__(self, max_entries: int) -> None:
        self._entries: OrderedDict[str, _Answer[T]] = OrderedDict()
        self._max_entries = max_entries

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, subject: str) -> _Answer[T] | None:
        answer = self._entries.get(subject)
        if answer is not None:
            self._entries.move_to_end(subject)
        return answer

    def put(self, subject: str, answer: _Answer[T]) -> None:
        self._entries[subject] = answer
        self._entries.move_to_end(subject)
        while len(self._entries) > self._max_entries:
            self._entries.popitem(last=False)

    def drop(self, subject: str) -> None:
        self._entries.pop(subject, None)

    def subjects_where(self, matches: Callable[[T], bool]) -> list[str]:
        return [s for s, a in self._entries.items() if not isinstance(a.value, _Gone) and matches(a.value)]


class CachedAuthStore(ForwardingAuthStore):
    """An :class:`~auth.store.AuthStore` that answers key and tenant lookups from memory while they are fresh, and
    from the last known answer during an outage when ``serve_in_outage``.

    Args:
        inner: The shared store.
        listening: Whether the revocation channel is heard right now (no answer is fresh while it is not).
        fresh_s: How long an answer is trusted without asking the store; 0 asks it every time.
        max_entries: Keys remembered, and tenants remembered (each memory holds at most this many).
        serve_in_outage: Answer from memory when the store is unreachable (limits ``fail_mode: open``).
    """

    def __init__(
        self,
        inner: AuthStore,
        *,
        listening: Callable[[], bool],
        fresh_s: float = DEFAULT_FRESH_S,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        serve_in_outage: bool = True,
    ) -> None:
        super().__init__(inner)
        self._listening = listening
        self._fresh_s = fresh_s
        self._serve_in_outage = serve_in_outage
        self._keys: _Recent[ApiKeyRecord] = _Recent(max_entries)
        self._tenants: _Recent[Tenant] = _Recent(max_entries)
        self._epoch = 0
        self._outage = OutageLatch(
            logger,
            "the auth store is unreachable: answering from the last known keys and tenants",
            "the auth store answers again",
        )

    def remembered(self) -> int:
        """How many keys and tenants are remembered (bounded by twice ``max_entries``)."""
        return len(self._keys) + len(self._tenants)

    def forget_freshness(self) -> None:
        """Announcements may have gone unheard: ask the store before trusting any answer remembered so far."""
        self._epoch += 1

    async def find_key(self, key_hash: str) -> ApiKeyRecord | None:
        return await self._lookup(self._keys, key_hash, self._inner.find_key)

    async def get_tenant(self, name: str) -> Tenant | None:
        return await self._lookup(self._tenants, name, self._inner.get_tenant)

    async def _lookup(self, memory: _Recent[T], subject: str, ask: Callable[[str], Awaitable[T | None]]) -> T | None:
        remembered = memory.get(subject)
        if remembered is not None and self._is_fresh(remembered):
            return _value(remembered)
        try:
            answer = await ask(subject)
        except AuthBackendError as exc:
            return self._answer_in_outage(remembered, exc)
        self._outage.worked()
        if answer is not None:
            memory.put(subject, self._answer(answer))
        elif remembered is not None:  # known once, unknown now: revoked or deleted meanwhile
            memory.put(subject, self._answer(_GONE))
        return answer

    def revoked(self, revocation: Revocation) -> None:
        """An announcement by any replica: a revoked key or deleted tenant is never answered for again until the store
        says otherwise; a changed tenant is asked for again."""
        if revocation.kind == "tenant-updated":
            self._tenants.drop(revocation.subject)
            return
        if revocation.kind == "tenant":
            self._tenants.put(revocation.subject, self._answer(_GONE))
            gone = self._keys.subjects_where(lambda record: record.tenant == revocation.subject)
        else:
            gone = self._keys.subjects_where(lambda record: record.id == revocation.subject)
        for key_hash in gone:  # a scan, but revocations are rare and the memory is bounded
            self._keys.put(key_hash, self._answer(_GONE))

    def _answer(self, value: T | _Gone) -> _Answer[T]:
        return _Answer(value, time.monotonic(), self._epoch)

    def _is_fresh(self, answer: _Answer[T]) -> bool:
        return answer.epoch == self._epoch and time.monotonic() - answer.at < self._fresh_s and self._listening()

    def _answer_in_outage(self, remembered: _Answer[T] | None, error: AuthBackendError) -> T | None:
        self._outage.failed(error)
        if remembered is None or not self._serve_in_outage:
            raise AuthBackendError("the auth store is unreachable and this credential cannot be checked") from error
        return _value(remembered)

    async def put_tenant(self, tenant: Tenant) -> Tenant:
        self._tenants.drop(tenant.name)
        return await self._inner.put_tenant(tenant)


def _value(answer: _Answer[T]) -> T | None:
    return None if isinstance(answer.value, _Gone) else answer.value
