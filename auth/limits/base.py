"""What the limits share: a tenant's standing and the refusals (:class:`LimitState`, :class:`BudgetState`,
:class:`RateLimitExceededError` and its :class:`QuotaExceededError`, :class:`LimitsUnavailableError`), the calendar
month the budgets count in (:class:`Month`), and the contract of the storage that keeps windows, budgets and leases
(:class:`Admissions`), which :class:`~auth.limits.memory.MemoryAdmissions` and
:class:`~auth.limits.redis.RedisAdmissions` implement."""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from auth.settings import TenantLimits

__all__ = [
    "CONCURRENCY_RETRY_AFTER_S",
    "LEASE_REFUSALS",
    "WINDOW_S",
    "Admissions",
    "Ask",
    "Budget",
    "BudgetState",
    "Lease",
    "LeaseKind",
    "LimitReason",
    "LimitState",
    "LimitsUnavailableError",
    "Month",
    "QuotaExceededError",
    "RateLimitExceededError",
    "RequestTooLargeError",
    "Verdict",
    "Window",
]

LimitReason = Literal[
    "requests",
    "characters",
    "concurrency",
    "sessions",
    "bodies",
    "fair_share",
    "characters_per_month",
    "audio_seconds_per_month",
]
Budget = Literal["characters_per_month", "audio_seconds_per_month"]
LeaseKind = Literal["streams", "sessions"]
Window = Literal["requests", "characters"]

WINDOW_S = 60
"""The per-minute limits' moving window."""
CONCURRENCY_RETRY_AFTER_S = 1
"""A stream's end cannot be predicted; ask the client to try again soon."""
LEASE_REFUSALS: dict[LeaseKind, LimitReason] = {"streams": "concurrency", "sessions": "sessions"}
"""Why a request is refused when no lease of a kind is free."""


@dataclass(frozen=True, slots=True)
class Month:
    """A calendar month in UTC, the period of the monthly budgets."""

    start: int
    """Unix time of its first second."""
    end: int
    """Unix time of the next month's first second: when the budgets start again."""
    generation: str = ""
    """The tenant's :attr:`~auth.tenants.Tenant.generation` whose month this is: a tenant deleted and created again
    under the same name starts its budgets anew, as its usage does ("": a tenant without one)."""

    @classmethod
    def at(cls, unix_s: float, generation: str = "") -> Month:
        moment = datetime.fromtimestamp(unix_s, UTC)
        days = calendar.monthrange(moment.year, moment.month)[1]
        start = datetime(moment.year, moment.month, 1, tzinfo=UTC).timestamp()
        return cls(int(start), int(start) + days * 86400, generation)

    @property
    def name(self) -> str:
        """``YYYY-MM``."""
        return datetime.fromtimestamp(self.start, UTC).strftime("%Y-%m")

    @property
    def counter_key(self) -> str:
        """How the month's counters are keyed: ``YYYY-MM``, then the tenant's generation where it has one."""
        return f"{self.name}:{self.generation}" if self.generation else self.name


@dataclass(frozen=True, slots=True)
class BudgetState:
    """A tenant's standing against its monthly budgets (``characters_per_month``, ``audio_seconds_per_month``).

    The month is counted while the tenant has either budget; ``None`` for a limit means the tenant has none, ``None``
    for a count that it is unknown (storage unreachable). Characters count when a request is admitted, audio seconds
    when it has been spoken.
    """

    month: Month
    characters_limit: int | None = None
    characters_used: int | None = None
    audio_seconds_limit: float | None = None
    audio_seconds_used: float | None = None

    @property
    def counted(self) -> bool:
        """Whether the tenant has a monthly budget (its month is counted)."""
        return self.characters_limit is not None or self.audio_seconds_limit is not None

    def fraction_used(self, budget: Budget) -> float | None:
        """How much of one budget is spent (1.0: all of it; may pass 1.0 for audio); ``None``: no such budget."""
        limit: float | None
        used: float | None
        if budget == "characters_per_month":
            limit, used = self.characters_limit, self.characters_used
        else:
            limit, used = self.audio_seconds_limit, self.audio_seconds_used
        return None if limit is None or used is None else used / limit


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
    budget: BudgetState | None = None
    """The monthly budgets' standing, for a tenant that has one."""


class RateLimitExceededError(Exception):
    """A request refused by a per-tenant limit (HTTP 429 with ``Retry-After``)."""

    def __init__(self, reason: LimitReason, retry_after_s: int, state: LimitState) -> None:
        super().__init__(f"rate limit exceeded: {reason}")
        self.reason: LimitReason = reason
        self.retry_after_s = retry_after_s
        self.state = state


class RequestTooLargeError(RateLimitExceededError):
    """A request that asks more than a whole per-minute limit (its characters over ``characters_per_minute``): no wait
    admits it, so its client is told not to retry."""

    def __init__(self, reason: LimitReason, retry_after_s: int, state: LimitState, asked: int, limit: int) -> None:
        super().__init__(reason, retry_after_s, state)
        self.asked = asked
        self.limit = limit


class QuotaExceededError(RateLimitExceededError):
    """A request refused by a monthly budget (OpenAI's 429 ``insufficient_quota``, ElevenLabs' ``quota_exceeded``):
    nothing admits it before the month ends, ``retry_after_s`` from now."""

    def __init__(self, reason: Budget, retry_after_s: int, state: LimitState, asked: float) -> None:
        super().__init__(reason, retry_after_s, state)
        self.budget: Budget = reason
        self.asked = asked
        """What the refused request would have spent: its characters; 0 for audio, known only once spoken, and for a
        session or a speech job, admitted before its text is known."""

    @property
    def standing(self) -> BudgetState:
        """The budgets' standing at the refusal."""
        assert self.state.budget is not None  # a budget refused it
        return self.state.budget


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
    month: Month | None = None
    """The month the characters count in, for a tenant with a monthly budget; ``None``: none."""

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

    async def state(self, tenant: str, limits: TenantLimits, month: Month | None = None) -> LimitState:
        """The tenant's standing (with its monthly budgets' in ``month``, when given), consuming nothing."""

    async def spend(self, tenant: str, month: Month, budget: Budget, amount: float) -> None:
        """Count ``amount`` in one of the tenant's budgets this month, after the work (audio seconds spoken, a job's
        characters): an admission refuses once the month's count reaches the budget."""

    async def renew(self, tenant: str, kind: LeaseKind, lease_id: str, ttl_s: float) -> bool:
        """Hold the lease ``ttl_s`` more; ``False`` when it is no longer held (released, or expired)."""

    async def release(self, tenant: str, kind: LeaseKind, lease_id: str) -> None:
        """Let the lease go (nothing when it is not held)."""

    async def close(self) -> None:
        """Release what the storage holds of its own."""
