"""Per-tenant rate limits: requests and input characters per minute (``limits``) and concurrent streams (leases).

Requests and characters use the ``limits`` library's moving window, in memory or in Redis so that every replica
shares one budget. ``limits`` has no concurrency primitive, so concurrent-stream leases are written here: in Redis a
sorted set per tenant (member: lease id, score: expiry in ms), acquired by a small Lua script and renewed while the
stream runs, so that a replica that dies mid-stream stops holding its leases after ``lease_ttl_s``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from limits import RateLimitItemPerMinute
from limits.aio.storage import MemoryStorage, RedisStorage
from limits.aio.strategies import MovingWindowRateLimiter

from storage import STORAGE_ERRORS, OutageLatch

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Coroutine
    from contextlib import AbstractAsyncContextManager

    import redis.asyncio as aioredis

    from auth.settings import TenantLimits

__all__ = [
    "LimitReason",
    "LimitState",
    "LimitsUnavailableError",
    "RateLimitExceededError",
    "TenantRateLimiter",
]

logger = logging.getLogger("tts_gateway.limits")

LimitReason = Literal["requests", "characters", "concurrency"]

_MAX_RETRY_AFTER_S = 60
_CONCURRENCY_RETRY_AFTER_S = 1  # a stream's end cannot be predicted; ask the client to try again soon
_LEASE_POLL_S = 0.02  # while waiting for a stream to free: one storage round trip per try


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
class _Check:
    reason: Literal["requests", "characters"]
    item: RateLimitItemPerMinute
    cost: int


class _LeaseStore(Protocol):
    async def acquire(self, tenant: str, lease_id: str, limit: int, ttl_s: float) -> bool: ...
    async def renew(self, tenant: str, lease_id: str, ttl_s: float) -> bool: ...
    async def release(self, tenant: str, lease_id: str) -> None: ...


class _MemoryLeases:
    """Leases of one process: the same semantics as the Redis sorted sets, for tests and single replicas."""

    def __init__(self) -> None:
        self._leases: dict[str, dict[str, float]] = {}

    async def acquire(self, tenant: str, lease_id: str, limit: int, ttl_s: float) -> bool:
        now = time.monotonic()
        held = {lid: expiry for lid, expiry in self._leases.get(tenant, {}).items() if expiry > now}
        self._leases[tenant] = held
        if len(held) >= limit:
            return False
        held[lease_id] = now + ttl_s
        return True

    async def renew(self, tenant: str, lease_id: str, ttl_s: float) -> bool:
        held = self._leases.get(tenant, {})
        if lease_id not in held:
            return False
        held[lease_id] = time.monotonic() + ttl_s
        return True

    async def release(self, tenant: str, lease_id: str) -> None:
        self._leases.get(tenant, {}).pop(lease_id, None)


# Redis's own clock, so that replicas with skewed clocks agree on expiries.
_NOW_MS = "local t = redis.call('TIME') local now = t[1] * 1000 + math.floor(t[2] / 1000) "
_ACQUIRE_LUA = (
    _NOW_MS
    + """
local ttl = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('PEXPIRE', KEYS[1], ttl)
return 1
"""
)
# XX: a renewal that lands after the release must not bring the lease back.
_RENEW_LUA = (
    _NOW_MS
    + """
local ttl = tonumber(ARGV[2])
if redis.call('ZADD', KEYS[1], 'XX', 'CH', now + ttl, ARGV[1]) == 0 then return 0 end
if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
return 1
"""
)


class _RedisLeases:
    """Leases shared by every replica: ``{prefix}{tenant}`` is a sorted set of lease ids scored by expiry (ms)."""

    def __init__(self, client: aioredis.Redis, prefix: str = "tts:leases:") -> None:
        self._client = client
        self._prefix = prefix
        self._acquire = client.register_script(_ACQUIRE_LUA)
        self._renew = client.register_script(_RENEW_LUA)

    async def acquire(self, tenant: str, lease_id: str, limit: int, ttl_s: float) -> bool:
        return bool(await self._acquire(keys=[self._prefix + tenant], args=[lease_id, limit, _ms(ttl_s)]))

    async def renew(self, tenant: str, lease_id: str, ttl_s: float) -> bool:
        return bool(await self._renew(keys=[self._prefix + tenant], args=[lease_id, _ms(ttl_s)]))

    async def release(self, tenant: str, lease_id: str) -> None:
        await self._client.zrem(self._prefix + tenant, lease_id)


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


class TenantRateLimiter:
    """Admits requests against each tenant's per-minute limits and holds its concurrent-stream leases.

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
        redis: aioredis.Redis | None,
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
        self._background: set[asyncio.Task[None]] = set()
        self._leases: _LeaseStore
        if redis is None:
            self._storage: MemoryStorage | RedisStorage = MemoryStorage()
            self._leases = _MemoryLeases()
        else:
            # The windows use the shared client's connection pool (``implementation="redispy"``: ``limits``
            # defaults to coredis); the URI only names the scheme, the pool holds the address and credentials.
            shared: dict[str, Any] = {"connection_pool": redis.connection_pool}
            self._storage = RedisStorage("redis://", implementation="redispy", key_prefix="tts:limits", **shared)
            self._leases = _RedisLeases(redis)
        self._windows = MovingWindowRateLimiter(self._storage)

    async def admit(
        self,
        tenant: str,
        limits: TenantLimits,
        characters: int,
        *,
        count_request: bool = True,
    ) -> LimitState:
        """Count one request of ``characters`` input characters against the tenant's per-minute limits.

        ``count_request=False`` counts the characters only: a segment of a realtime session, whose session was
        counted as the request.

        Returns:
            The state after this request, for the ``x-ratelimit-*`` headers.

        Raises:
            RateLimitExceededError: a limit would be exceeded; nothing was consumed.
            LimitsUnavailableError: the storage is unreachable and the limiter fails closed.
        """
        checks = _checks(limits, characters, count_request=count_request)
        if not checks:
            return LimitState()
        try:
            before = await self._read(tenant, limits)
            for check in checks:
                if _remaining(before, check.reason) < check.cost:
                    raise _refusal(check, before)
            # The look above consumed nothing; a hit can still lose a race against another replica, and then the
            # requests hit made before it stays counted (hits cannot be undone in ``limits``).
            for check in checks:
                if not await self._windows.hit(check.item, tenant, cost=check.cost):
                    raise _refusal(check, await self._read(tenant, limits))
            after = await self._read(tenant, limits)
        except STORAGE_ERRORS as exc:
            self._storage_failed(exc)
            self.outage_count += 1
            return _unknown_state(limits)
        self._storage_worked()
        return after

    async def state(self, tenant: str, limits: TenantLimits) -> LimitState:
        """The tenant's current standing, consuming nothing.

        Raises:
            LimitsUnavailableError: the storage is unreachable and the limiter fails closed.
        """
        try:
            state = await self._read(tenant, limits)
        except STORAGE_ERRORS as exc:
            self._storage_failed(exc)
            return _unknown_state(limits)
        self._storage_worked()
        return state

    def stream_lease(self, tenant: str, limits: TenantLimits) -> AbstractAsyncContextManager[None]:
        """Hold one of the tenant's concurrent streams for the duration of an ``async with``.

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
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        if isinstance(self._storage, MemoryStorage) and self._storage.timer is not None:
            self._storage.timer.cancel()

    @asynccontextmanager
    async def _lease(self, tenant: str, limits: TenantLimits) -> AsyncIterator[None]:
        limit = limits.concurrent_streams
        if limit is None:
            yield
            return
        lease_id = uuid.uuid4().hex
        acquired = await self._acquire_within_wait(tenant, lease_id, limit)
        if acquired is None:  # storage unreachable, failing open: the stream runs without a lease
            yield
            return
        if not acquired:
            raise RateLimitExceededError("concurrency", _CONCURRENCY_RETRY_AFTER_S, await self.state(tenant, limits))
        renewal = self._spawn(self._renew(tenant, lease_id))
        try:
            yield
        finally:
            renewal.cancel()
            # Shielded: a cancelled caller (client gone) may be cancelled again at any await here (anyio cancels
            # level-triggered), and the release must still reach the storage.
            await asyncio.shield(self._spawn(self._release(tenant, lease_id, renewal)))

    async def _acquire_within_wait(self, tenant: str, lease_id: str, limit: int) -> bool | None:
        """Try for a lease until ``stream_wait_s`` has passed.

        A client that aborts a stream and asks again at once can be faster than the server noticing the abort; the
        short wait absorbs that instead of refusing a client whose stream has in fact ended.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.stream_wait_s
        while (acquired := await self._try_acquire(tenant, lease_id, limit)) is False:
            left = deadline - loop.time()
            if left <= 0:
                break
            await asyncio.sleep(min(_LEASE_POLL_S, left))
        return acquired

    async def _try_acquire(self, tenant: str, lease_id: str, limit: int) -> bool | None:
        try:
            acquired = await self._leases.acquire(tenant, lease_id, limit, self.lease_ttl_s)
        except STORAGE_ERRORS as exc:
            self._storage_failed(exc)
            return None
        self._storage_worked()
        return acquired

    async def _renew(self, tenant: str, lease_id: str) -> None:
        while True:
            await asyncio.sleep(self.lease_ttl_s / 3)
            try:
                if not await self._leases.renew(tenant, lease_id, self.lease_ttl_s):
                    logger.warning("stream lease of tenant %s expired before its renewal", tenant)
                    return
            except STORAGE_ERRORS as exc:
                logger.debug("stream lease renewal failed: %r", exc)

    async def _release(self, tenant: str, lease_id: str, renewal: asyncio.Task[None]) -> None:
        await asyncio.wait([renewal])  # its last renewal must not land after the release
        try:
            await self._leases.release(tenant, lease_id)
        except STORAGE_ERRORS as exc:  # it expires by itself after lease_ttl_s
            logger.debug("stream lease release failed: %r", exc)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def _read(self, tenant: str, limits: TenantLimits) -> LimitState:
        requests, characters = limits.requests_per_minute, limits.characters_per_minute
        req = self._window(tenant, requests, "requests")
        chars = self._window(tenant, characters, "characters")
        (req_remaining, req_reset), (chars_remaining, chars_reset) = await asyncio.gather(req, chars)
        return LimitState(requests, req_remaining, req_reset, characters, chars_remaining, chars_reset)

    async def _window(self, tenant: str, limit: int | None, namespace: str) -> tuple[int | None, float | None]:
        if limit is None:
            return None, None
        stats = await self._windows.get_window_stats(RateLimitItemPerMinute(limit, namespace=namespace), tenant)
        # An empty window reports "now + 60 s"; nothing is waiting to reset then.
        reset = 0.0 if stats.remaining >= limit else max(0.0, stats.reset_time - time.time())
        return max(0, stats.remaining), reset

    def _storage_failed(self, exc: Exception) -> None:
        if self.fail_mode == "closed":
            raise LimitsUnavailableError("rate-limit storage unreachable") from exc
        self._outage.failed(exc)

    def _storage_worked(self) -> None:
        self._outage.worked()


def _checks(limits: TenantLimits, characters: int, *, count_request: bool) -> list[_Check]:
    checks = []
    # Requests first: if a later hit loses a race, one request is what stays counted, not a clip's characters.
    if limits.requests_per_minute is not None and count_request:
        checks.append(_Check("requests", RateLimitItemPerMinute(limits.requests_per_minute, namespace="requests"), 1))
    if limits.characters_per_minute is not None and characters > 0:
        item = RateLimitItemPerMinute(limits.characters_per_minute, namespace="characters")
        checks.append(_Check("characters", item, characters))
    return checks


def _remaining(state: LimitState, reason: Literal["requests", "characters"]) -> int:
    remaining = state.remaining_requests if reason == "requests" else state.remaining_tokens
    return remaining or 0


def _refusal(check: _Check, state: LimitState) -> RateLimitExceededError:
    reset = state.reset_requests_s if check.reason == "requests" else state.reset_tokens_s
    if check.cost > check.item.amount:  # never fits in a minute; waiting a whole window is the honest answer
        reset = float(_MAX_RETRY_AFTER_S)
    # The oldest entry leaving the window frees the first unit; for a weighted hit more may be needed later.
    retry_after = min(_MAX_RETRY_AFTER_S, max(1, math.ceil(reset or 0.0)))
    return RateLimitExceededError(check.reason, retry_after, state)


def _unknown_state(limits: TenantLimits) -> LimitState:
    return LimitState(limit_requests=limits.requests_per_minute, limit_tokens=limits.characters_per_minute)
