"""What the limits share: a tenant's standing and the refusals (:class:`LimitState`, :class:`RateLimitExceededError`,
:class:`LimitsUnavailableError`), and the contract of the storage that keeps windows and leases (:class:`Admissions`),
which :class:`~auth.limits.memory.MemoryAdmissions` and :class:`~auth.limits.redis.RedisAdmissions` implement."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from auth.settings import TenantLimits

__all__ = [
    "CONCURRENCY_RETRY_AFTER_S",
    "LEASE_REFUSALS",
    "WINDOW_S",
    "Admissions",
    "Ask",
    "Lease",
    "LeaseKind",
    "LimitReason",
    "LimitState",
    "LimitsUnavailableError",
    "RateLimitExceededError",
    "Verdict",
    "Window",
]

LimitReason = Literal["requests", "characters", "concurrency", "sessions", "bodies", "fair_share"]
LeaseKind = Literal["streams", "sessions"]
Window = Literal["requests", "characters"]

WINDOW_S = 60
"""The per-minute limits' moving window."""
CONCURRENCY_RETRY_AFTER_S = 1
"""A stream's end cannot be predicted; ask the client to try again soon."""
LEASE_REFUSALS: dict[LeaseKind, LimitReason] = {"streams": "concurrency", "sessions": "sessions"}
"""Why a request is refused when no lease of a kind is free."""


@dataclass(frozen=True, slots=True)
class LimitState:
    """A tenant's standing against its per-minute limits (the gateway renders it as ``x-ratelimit-*`` headers).

    ``None`` for a limit means the tenant has none; ``None`` for remaining/reset means it is unknown (storage
    unreachable). "Tokens" are input characters, the speech analogue of OpenAI's tokens.
    """

    limit_requests: int | None = None
    remaining_requests: int | None = None
    reset_requests_s: float | None = None
    limit_tokens: int | None = None
    remaining_tokens: int | None = None
    reset_tokens_s: float | None = None


class RateLimitExceededError(Exception):
    """A request refused by a per-tenant limit (HTTP 429 with ``Retry-After``)."""

    def __init__(self, reason: LimitReason, retry_after_s: int, state: LimitState) -> None:
        super().__init__(f"rate limit exceeded: {reason}")
        self.reason: LimitReason = reason
        self.retry_after_s = retry_after_s
        self.state = state


class LimitsUnavailableError(Exception):
    """The limits storage is unreachable and the limiter fails closed (HTTP 503)."""


@dataclass(frozen=True, slots=True)
class Lease:
    """A lease an admission takes: of which kind, under which id, and how many of that kind the tenant may hold."""

    kind: LeaseKind
    id: str
    limit: int


@dataclass(frozen=True, slots=True)
class Ask:
    """What one admission asks of a tenant's limits."""

    limits: TenantLimits
    characters: int
    count_request: bool
    lease: Lease | None
    """A lease to take (the tenant has a limit of its kind), or ``None``."""

    def hits(self) -> list[tuple[Window, int, int]]:
        """The windows this admission counts in, requests first: each with the tenant's limit and the amount."""
        hits: list[tuple[Window, int, int]] = []
        if self.count_request and self.limits.requests_per_minute is not None:
            hits.append(("requests", self.limits.requests_per_minute, 1))
        if self.characters > 0 and self.limits.characters_per_minute is not None:
            hits.append(("characters", self.limits.characters_per_minute, self.characters))
        return hits


@dataclass(frozen=True, slots=True)
class Verdict:
    """An admission's answer: the tenant's standing after it (before it, when refused), and why it was refused."""

    state: LimitState
    refused: LimitReason | None = None


class Admissions(Protocol):
    """Where windows and leases are kept: checks an :class:`Ask` whole and counts it only if all of it fits.

    Storage failures raise one of :data:`storage.STORAGE_ERRORS`; the limiter decides what they mean.
    """

    async def admit(self, tenant: str, ask: Ask, lease_ttl_s: float) -> Verdict:
        """Count ``ask`` in the tenant's windows and take its lease (held for ``lease_ttl_s`` unless renewed), or,
        when any of them refuses it, nothing."""

    async def state(self, tenant: str, limits: TenantLimits) -> LimitState:
        """The tenant's standing, consuming nothing."""

    async def renew(self, tenant: str, kind: LeaseKind, lease_id: str, ttl_s: float) -> bool:
        """Hold the lease ``ttl_s`` more; ``False`` when it is no longer held (released, or expired)."""

    async def release(self, tenant: str, kind: LeaseKind, lease_id: str) -> None:
        """Let the lease go (nothing when it is not held)."""

    async def close(self) -> None:
        """Release what the storage holds of its own."""
