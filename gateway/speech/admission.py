"""Admission: a tenant's per-minute limits, monthly budgets, concurrent-stream and open-session leases, with every
refusal counted."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from auth.limits import RateLimitExceededError

if TYPE_CHECKING:
    from collections.abc import Callable
    from contextlib import AbstractAsyncContextManager, AsyncExitStack

    from auth import Tenant
    from auth.limits import BudgetState, LimitState, TenantRateLimiter
    from auth.revocations import Revocation
    from auth.usage import UsageLedger
    from gateway.observability.metrics import SpeechMetrics

__all__ = ["AdmissionControl"]


class AdmissionControl:
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
            state = await self.limiter.admit(
                tenant.name,
                tenant.limits,
                characters,
                count_request=count_request,
                hold_stream=hold_stream,
                generation=tenant.generation,
            )
        except RateLimitExceededError as exc:
            self.record_rejection(tenant, exc.reason)
            self._observe_budget(tenant, exc.state.budget)
            raise
        self._observe_budget(tenant, state.budget)
        return state

    def spend_audio(self, tenant: Tenant, audio_seconds: float) -> None:
        """Count audio spoken for the tenant in its monthly budget (``audio_seconds_per_month``), off the response's
        path. Audio is known only once spoken: a request admitted under the line may finish past it, and the next one
        is refused."""
        self.limiter.spend(
            tenant.name, tenant.limits, "audio_seconds_per_month", audio_seconds, generation=tenant.generation
        )

    def spend_job_characters(self, tenant: Tenant, characters: int) -> None:
        """Count a finished speech job's characters in the tenant's ``characters_per_month``: a job is admitted as one
        request without its characters (a book never fits a minute's window), so its month counts them once it ends,
        and once over the line the tenant's next request is refused."""
        self.limiter.spend(tenant.name, tenant.limits, "characters_per_month", characters, generation=tenant.generation)

    async def budget(self, tenant: Tenant) -> BudgetState:
        """The tenant's standing against its monthly budgets this month (what ``GET /v1/usage`` shows, and what an
        ElevenLabs subscription reads: ``characters_used``/``characters_limit``, ``month.end`` for the next reset).

        Raises:
            LimitsUnavailableError: the limits' storage is unreachable and they fail closed.
        """
        standing = await self.limiter.budget(tenant.name, tenant.limits, generation=tenant.generation)
        self._observe_budget(tenant, standing)
        return standing

    def tenant_changed(self, revocation: Revocation) -> None:
        """Drop a deleted or replaced tenant's ``tts_tenant_budget_used_ratio``: an alert on it would go on firing
        for a tenant that is gone, or for a budget it no longer has (its next admission sets it again)."""
        if revocation.kind != "key":
            self._metrics.budget_used.forget(revocation.subject)

    def _observe_budget(self, tenant: Tenant, standing: BudgetState | None) -> None:
        """``tts_tenant_budget_used_ratio``: how near the tenant is to each of its monthly budgets' line."""
        if standing is None:
            return
        for budget in ("characters_per_month", "audio_seconds_per_month"):
            if (used := standing.fraction_used(budget)) is not None:
                self._metrics.budget_used.labels(tenant.name, budget).set(used)

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

    def stream_leases(self, tenant: Tenant) -> Callable[[], AbstractAsyncContextManager[None]] | None:
        """How to hold one more of the tenant's concurrent streams for an ``async with`` (a session's further lane
        speaking at once: ``gateway/sessions/streams.py``), waiting ``limits.stream_wait_s`` for one to free; a refusal
        is not recorded (the lane waits its turn). ``None``: the tenant has no ``concurrent_streams``.

        Each lease raises on enter ``RateLimitExceededError`` (reason ``concurrency``) when the tenant's streams are all
        held, ``LimitsUnavailableError`` when the limits' storage is unreachable and they fail closed.
        """
        if tenant.limits.concurrent_streams is None:
            return None
        return functools.partial(self.limiter.stream_lease, tenant.name, tenant.limits)

    def record_rejection(self, tenant: Tenant, reason: str) -> None:
        """Count a request of ``tenant`` refused by one of its caps (the tenant's usage and
        ``tts_rate_limit_rejections_total``); also for the caps checked outside admission: bodies in flight
        (``gateway/http/auth/early_auth.py``) and uploads in flight (``gateway/routes/_forms.py``)."""
        self._usage.record_rejection(tenant, reason)
        self._metrics.rejections.labels(tenant.name, reason).inc()
