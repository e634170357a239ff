"""Per-tenant rate limits: requests and input characters per minute (moving windows), monthly budgets of input
characters and audio seconds (calendar months, UTC) and concurrent streams (leases).

:class:`TenantRateLimiter` (``limiter.py``) admits each request against the tenant's windows and leases, kept by one
storage behind the contract of ``base.py`` (``Admissions``): in this process's memory (``memory.py``, one replica) or
in Redis (``redis.py``, shared by every replica, one Lua script per admission). One contract suite
(``tests/unit/auth/test_limits_contract.py``) runs against both. A refused request consumes nothing, whichever limit
refused it, and a lease is renewed while held, so that a replica that dies stops holding its leases after
``lease_ttl_s``. Two kinds of lease: concurrent streams (``concurrent_streams``, taken with a request's admission) and
open WebSocket sessions (``open_sessions``, taken when a session opens).

What a tenant holds of one replica's connections (``connections.py``: :class:`HeldConnections`) is that replica's
own, and kept in its memory whatever the storage.
"""

from __future__ import annotations

from auth.limits.base import (
    Budget,
    BudgetState,
    LimitReason,
    LimitState,
    LimitsUnavailableError,
    Month,
    QuotaExceededError,
    RateLimitExceededError,
    RequestTooLargeError,
)
from auth.limits.connections import HeldConnections, HoldingKind
from auth.limits.limiter import TenantRateLimiter

__all__ = [
    "Budget",
    "BudgetState",
    "HeldConnections",
    "HoldingKind",
    "LimitReason",
    "LimitState",
    "LimitsUnavailableError",
    "Month",
    "QuotaExceededError",
    "RateLimitExceededError",
    "RequestTooLargeError",
    "TenantRateLimiter",
]
