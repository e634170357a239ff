"""One process's windows and leases (:class:`MemoryAdmissions`): a gateway of one replica, without Redis.

The windows are the ``limits`` library's moving windows; ``limits`` has no concurrency primitive, so the leases are a
dict per tenant and kind (lease id -> expiry), renewed while held like the Redis ones.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from limits import RateLimitItemPerMinute
from limits.aio.storage import MemoryStorage
from limits.aio.strategies import MovingWindowRateLimiter

from auth.limits.base import LEASE_REFUSALS, Ask, Lease, LeaseKind, LimitReason, LimitState, Verdict

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

    async def admit(self, tenant: str, ask: Ask, lease_ttl_s: float) -> Verdict:
        before = await self.state(tenant, ask.limits)
        lease = ask.lease
        refused = _first_refusal(ask, before) or (
            LEASE_REFUSALS[lease.kind] if lease is not None and not self._lease_free(tenant, lease) else None
        )
        if refused is not None:
            return Verdict(before, refused)
        for window, limit, cost in ask.hits():
            await self._windows.hit(RateLimitItemPerMinute(limit, namespace=window), tenant, cost=cost)
        if lease is not None:
            self._leases.setdefault((tenant, lease.kind), {})[lease.id] = time.monotonic() + lease_ttl_s
        return Verdict(await self.state(tenant, ask.limits))

    async def state(self, tenant: str, limits: TenantLimits) -> LimitState:
        requests, characters = limits.requests_per_minute, limits.characters_per_minute
        req_remaining, req_reset = await self._window(tenant, requests, "requests")
        chars_remaining, chars_reset = await self._window(tenant, characters, "characters")
        return LimitState(requests, req_remaining, req_reset, characters, chars_remaining, chars_reset)

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


def _first_refusal(ask: Ask, state: LimitState) -> LimitReason | None:
    # Requests first: the order a client is told about them.
    if ask.count_request and state.remaining_requests is not None and state.remaining_requests < 1:
        return "requests"
    if ask.characters > 0 and state.remaining_tokens is not None and state.remaining_tokens < ask.characters:
        return "characters"
    return None
