"""Who gets an engine's next free slot: one component for every backend.

A slot is a place where one request runs: a place in a worker process's batch (``engines.pool``) or a place among a
remote endpoint's requests in flight (``engines.remote``). The backend says where its slots are (a
:class:`SlotSource`); this scheduler decides who takes them: a request takes a free slot at once unless others wait
or the slot is kept for a tenant below its share; otherwise it waits in its tenant's queue, and the waiters are
served in weighted-fair order with strict priority classes (``engines.scheduling.fair_queue``).

The fair-share reservation (``reserved_slots``): every tenant holding or waiting for a slot, or expected back soon
(within twice its usual time between requests, at most ``reservation_window_s``), has a share of the slots (by
weight, at least one). A tenant below its share may always take a free slot; one at or above it only while more are
free than the tenants not here lack of their shares (at most ``reserved_slots``, never every slot). So a tenant that
comes back while another floods the engine finds a slot free instead of waiting for a running job to end (no job is
preempted), and a tenant alone, tenants that all use their shares, or one that asked once and left cost nothing.

Costs are the expected seconds of speech (``engines.scheduling.work``), corrected by what each request produced when
it ends (:meth:`Grant.finish`).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from engines.errors import EngineNotReadyError, EngineOverloadedError
from engines.scheduling.fair_queue import DEFAULT_SHARE, QueueFullError, TenantScheduler, TenantShare

if TYPE_CHECKING:
    from collections.abc import Callable

    from engines.settings import QueueSettings

__all__ = ["Grant", "SlotScheduler", "SlotSource"]

S = TypeVar("S")
_OVERLOAD_RETRY_AFTER_S = 1


class SlotSource(Protocol[S]):
    """Where a backend's slots are: what the scheduler may ask of it (all of it synchronous, so that a slot seen free
    is still free when it is taken)."""

    def free_slot(self) -> S | None:
        """The holder of a free slot to use next (the least loaded), or ``None``; nothing is taken yet."""
        ...

    def take(self, holder: S) -> None:
        """Count one more slot of ``holder`` as taken (it was just returned by :meth:`free_slot`)."""
        ...

    def give_back(self, holder: S) -> None:
        """A slot taken for a request that never started is free again."""
        ...

    def total_slots(self) -> int:
        """Slots of every holder that can take requests now."""
        ...

    def free_slots(self) -> int:
        """Of those, the ones not taken."""
        ...


@dataclass(slots=True)
class _Presence:
    """A tenant that asked for this engine lately, for the slots kept for it (``reserved_slots``)."""

    seen: float
    """When it last asked (monotonic)."""
    weight: float
    gap: float | None = None
    """Its usual time between requests (smoothed); ``None`` until it has asked twice."""

    def asked(self, now: float, weight: float) -> None:
        gap = now - self.seen
        self.gap = gap if self.gap is None else (self.gap + gap) / 2
        self.seen, self.weight = now, weight

    def expected_until(self, window_s: float) -> float:
        """Until when it is expected back: twice its usual gap after its last request, at most ``window_s``."""
        return self.seen + (min(window_s, 2 * self.gap) if self.gap is not None else 0.0)


@dataclass(eq=False, slots=True)
class Grant(Generic[S]):
    """One request's slot, from being handed out until its work ends."""

    scheduler: SlotScheduler[S]
    holder: S
    tenant: str
    share: TenantShare
    cost: float
    """The expected seconds of speech it was charged."""
    state: str = field(default="granted")
    """``granted`` (the slot is held, the work has not started), ``running``, then ``ended``."""

    def start(self) -> None:
        """The request's work starts on the slot: from now on the backend frees the slot when the work ends."""
        if self.state == "granted":
            self.state = "running"

    def abandon(self) -> None:
        """The request will not use the slot after all (its holder died, or the request gave up before starting)."""
        if self.state == "granted":
            self.state = "ended"
            self.scheduler._abandoned(self)

    def finish(self, produced_s: float | None = None) -> None:
        """The work ended and the backend has freed its slot; ``produced_s``: the seconds of speech it made, which
        corrects the tenant's charge (``None``: keep the estimate). Once only; later calls do nothing."""
        if self.state == "running":
            self.state = "ended"
            self.scheduler._finished(self, produced_s)


class SlotScheduler(Generic[S]):
    """Hands a backend's free slots to requests: at once, or in fair order from per-tenant queues.

    Args:
        engine: The engine's name, for its errors.
        settings: Its queue knobs (``queue_size``, ``queue_timeout_s``, ``scheduling``, ``reserved_slots``,
            ``reservation_window_s``).
        source: Where its slots are.
    """

    def __init__(self, engine: str, settings: QueueSettings, source: SlotSource[S]) -> None:
        self.engine = engine
        self.settings = settings
        self._source = source
        self._queue: TenantScheduler[asyncio.Future[Grant[S]]] = TenantScheduler(
            settings.queue_size, settings.scheduling
        )
        self._claims: dict[asyncio.Future[Grant[S]], tuple[str, TenantShare, float]] = {}
        self._recent: dict[str, _Presence] = {}
        """Each tenant that asked within ``reservation_window_s`` (or holds or waits for a slot)."""
        self._holding: Counter[str] = Counter()
        """Slots each tenant holds: granted (not started yet) or running."""

    # ----------------------------------------------------------------- status
    def __len__(self) -> int:
        """Requests waiting now."""
        return len(self._queue)

    def queued_by_tenant(self) -> dict[str, int]:
        """Requests waiting now, by tenant (tenants with none left out)."""
        return self._queue.queued_by_tenant()

    def holding(self, tenant: str) -> int:
        """Slots ``tenant`` holds now (granted or running)."""
        return self._holding[tenant]

    # ----------------------------------------------------------------- requests
    async def acquire(
        self, tenant: str, share: TenantShare | None, cost: float, *, continuing: bool = False
    ) -> Grant[S]:
        """A slot for ``tenant``'s request that costs ``cost`` (expected seconds of speech): at once when one is free
        and nobody with a better claim waits, else after waiting in the tenant's queue.

        ``continuing``: a later segment of a stream already under way waits its turn like any request, but the
        queue's bounds and timeout do not apply to it: a stream must not break off because the engine is busy (the
        requests it competes with are refused at the door instead, and its client may still hang up).

        Raises:
            EngineOverloadedError: the queue (or the tenant's part of it) is full, or the wait timed out.
            EngineNotReadyError: the engine became unavailable while the request waited.
        """
        share = share or DEFAULT_SHARE
        if self._reserves_slots():
            self._note_asking(tenant, share)
        holder = self._source.free_slot()
        if holder is not None and not self._queue and self._may_take_free_slot(tenant):
            self._queue.charge(tenant, share, cost)
            return self._grant(holder, tenant, share, cost)
        waiter: asyncio.Future[Grant[S]] = asyncio.get_running_loop().create_future()
        try:
            self._queue.push(waiter, tenant, share, cost, bounded=not continuing)
        except QueueFullError:  # the whole queue, or this tenant's part of it (the other tenants may still queue)
            raise EngineOverloadedError(self.engine, _OVERLOAD_RETRY_AFTER_S) from None
        self._claims[waiter] = (tenant, share, cost)
        self.hand_out()  # a reserved slot may be free for this tenant, though others wait for the rest
        return await self._wait(waiter, None if continuing else self.settings.queue_timeout_s)

    def hand_out(self) -> None:
        """Give free slots to waiters, in turn; the backend calls it whenever a slot may have freed (a job ended, a
        worker or endpoint became ready) and now and then (a slot kept for a share that lapsed)."""
        # One slot per turn, so that a batching worker's batch fills in the scheduler's order too.
        while self._queue and (holder := self._source.free_slot()) is not None:
            waiter = self._queue.pop(self._slot_rule())
            if waiter is None:
                return
            tenant, share, cost = self._claims.pop(waiter)
            if not waiter.done():
                waiter.set_result(self._grant(holder, tenant, share, cost))

    def tick(self) -> None:
        """Called now and then (the backend's watchdog): a slot kept for a tenant whose share has lapsed goes to
        those waiting, though no job ended and nobody asked."""
        if self._queue and self._reserves_slots():
            self.hand_out()

    def fail_waiters(self, reason: str) -> None:
        """The engine became unavailable: every waiter gets :class:`EngineNotReadyError`."""
        for waiter in self._queue.clear():
            self._claims.pop(waiter, None)
            if not waiter.done():
                waiter.set_exception(EngineNotReadyError(self.engine, reason))

    # ----------------------------------------------------------------- grants
    def _grant(self, holder: S, tenant: str, share: TenantShare, cost: float) -> Grant[S]:
        self._source.take(holder)
        self._holding[tenant] += 1  # the next slot of a hand-out loop must not see this tenant idle
        return Grant(self, holder, tenant, share, cost)

    def _abandoned(self, grant: Grant[S]) -> None:
        # Nothing was made on it: the charge taken when it was asked for goes back, as for a waiter that left the
        # queue (a waiter cancelled as its slot came, a worker that died before the job started on it).
        self._queue.correct(grant.tenant, grant.share, -grant.cost)
        self._unhold(grant.tenant)
        self._source.give_back(grant.holder)
        self.hand_out()

    def _finished(self, grant: Grant[S], produced_s: float | None) -> None:
        self._unhold(grant.tenant)
        if produced_s is not None:
            self._queue.correct(grant.tenant, grant.share, max(0.0, produced_s) - grant.cost)
        self.hand_out()

    def _unhold(self, tenant: str) -> None:
        self._holding[tenant] -= 1
        if self._holding[tenant] <= 0:
            del self._holding[tenant]

    async def _wait(self, waiter: asyncio.Future[Grant[S]], timeout_s: float | None) -> Grant[S]:
        taken = False
        try:
            # Not ``asyncio.wait_for``: on Python 3.11 it returns the grant when the slot comes in the same turn as a
            # cancellation (the client left), swallowing it, and the request went on speaking for nobody. Here a
            # cancellation always wins, and ``_give_up`` passes a slot handed out meanwhile on.
            async with asyncio.timeout(timeout_s):
                grant = await asyncio.shield(waiter)
            taken = True
            return grant
        except TimeoutError:
            raise EngineOverloadedError(self.engine, _OVERLOAD_RETRY_AFTER_S) from None
        finally:
            if not taken:
                self._give_up(waiter)

    def _give_up(self, waiter: asyncio.Future[Grant[S]]) -> None:
        """A waiter that timed out or was cancelled leaves the queue; a slot handed to it meanwhile is passed on."""
        self._queue.remove(waiter)
        self._claims.pop(waiter, None)
        if not waiter.done():
            waiter.cancel()
        elif not waiter.cancelled() and waiter.exception() is None:
            waiter.result().abandon()

    # ----------------------------------------------------------------- the fair-share reservation
    def _reserves_slots(self) -> bool:
        return bool(self.settings.reserved_slots) and self.settings.scheduling == "fair"

    def _may_take_free_slot(self, tenant: str) -> bool:
        rule = self._slot_rule()
        return rule is None or rule(tenant)

    def _slot_rule(self) -> Callable[[str], bool] | None:
        """Who may take a free slot now; ``None``: anyone (nothing is reserved, the usual case, costs nothing)."""
        if not self._reserves_slots():
            return None
        total = self._source.total_slots()
        if total < 2 or len(self._recent) < 2:
            return None
        shares = self._shares()
        if len(shares) < 2:
            return None
        weights = sum(shares.values())
        fair = {tenant: max(1, int(total * weight / weights)) for tenant, weight in shares.items()}
        # Slots are kept only for tenants not waiting now: those waiting compete for the free slot in fair order.
        absent = [tenant for tenant in shares if not self._queue.queued(tenant)]
        lacking = sum(max(0, fair[tenant] - self._holding[tenant]) for tenant in absent)
        kept = min(self.settings.reserved_slots, total - 1, lacking)  # one at its share or above lacks nothing itself
        free = self._source.free_slots()

        def eligible(tenant: str) -> bool:
            return self._holding[tenant] < fair.get(tenant, 1) or free > kept

        return eligible

    def _note_asking(self, tenant: str, share: TenantShare) -> None:
        now = time.monotonic()
        if (presence := self._recent.get(tenant)) is not None:
            presence.asked(now, share.weight)
        else:
            self._recent[tenant] = _Presence(now, share.weight)

    def _shares(self) -> dict[str, float]:
        """The weight of each tenant with a share now: those holding or waiting for a slot, and those not here that
        are expected back (within twice their usual time between requests, at most ``reservation_window_s``)."""
        now, window = time.monotonic(), self.settings.reservation_window_s
        shares = {}
        for tenant, presence in list(self._recent.items()):
            here = self._holding[tenant] > 0 or self._queue.queued(tenant) > 0
            if here or now <= presence.expected_until(window):
                shares[tenant] = presence.weight
            elif now - presence.seen > window:
                del self._recent[tenant]  # gone quiet: its history goes too
        return shares
