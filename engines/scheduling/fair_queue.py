"""Who waits for an engine slot next: per-tenant queues, dispatched fairly across tenants.

Pure bookkeeping, no asyncio: the slot scheduler (``engines.scheduling.slots``) puts its waiters in, takes the next
one out whenever a slot frees, and removes a waiter that gives up.

Fairness is weighted fair queueing in the start-time form (SFQ): every request gets a virtual start tag
``max(clock, the tenant's previous finish tag)`` and a finish tag ``start + cost / weight``; the waiter with the
smallest finish tag goes next, and the clock moves to the start tag of each request that gets a slot. Requests
that get a slot without waiting are charged the same way, so a tenant holding every worker is behind a tenant
holding none; a tenant idle for a while starts at the clock, neither in debt nor with saved-up credit. Priority
classes are strict: a class is served only while every higher class has nobody waiting; fairness holds within a
class, each class with its own clock.

No maintained library schedules an asyncio resource pool across tenants like this (``asyncio.PriorityQueue`` has
no per-tenant state, no removal and no caps), hence this small module.
"""

from __future__ import annotations

import itertools
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, Literal, TypeAlias, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "DEFAULT_SHARE",
    "PRIORITIES",
    "Priority",
    "QueueFullError",
    "Scheduling",
    "TenantQueueFullError",
    "TenantScheduler",
    "TenantShare",
]

Priority: TypeAlias = Literal["high", "normal", "low"]
Scheduling: TypeAlias = Literal["fair", "fifo"]
PRIORITIES: tuple[Priority, ...] = ("high", "normal", "low")
"""Priority classes, the first served first."""

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class TenantShare:
    """What a tenant may claim of an engine's queue (from the tenant's settings; engines know nothing of auth)."""

    weight: float = 1.0
    """Relative share of the engine among tenants of the same priority class that are waiting."""
    priority: Priority = "normal"
    """Strict class: ``high`` waiters go before ``normal`` ones, which go before ``low`` ones."""
    max_queued: int | None = None
    """Requests of this tenant allowed to wait at once; ``None``: only the engine's ``queue_size`` bounds them."""

    def __post_init__(self) -> None:
        if not self.weight > 0:
            raise ValueError("weight must be > 0")
        if self.max_queued is not None and self.max_queued < 1:
            raise ValueError("max_queued must be >= 1 or None")


DEFAULT_SHARE = TenantShare()
"""The share of callers that name none: weight 1, normal priority, no cap of their own."""


class QueueFullError(Exception):
    """The engine's whole wait queue is full."""


class TenantQueueFullError(QueueFullError):
    """This tenant already has ``max_queued`` requests waiting; other tenants may still queue."""


@dataclass(slots=True)
class _Entry(Generic[T]):
    item: T
    tenant: str
    seq: int
    start: float
    finish: float


@dataclass(slots=True)
class _Lane(Generic[T]):
    """One tenant's waiters within one priority class, in arrival order (so their tags rise)."""

    waiting: deque[_Entry[T]] = field(default_factory=deque)
    last_finish: float = 0.0


class TenantScheduler(Generic[T]):
    """Waiters (any hashable ``T``) queued per tenant, taken out in fair order (or arrival order for ``fifo``).

    Args:
        capacity: Waiters allowed in all (the engine's ``queue_size``).
        scheduling: ``fair`` (weights and priorities) or ``fifo`` (arrival order; only the caps apply).
    """

    def __init__(self, capacity: int, scheduling: Scheduling = "fair") -> None:
        self.capacity = capacity
        self.scheduling = scheduling
        self._lanes: dict[tuple[Priority, str], _Lane[T]] = {}
        self._clocks: dict[Priority, float] = dict.fromkeys(PRIORITIES, 0.0)
        self._entries: dict[T, tuple[Priority, _Entry[T]]] = {}
        self._by_tenant: Counter[str] = Counter()
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._entries)

    def queued(self, tenant: str) -> int:
        """Waiters of ``tenant`` now."""
        return self._by_tenant[tenant]

    def queued_by_tenant(self) -> dict[str, int]:
        """Waiters now, by tenant (tenants with none left out)."""
        return {tenant: count for tenant, count in self._by_tenant.items() if count}

    def push(
        self, item: T, tenant: str, share: TenantShare = DEFAULT_SHARE, cost: float = 1.0, *, bounded: bool = True
    ) -> None:
        """Queue ``item`` for ``tenant``; ``cost`` is the work it asks for (any unit, the same for every tenant);
        ``bounded``: the caps apply (False: the continuation of work already under way, which must not be refused).

        Raises:
            TenantQueueFullError: ``tenant`` has ``share.max_queued`` waiters already.
            QueueFullError: the queue holds ``capacity`` waiters already.
        """
        if bounded and share.max_queued is not None and self._by_tenant[tenant] >= share.max_queued:
            raise TenantQueueFullError(tenant)
        if bounded and len(self._entries) >= self.capacity:
            raise QueueFullError(tenant)
        priority, lane = self._lane(tenant, share)
        start, finish = self._tags(priority, lane, share, cost)
        lane.last_finish = finish
        entry = _Entry(item, tenant, next(self._seq), start, finish)
        lane.waiting.append(entry)
        self._entries[item] = (priority, entry)
        self._by_tenant[tenant] += 1

    def charge(self, tenant: str, share: TenantShare = DEFAULT_SHARE, cost: float = 1.0) -> None:
        """Count a request of ``tenant`` that got a worker without waiting: it used the tenant's share too."""
        priority, lane = self._lane(tenant, share)
        start, lane.last_finish = self._tags(priority, lane, share, cost)
        self._advance(priority, start)

    def correct(self, tenant: str, share: TenantShare = DEFAULT_SHARE, delta: float = 0.0) -> None:
        """``tenant``'s work turned out ``delta`` more (or, negative, less) than its cost said: its waiting requests
        and later ones move by ``delta / weight``.

        A tenant with nothing left in the queue and its last finish behind the clock keeps no credit (it would start
        at the clock anyway), but does keep a debt.
        """
        priority: Priority = share.priority if self.scheduling == "fair" else "normal"
        shift = delta / share.weight
        lane = self._lanes.get((priority, tenant))
        if lane is None:
            if shift > 0:
                self._lanes[(priority, tenant)] = _Lane(last_finish=self._clocks[priority] + shift)
            return
        for entry in lane.waiting:
            entry.start += shift
            entry.finish += shift
        lane.last_finish += shift

    def pop(self, eligible: Callable[[str], bool] | None = None) -> T | None:
        """The waiter whose turn it is, removed from the queue; ``None`` when nobody (``eligible``) waits.

        Args:
            eligible: Only tenants for which it is true may be chosen (the others keep their place); None: all.
        """
        heads = (
            (self._order(key[0], lane.waiting[0]), key)
            for key, lane in self._lanes.items()
            if lane.waiting and (eligible is None or eligible(key[1]))
        )
        best = min(heads, default=None)  # orders end with the arrival number: never a tie
        if best is None:
            return None
        priority, _ = key = best[1]
        entry = self._lanes[key].waiting.popleft()
        self._forget(entry)
        self._advance(priority, entry.start)
        return entry.item

    def remove(self, item: T) -> bool:
        """Take out a waiter that gave up; ``False`` when it is not queued (any more).

        The tenant's later waiters move up by the share the removed one had claimed.
        """
        found = self._entries.get(item)
        if found is None:
            return False
        priority, entry = found
        lane = self._lanes[(priority, entry.tenant)]
        index = lane.waiting.index(entry)
        del lane.waiting[index]
        claimed = entry.finish - entry.start
        for later in itertools.islice(lane.waiting, index, None):
            later.start -= claimed
            later.finish -= claimed
        lane.last_finish -= claimed
        self._forget(entry)
        self._prune(priority)
        return True

    def clear(self) -> list[T]:
        """Every waiter, in arrival order, removed from the queue (the engine became unavailable)."""
        items = [entry.item for _, entry in sorted(self._entries.values(), key=lambda found: found[1].seq)]
        self._entries.clear()
        self._lanes.clear()
        self._by_tenant.clear()
        return items

    def _lane(self, tenant: str, share: TenantShare) -> tuple[Priority, _Lane[T]]:
        priority: Priority = share.priority if self.scheduling == "fair" else "normal"
        lane = self._lanes.get((priority, tenant))
        if lane is None:
            lane = self._lanes[(priority, tenant)] = _Lane()
        return priority, lane

    def _tags(self, priority: Priority, lane: _Lane[T], share: TenantShare, cost: float) -> tuple[float, float]:
        start = max(self._clocks[priority], lane.last_finish)
        return start, start + max(cost, 1e-9) / share.weight

    def _order(self, priority: Priority, entry: _Entry[T]) -> tuple[float, ...]:
        if self.scheduling == "fifo":
            return (entry.seq,)
        return (PRIORITIES.index(priority), entry.finish, entry.seq)

    def _forget(self, entry: _Entry[T]) -> None:
        del self._entries[entry.item]
        self._by_tenant[entry.tenant] -= 1
        if not self._by_tenant[entry.tenant]:
            del self._by_tenant[entry.tenant]

    def _advance(self, priority: Priority, start: float) -> None:
        self._clocks[priority] = max(self._clocks[priority], start)
        self._prune(priority)

    def _prune(self, priority: Priority) -> None:
        # A tenant with nobody waiting whose last finish tag the clock has passed would start at the clock anyway:
        # its lane holds nothing worth keeping, and dropping it bounds memory by the tenants active lately.
        clock = self._clocks[priority]
        stale = [
            key
            for key, lane in self._lanes.items()
            if key[0] == priority and not lane.waiting and lane.last_finish <= clock
        ]
        for key in stale:
            del self._lanes[key]
