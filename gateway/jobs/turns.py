"""Who speaks the next segment: the jobs a process has in progress take turns at its speaking slots, tenant by tenant.

A job is spoken one segment per turn (``gateway/jobs/runner.py``). A free slot goes to the waiting tenant served
longest ago (round robin, as the engines' fair scheduler serves its classes; a tenant's job that just spoke asks
again only after it let go of its slot, so a ring that it left and rejoined would put it behind the tenant it made
wait), and within a tenant to its jobs in the order they asked: a tenant with eight books waiting and a tenant with
one sentence each get every other turn, so one tenant's backlog delays another's job by at most one segment per slot.
Policy only: what a turn speaks is the runner's.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

__all__ = ["TenantTurns"]

_REMEMBERED = 1024
"""Tenants whose last turn is remembered before those not waiting are forgotten."""


class TenantTurns:
    """``slots`` segments spoken at once; the next free slot goes to the next tenant waiting, in turn.

    Args:
        slots: Segments this process speaks at once (``jobs.concurrency``).
    """

    def __init__(self, slots: int) -> None:
        self._free = slots
        self._waiting: dict[str, deque[asyncio.Future[None]]] = {}
        """The tenants waiting, each with its jobs' requests in the order they came."""
        self._served: dict[str, int] = {}
        """When each tenant was last given a slot (a count of the slots given)."""
        self._given = 0

    @property
    def idle(self) -> bool:
        """A slot is free (nobody waits then): a job taken now would speak at once."""
        return self._free > 0

    @property
    def waiting(self) -> int:
        """Turns asked for and not yet given."""
        return sum(len(queue) for queue in self._waiting.values())

    @contextlib.asynccontextmanager
    async def turn(self, tenant: str) -> AsyncIterator[None]:
        """Hold a slot for one segment of ``tenant``'s, once its turn came."""
        await self._acquire(tenant)
        try:
            yield
        finally:
            self._release()

    async def _acquire(self, tenant: str) -> None:
        if self._free > 0:
            self._free -= 1
            self._mark(tenant)
            return
        granted = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(tenant, deque()).append(granted)
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self._release()  # given the slot and cancelled before it ran: the slot goes on
            else:
                self._forget(tenant, granted)
            raise

    def _release(self) -> None:
        """Give the slot to the waiting tenant served longest ago (one never served first)."""
        while self._waiting:
            tenant = min(self._waiting, key=lambda name: self._served.get(name, -1))
            queue = self._waiting[tenant]
            granted = queue.popleft()
            if not queue:
                del self._waiting[tenant]
            if not granted.done():
                self._mark(tenant)
                granted.set_result(None)
                return
        self._free += 1

    def _mark(self, tenant: str) -> None:
        """Note the tenant's turn; once many tenants were served, keep the turns of those waiting only (the others
        start afresh, as if never served: at most one turn early)."""
        self._given += 1
        self._served[tenant] = self._given
        if len(self._served) > _REMEMBERED:
            self._served = {
                name: tick for name, tick in self._served.items() if name in self._waiting or name == tenant
            }

    def _forget(self, tenant: str, granted: asyncio.Future[None]) -> None:
        queue = self._waiting.get(tenant)
        if queue is None:
            return
        with contextlib.suppress(ValueError):
            queue.remove(granted)
        if not queue:
            del self._waiting[tenant]
