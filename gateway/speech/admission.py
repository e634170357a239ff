"""Admission: a tenant's per-minute limits, concurrent-stream and open-session leases, with every refusal counted."""

from __future__ import annotations

from typing import TYPE_CHECKING

from auth.limits import RateLimitExceededError

if TYPE_CHECKING:
    from contextlib import AsyncExitStack

    from auth import Tenant
    from auth.limits import LimitState, TenantRateLimiter
    from auth.usage import UsageLedger
    from gateway.observability.metrics import SpeechMetrics

__all__ = ["Admission"]


class Admission:
    """Counts requests against their tenant's limits and holds their streams; refusals go to usage and metrics."""

    def __init__(self, limiter: TenantRateLimiter, usage: UsageLedger, metrics: SpeechMetrics) -> None:
        self.limiter = limiter
        self._usage = usage
        self._metrics = metrics

    async def admit(
        self,
        tenant: Tenant,
        characters: int,
        *,
        count_request: bool = True,
        hold_stream: AsyncExitStack | None = None,
    ) -> LimitState:
        """Count a request (or, with ``count_request=False``, only its characters) against the tenant's limits and,
        with ``hold_stream``, take one of its concurrent streams until that stack closes: one step, one round trip.

        Raises:
            RateLimitExceededError: over a limit (recorded as a rejection); nothing was consumed.
            LimitsUnavailableError: the limits' storage is unreachable and they fail closed.
        """
        try:
            return await self.limiter.admit(
                tenant.name, tenant.limits, characters, count_request=count_request, hold_stream=hold_stream
            )
        except RateLimitExceededError as exc:
            self.record_rejection(tenant, exc.reason)
            raise

    async def hold_session(self, tenant: Tenant, held: AsyncExitStack) -> None:
        """Take one of the tenant's open WebSocket sessions (``open_sessions``) until ``held`` closes.

        Raises:
            RateLimitExceededError: the tenant holds its most sessions (reason ``sessions``, recorded as a rejection).
            LimitsUnavailableError: the limits' storage is unreachable and they fail closed.
        """
        try:
            await held.enter_async_context(self.limiter.session_lease(tenant.name, tenant.limits))
        except RateLimitExceededError as exc:
            self.record_rejection(tenant, exc.reason)
            raise

    def record_rejection(self, tenant: Tenant, reason: str) -> None:
        """Count a request of ``tenant`` refused by one of its caps (the tenant's usage and
        ``tts_rate_limit_rejections_total``); also for the caps checked outside admission: bodies in flight
        (``gateway/http/auth/early_auth.py``) and uploads in flight (``gateway/routes/_forms.py``)."""
        self._usage.record_rejection(tenant, reason)
        self._metrics.rejections.labels(tenant.name, reason).inc()
