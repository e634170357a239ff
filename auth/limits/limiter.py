"""The per-tenant limiter (:class:`TenantRateLimiter`): admits requests and holds leases on the limits' storage, in
memory or in Redis, and decides what a refusal tells the client and what an unreachable storage means."""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Literal

from auth.limits.base import (
    CONCURRENCY_RETRY_AFTER_S,
    WINDOW_S,
    Admissions,
    Ask,
    Budget,
    BudgetState,
    Lease,
    LimitReason,
    LimitState,
    LimitsUnavailableError,
    Month,
    QuotaExceededError,
    RateLimitExceededError,
    RequestTooLargeError,
    Verdict,
)
from auth.limits.memory import MemoryAdmissions
from auth.limits.redis import RedisAdmissions
from lifecycle import BackgroundTasks, naming
from storage import STORAGE_ERRORS, OutageLatch
from storage.pressure import WriteRefusals, refuses_writes

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from contextlib import AbstractAsyncContextManager

    from auth.settings import TenantLimits
    from storage import RedisClient

__all__ = ["TenantRateLimiter"]

logger = naming.logger("limits")

_MAX_RETRY_AFTER_S = WINDOW_S
_LEASE_POLL_S = 0.02  # while waiting for a stream to free: one storage round trip per try


class TenantRateLimiter:
    """Admits requests against each tenant's per-minute limits and monthly budgets, and holds its concurrent-stream
    leases.

    Args:
        redis: The process's Redis client, shared by every replica; ``None`` keeps limits in this process's memory.
        fail_mode: with Redis unreachable, ``open`` admits (counted in :attr:`outage_count`, one warning per
            outage) and ``closed`` raises :class:`LimitsUnavailableError`.
        lease_ttl_s: a stream lease not renewed for this long expires (its replica died); leases held here are
            renewed every third of it.
        stream_wait_s: how long a stream over the tenant's limit waits for one of its streams to end before it is
            refused (0: at once).
    """

    def __init__(
        self,
        redis: RedisClient | None,
        *,
        fail_mode: Literal["open", "closed"] = "open",
        lease_ttl_s: float = 30.0,
        stream_wait_s: float = 0.0,
    ) -> None:
        self.fail_mode = fail_mode
        self.lease_ttl_s = lease_ttl_s
        self.stream_wait_s = stream_wait_s
        self.outage_count = 0
        self._outage = OutageLatch(
            logger,
            "rate-limit storage unreachable, admitting requests unchecked until it returns",
            "rate-limit storage reachable again; limits enforced",
        )
        self.write_refusals = WriteRefusals(
            "limits", logger, f"requests are admitted {'unchecked' if fail_mode == 'open' else 'with 503'}"
        )
        """Admissions refused by a Redis that answers (out of memory, a read-only replica): an episode, not an
        outage; requests are admitted (or refused) as ``fail_mode`` says, as in an outage."""
        self._background = BackgroundTasks("the rate limiter")
        self._store: Admissions = MemoryAdmissions() if redis is None else RedisAdmissions(redis)

    async def admit(
        self,
        tenant: str,
        limits: TenantLimits,
        characters: int,
        *,
        count_request: bool = True,
        hold_stream: AsyncExitStack | None = None,
        generation: str = "",
    ) -> LimitState:
        """Count one request of ``characters`` input characters against the tenant's per-minute limits and, with
        ``hold_stream``, take one of its concurrent streams until that stack closes — all in one step: a request
        refused by any of them consumes nothing.

        ``count_request=False`` counts the characters only: a segment of a realtime session, whose session was
        counted as the request. ``generation``: the tenant's (:attr:`~auth.tenants.Tenant.generation`), whose monthly
        budgets these are.

        Returns:
            The state after this request, for the ``x-ratelimit-*`` headers.

        Raises:
            RateLimitExceededError: a limit would be exceeded (a stream limit only after ``stream_wait_s``).
            LimitsUnavailableError: the storage is unreachable and the limiter fails closed.
        """
        streams = limits.concurrent_streams
        lease = Lease("streams", uuid.uuid4().hex, streams) if hold_stream is not None and streams else None
        ask = Ask(limits, characters, count_request, lease, _month_of(limits, generation))
        return await self._take(tenant, ask, hold_stream)

    def spend(self, tenant: str, limits: TenantLimits, budget: Budget, amount: float, *, generation: str = "") -> None:
        """Count work done after its admission in the tenant's month, when it has a monthly budget (written in the
        background, off the response's path): audio seconds, known only once spoken, and a job's characters, which
        its admission did not count. A request admitted under the line may finish past it; the tenant's next request
        is refused."""
        month = _month_of(limits, generation)
        if month is not None and amount > 0:
            self._background.spawn(self._spend(tenant, month, budget, amount))

    async def budget(self, tenant: str, limits: TenantLimits, *, generation: str = "") -> BudgetState:
        """The tenant's standing against its monthly budgets this month, consuming nothing (counts ``None`` when the
        storage is unreachable and the limiter fails open; nothing counted for a tenant without a budget).

        Raises:
            LimitsUnavailableError: the storage is unreachable and the limiter fails closed.
        """
        month = _month_of(limits, generation)
        if month is None:
            return BudgetState(Month.at(time.time()))
        state = await self.state(tenant, limits, generation=generation)
        return state.budget or BudgetState(month, limits.characters_per_month, None, limits.audio_seconds_per_month)

    def session_lease(self, tenant: str, limits: TenantLimits) -> AbstractAsyncContextManager[None]:
        """Hold one of the tenant's open WebSocket sessions (``open_sessions``, across replicas) for the duration of an
        ``async with``, renewed while held, released however the block ends.

        Raises:
            RateLimitExceededError: the tenant holds ``open_sessions`` sessions (on enter; reason ``sessions``).
            LimitsUnavailableError: the storage is unreachable and the limiter fails closed (on enter).
        """
        return self._session(tenant, limits)

    @asynccontextmanager
    async def _session(self, tenant: str, limits: TenantLimits) -> AsyncIterator[None]:
        async with AsyncExitStack() as held:
            if limits.open_sessions is not None:
                lease = Lease("sessions", uuid.uuid4().hex, limits.open_sessions)
                await self._take(tenant, Ask(limits, 0, False, lease), held)
            yield

    async def _take(self, tenant: str, ask: Ask, hold: AsyncExitStack | None) -> LimitState:
        """Admit ``ask`` whole; its lease, if any, is held until ``hold`` closes."""
        if ask.lease is None and not ask.hits() and ask.month is None:
            return LimitState()
        verdict = await self._admit_within_wait(tenant, ask)
        if verdict is None:  # storage unreachable, failing open: admitted unchecked, without a lease
            self.outage_count += 1 if ask.hits() or ask.month else 0
            return _unknown_state(ask.limits)
        if verdict.refused is not None:
            raise _refusal(verdict.refused, ask, verdict.state)
        if hold is not None and (lease := ask.lease) is not None:
            hold.push_async_callback(self._let_go, tenant, lease, self._background.spawn(self._renew(tenant, lease)))
        return verdict.state

    async def state(self, tenant: str, limits: TenantLimits, *, generation: str = "") -> LimitState:
        """The tenant's current standing, consuming nothing.

        Raises:
            LimitsUnavailableError: the storage is unreachable and the limiter fails closed.
        """
        try:
            state = await self._store.state(tenant, limits, _month_of(limits, generation))
        except STORAGE_ERRORS as exc:
            self._storage_failed(exc)
            return _unknown_state(limits)
        self._outage.worked()
        return state

    def stream_lease(self, tenant: str, limits: TenantLimits) -> AbstractAsyncContextManager[None]:
        """Hold one of the tenant's concurrent streams for the duration of an ``async with`` (no window counted).

        The lease is released when the block ends however it ends (including cancellation) and renewed in the
        background while held.

        Raises:
            RateLimitExceededError: the tenant held ``concurrent_streams`` leases for all of ``stream_wait_s``
                (on enter).
            LimitsUnavailableError: the storage is unreachable and the limiter fails closed (on enter).
        """
        return self._lease(tenant, limits)

    async def close(self) -> None:
        """Stop renewals (the Redis client belongs to whoever built it)."""
        await self._background.close()
        await self._store.close()

    @asynccontextmanager
    async def _lease(self, tenant: str, limits: TenantLimits) -> AsyncIterator[None]:
        async with AsyncExitStack() as held:
            await self.admit(tenant, limits, 0, count_request=False, hold_stream=held)
            yield

    async def _admit_within_wait(self, tenant: str, ask: Ask) -> Verdict | None:
        """Ask until the stream limit admits, for up to ``stream_wait_s``; ``None`` when the storage is unreachable.

        A client that aborts a stream and asks again at once can be faster than the server noticing the abort; the
        short wait absorbs that instead of refusing a client whose stream has in fact ended.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.stream_wait_s
        while True:
            try:
                verdict = await self._store.admit(tenant, ask, self.lease_ttl_s)
            except STORAGE_ERRORS as exc:
                self._forget(tenant, ask.lease)
                self._storage_failed(exc)
                return None
            except asyncio.CancelledError:
                self._forget(tenant, ask.lease)
                raise
            self._outage.worked()
            self.write_refusals.worked()
            left = deadline - loop.time()
            if verdict.refused != "concurrency" or left <= 0:
                return verdict
            await asyncio.sleep(min(_LEASE_POLL_S, left))

    async def _spend(self, tenant: str, month: Month, budget: Budget, amount: float) -> None:
        try:
            await self._store.spend(tenant, month, budget, amount)
        except STORAGE_ERRORS as exc:  # an outage: that work goes uncounted against the budget, as admissions do
            logger.debug("%s of tenant %s not counted in its month: %r", budget, tenant, exc)

    async def _renew(self, tenant: str, lease: Lease) -> None:
        while True:
            await asyncio.sleep(self.lease_ttl_s / 3)
            try:
                if not await self._store.renew(tenant, lease.kind, lease.id, self.lease_ttl_s):
                    logger.warning("%s lease of tenant %s expired before its renewal", lease.kind, tenant)
                    return
            except STORAGE_ERRORS as exc:
                logger.debug("stream lease renewal failed: %r", exc)

    async def _let_go(self, tenant: str, lease: Lease, renewal: asyncio.Task[None]) -> None:
        renewal.cancel()
        # Shielded: a cancelled caller (client gone) may be cancelled again at any await here (anyio cancels
        # level-triggered), and the release must still reach the storage.
        await asyncio.shield(self._background.spawn(self._release(tenant, lease, renewal)))

    async def _release(self, tenant: str, lease: Lease, renewal: asyncio.Task[None]) -> None:
        await asyncio.wait([renewal])  # its last renewal must not land after the release
        await self._drop(tenant, lease)

    def _forget(self, tenant: str, lease: Lease | None) -> None:
        """Release, in the background, a lease whose admission ended without its answer (the caller was cancelled,
        or the reply was lost): the script may have taken it in Redis, and nobody else knows its id. Before, such a
        lease held one of the tenant's streams until it expired (``lease_ttl_s``) after every request had ended."""
        if lease is not None:
            self._background.spawn(self._drop(tenant, lease))

    async def _drop(self, tenant: str, lease: Lease) -> None:
        try:
            await self._store.release(tenant, lease.kind, lease.id)
        except STORAGE_ERRORS as exc:  # it expires by itself after lease_ttl_s
            logger.debug("%s lease release failed: %r", lease.kind, exc)

    def _storage_failed(self, exc: Exception) -> None:
        if refuses_writes(exc):
            self.write_refusals.refused(exc)
        else:
            self._outage.failed(exc)
        if self.fail_mode == "closed":
            raise LimitsUnavailableError("rate-limit storage unreachable") from exc


def _refusal(reason: LimitReason, ask: Ask, state: LimitState) -> RateLimitExceededError:
    if reason in {"characters_per_month", "audio_seconds_per_month"} and ask.month is not None:
        until_next_month = max(1, math.ceil(ask.month.end - time.time()))
        if reason == "characters_per_month":
            return QuotaExceededError(reason, until_next_month, state, ask.characters)
        return QuotaExceededError("audio_seconds_per_month", until_next_month, state, 0)
    if reason in {"concurrency", "sessions", "bodies", "fair_share"}:
        return RateLimitExceededError(reason, CONCURRENCY_RETRY_AFTER_S, state)
    limit = ask.limits.characters_per_minute or 0
    if reason == "characters" and ask.characters > limit:  # never fits in a minute, whatever the wait
        return RequestTooLargeError(reason, _MAX_RETRY_AFTER_S, state, ask.characters, limit)
    reset = state.reset_requests_s if reason == "requests" else state.reset_tokens_s
    # The oldest entry leaving the window frees the first unit; for a weighted hit more may be needed later.
    retry_after = min(_MAX_RETRY_AFTER_S, max(1, math.ceil(reset or 0.0)))
    return RateLimitExceededError(reason, retry_after, state)


def _month_of(limits: TenantLimits, generation: str = "") -> Month | None:
    """This month of the tenant's generation, for a tenant with a monthly budget (its month is counted); ``None``
    otherwise."""
    if limits.characters_per_month is None and limits.audio_seconds_per_month is None:
        return None
    return Month.at(time.time(), generation)


def _unknown_state(limits: TenantLimits) -> LimitState:
    month = _month_of(limits)
    budget = (
        None
        if month is None
        else BudgetState(month, limits.characters_per_month, None, limits.audio_seconds_per_month, None)
    )
    return LimitState(
        limit_requests=limits.requests_per_minute, limit_tokens=limits.characters_per_minute, budget=budget
    )
