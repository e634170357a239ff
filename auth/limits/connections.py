"""What each tenant holds of this replica's connections (:class:`HeldConnections`), in this replica's memory whatever
the limits' storage, and shared fairly when the replica is crowded."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Literal

from auth.limits.base import CONCURRENCY_RETRY_AFTER_S, LimitState, RateLimitExceededError

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["HeldConnections", "HoldingKind"]

HoldingKind = Literal["sessions", "bodies"]


class HeldConnections:
    """What each tenant holds of this replica's connections for long: WebSocket sessions open here, and request bodies
    still arriving (``TenantLimits.bodies_in_flight``). Kept in memory, not in Redis like the leases: what they
    hold, connections of this replica, is this replica's own, and a round trip to Redis before every body would
    double what a request costs.

    When the replica is crowded (everything held reaches ``crowded_share`` of ``capacity``, its
    ``server.max_connections``) and shared by two tenants or more, a tenant that holds its fair share, that threshold
    divided among the tenants holding anything, is refused one more, while a tenant under its share still gets in: a
    few tenants cannot take what is left from the others.
    """

    def __init__(self, capacity: int, crowded_share: float = 0.8) -> None:
        self._crowded_at = max(1, int(capacity * crowded_share))
        self._held: Counter[tuple[str, HoldingKind]] = Counter()
        self._by_tenant: Counter[str] = Counter()

    def take(self, tenant: str, kind: HoldingKind, limit: int | None = None) -> Callable[[], None]:
        """Count one more of ``kind`` for ``tenant``; the function returned uncounts it (once, however often called).

        Raises:
            RateLimitExceededError: the tenant holds ``limit`` of ``kind`` here (reason ``bodies``), or the replica is
                crowded and the tenant holds its fair share already (reason ``fair_share``).
        """
        if limit is not None and self._held[tenant, kind] >= limit:
            raise RateLimitExceededError(kind, CONCURRENCY_RETRY_AFTER_S, LimitState())
        if self._over_fair_share(tenant):
            raise RateLimitExceededError("fair_share", CONCURRENCY_RETRY_AFTER_S, LimitState())
        self._held[tenant, kind] += 1
        self._by_tenant[tenant] += 1
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self._forget(tenant, kind)

        return release

    def held(self, tenant: str, kind: HoldingKind | None = None) -> int:
        """What ``tenant`` holds here (of ``kind``, or of both)."""
        return self._by_tenant[tenant] if kind is None else self._held[tenant, kind]

    def fair_share(self, tenant: str) -> int:
        """What ``tenant`` may hold while the replica is crowded: the threshold among the tenants holding anything
        (``tenant`` among them)."""
        holders = len(self._by_tenant) + (tenant not in self._by_tenant)
        return max(1, self._crowded_at // holders)

    def _over_fair_share(self, tenant: str) -> bool:
        """Crowded, shared with another tenant, and ``tenant`` at its share. A tenant alone is held by its own limits
        and the connection cap only: refusing it would spare nobody (a gateway running open has one tenant)."""
        crowded = self._by_tenant.total() + 1 > self._crowded_at
        shared = len(self._by_tenant.keys() - {tenant}) > 0
        return crowded and shared and self._by_tenant[tenant] + 1 > self.fair_share(tenant)

    def _forget(self, tenant: str, kind: HoldingKind) -> None:
        self._held[tenant, kind] -= 1
        self._by_tenant[tenant] -= 1
        if not self._held[tenant, kind]:
            del self._held[tenant, kind]
        if not self._by_tenant[tenant]:
            del self._by_tenant[tenant]
