"""One process's windows and leases (:class:`MemoryAdmissions`): a gateway of one replica, without Redis.

The windows are the ``limits`` library's moving windows; ``limits`` has no concurrency primitive, so the leases are a
dict per tenant and kind (lease id -> expiry), renewed while held like the Redis ones. The monthly budgets are a
count per tenant, month and budget.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from limits import RateLimitItemPerMinute
from limits.aio.storage import MemoryStorage
from limits.aio.strategies import MovingWindowRateLimiter

from auth.limits.base import (
    LEASE_REFUSALS,
    Ask,
    Budget,
    BudgetState,
    Lease,
    LeaseKind,
    LimitReason,
    LimitState,
    Month,
    Verdict,
)

if TYPE_CHECKING:
    from auth.settings import TenantLimits

__all__ = ["MemoryAdmissions"]


class MemoryAdmissions:
    """One process's windows (``limits``'s moving windows) and leases. Nothing here awaits anything real, so a check
    and its hits run without another request in between. Methods as on :class:`~auth.limits.base.Admissions`."""

    def __init__(self) -> None:
        self._storage = MemoryStorage()
        self._windows = MovingWindowRateLimiter(self._storage)
        self._leases: dict[tuple[str, LeaseKind], dict[str, float]] = {}
        self._months: dict[tuple[str, str, str], dict[Budget, float]] = {}
        """(tenant, month name, tenant generation) -> what it spent of each budget."""

    async def admit(self, tenant: str, ask: Ask, lease_ttl_s: float) -> Verdict:
        before = await self.state(tenant, ask.limits, ask.month)
        lease = ask.lease
        refused = (
            _budget_refusal(ask, before.budget)
            or _first_refusal(ask, before)
            or (LEASE_REFUSALS[lease.kind] if lease is not None and not self._lease_free(tenant, lease) else None)
        )
        if refused is not None:
            return Verdict(before, refused)
        for window, limit, cost in ask.hits():
            await self._windows.hit(RateLimitItemPerMinute(limit, namespace=window), tenant, cost=cost)
        if lease is not None:
            self._leases.setdefault((tenant, lease.kind), {})[lease.id] = time.monotonic() + lease_ttl_s
        if ask.month is not None and ask.characters > 0:
            self._spend(tenant, ask.month, "characters_per_month", ask.characters)
        return Verdict(await self.state(tenant, ask.limits, ask.month))

    async def state(self, tenant: str, limits: TenantLimits, month: Month | None = None) -> LimitState:
        requests, characters = limits.requests_per_minute, limits.characters_per_minute
        req_remaining, req_reset = await self._window(tenant, requests, "requests")
        chars_remaining, chars_reset = await self._window(tenant, characters, "characters")
        budget = None if month is None else self._budget(tenant, limits, month)
        return LimitState(requests, req_remaining, req_reset, characters, chars_remaining, chars_reset, budget)

    async def spend(self, tenant: str, month: Month, budget: Budget, amount: float) -> None:
        self._spend(tenant, month, budget, amount)

    async def renew(self, tenant: str, kind: LeaseKind, lease_id: str, ttl_s: float) -> bool:
        held = self._leases.get((tenant, kind), {})
        if lease_id not in held:
            return False
        held[lease_id] = time.monotonic() + ttl_s
        return True

    async def release(self, tenant: str, kind: LeaseKind, lease_id: str) -> None:
        self._leases.get((tenant, kind), {}).pop(lease_id, None)

    async def close(self) -> None:
        if self._storage.timer is not None:
            self._storage.timer.cancel()

    def _spend(self, tenant: str, month: Month, budget: Budget, amount: float) -> None:
        # Only this month's counts are kept: a month that ended is never read again.
        for key in [key for key in self._months if key[0] == tenant and key[1] != month.name]:
            del self._months[key]
        spent = self._months.setdefault((tenant, month.name, month.generation), {})
        spent[budget] = spent.get(budget, 0) + amount

    def _budget(self, tenant: str, limits: TenantLimits, month: Month) -> BudgetState:
        spent = self._months.get((tenant, month.name, month.generation), {})
        return BudgetState(
            month,
            limits.characters_per_month,
            int(spent.get("characters_per_month", 0)),
            limits.audio_seconds_per_month,
            spent.get("audio_seconds_per_month", 0.0),
        )

    def _lease_free(self, tenant: str, lease: Lease) -> bool:
        now = time.monotonic()
        held = {lid: expiry for lid, expiry in self._leases.get((tenant, lease.kind), {}).items() if expiry > now}
        self._leases[(tenant, lease.kind)] = held
        return len(held) < lease.limit

    async def _window(self, tenant: str, limit: int | None, namespace: str) -> tuple[int | None, float | None]:
        if limit is None:
            return None, None
        stats = await self._windows.get_window_stats(RateLimitItemPerMinute(limit, namespace=namespace), tenant)
        # An empty window reports "now + 60 s"; nothing is waiting to reset then.
        reset = 0.0 if stats.remaining >= limit else max(0.0, stats.reset_time - time.time())
        return max(0, stats.remaining), reset


def _budget_refusal(ask: Ask, budget: BudgetState | None) -> Budget | None:
    """A monthly budget that refuses ``ask``: characters that would pass the line, or audio already at it (audio is
    known only once spoken, so the request that crosses the line is served and the next one refused)."""
    if budget is None:
        return None
    chars_limit, chars_used = budget.characters_limit, budget.characters_used or 0
    # Characters counted after the work (a job's) may have reached the line: then even a request of none is refused.
    if chars_limit is not None and (chars_used >= chars_limit or chars_used + ask.characters > chars_limit):
        return "characters_per_month"
    audio_limit = budget.audio_seconds_limit
    if audio_limit is not None and (budget.audio_seconds_used or 0.0) >= audio_limit:
        return "audio_seconds_per_month"
    return None


def _first_refusal(ask: Ask, state: LimitState) -> LimitReason | None:
    # Requests first: the order a client is told about them.
    if ask.count_request and state.remaining_requests is not None and state.remaining_requests < 1:
        return "requests"
    if ask.characters > 0 and state.remaining_tokens is not None and state.remaining_tokens < ask.characters:
        return "characters"
    return None
