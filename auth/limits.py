"""Per-tenant rate limits: requests and input characters per minute (moving windows) and concurrent streams (leases).

In memory (one replica) the windows are the ``limits`` library's moving windows. In Redis, shared by every replica,
one Lua script checks both windows and the stream lease of a request and, only if all three admit it, counts it in
both and takes the lease: one round trip per request instead of one per window and lease (``limits`` hits one item
per call), and a refused request consumes nothing, whichever limit refused it. The windows there have the same moving
semantics as ``limits``'s, over a compact list per tenant and window (``<ms>:<amount>`` per admitted request, newest
first) rather than one entry per character, with its running total beside it (``...-total``): an admission drops the
entries that left the window since the last one, oldest first, and never walks the entries still in it, so its cost
does not grow with the tenant's request rate. Redis's own clock times them, so replicas with skewed clocks agree. A
tenant's windows and lease share one hash tag (``{<tenant>}``), the one slot Redis Cluster needs for one script.

``limits`` has no concurrency primitive, so leases are written here: a sorted set per tenant and kind (member: lease
id, score: expiry in ms), renewed while held, so that a replica that dies stops holding its leases after
``lease_ttl_s``. Two kinds: concurrent streams (``concurrent_streams``, taken with a request's admission) and open
WebSocket sessions (``open_sessions``, taken when a session opens).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
from collections import Counter
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from limits import RateLimitItemPerMinute
from limits.aio.storage import MemoryStorage
from limits.aio.strategies import MovingWindowRateLimiter

from lifecycle import BackgroundTasks
from storage import STORAGE_ERRORS, OutageLatch
from storage.pressure import WriteRefusals, refuses_writes

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable
    from contextlib import AbstractAsyncContextManager

    from auth.settings import TenantLimits
    from storage import RedisClient

__all__ = [
    "HeldConnections",
    "HoldingKind",
    "LimitReason",
    "LimitState",
    "LimitsUnavailableError",
    "RateLimitExceededError",
    "TenantRateLimiter",
]

logger = logging.getLogger("tts_gateway.limits")

LimitReason = Literal["requests", "characters", "concurrency", "sessions", "bodies", "fair_share"]
LeaseKind = Literal["streams", "sessions"]

_WINDOW_S = 60
_MAX_RETRY_AFTER_S = _WINDOW_S
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
class _Lease:
    """A lease an admission takes: of which kind, under which id, and how many of that kind the tenant may hold."""

    kind: LeaseKind
    id: str
    limit: int


@dataclass(frozen=True, slots=True)
class _Ask:
    """What one admission asks of a tenant's limits."""

    limits: TenantLimits
    characters: int
    count_request: bool
    lease: _Lease | None
    """A lease to take (the tenant has a limit of its kind), or ``None``."""


@dataclass(frozen=True, slots=True)
class _Verdict:
    state: LimitState
    refused: LimitReason | None = None


class _Admissions(Protocol):
    """Where windows and leases are kept: checks an :class:`_Ask` whole and counts it only if all of it fits."""

    async def admit(self, tenant: str, ask: _Ask, lease_ttl_s: float) -> _Verdict: ...
    async def state(self, tenant: str, limits: TenantLimits) -> LimitState: ...
    async def renew(self, tenant: str, kind: LeaseKind, lease_id: str, ttl_s: float) -> bool: ...
    async def release(self, tenant: str, kind: LeaseKind, lease_id: str) -> None: ...
    async def close(self) -> None: ...


class _MemoryAdmissions:
    """One process's windows (``limits``'s moving windows) and leases. Nothing here awaits anything real, so a check
    and its hits run without another request in between."""

    def __init__(self) -> None:
        self._storage = MemoryStorage()
        self._windows = MovingWindowRateLimiter(self._storage)
        self._leases: dict[tuple[str, LeaseKind], dict[str, float]] = {}

    async def admit(self, tenant: str, ask: _Ask, lease_ttl_s: float) -> _Verdict:
        before = await self.state(tenant, ask.limits)
        lease = ask.lease
        refused = _first_refusal(ask, before) or (
            _LEASE_REFUSALS[lease.kind] if lease is not None and not self._lease_free(tenant, lease) else None
        )
        if refused is not None:
            return _Verdict(before, refused)
        for item, cost in _hits(ask):
            await self._windows.hit(item, tenant, cost=cost)
        if lease is not None:
            self._leases.setdefault((tenant, lease.kind), {})[lease.id] = time.monotonic() + lease_ttl_s
        return _Verdict(await self.state(tenant, ask.limits))

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

    def _lease_free(self, tenant: str, lease: _Lease) -> bool:
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


def _hits(ask: _Ask) -> list[tuple[RateLimitItemPerMinute, int]]:
    hits = []
    if ask.count_request and ask.limits.requests_per_minute is not None:
        hits.append((RateLimitItemPerMinute(ask.limits.requests_per_minute, namespace="requests"), 1))
    if ask.characters > 0 and ask.limits.characters_per_minute is not None:
        hits.append((RateLimitItemPerMinute(ask.limits.characters_per_minute, namespace="characters"), ask.characters))
    return hits


def _first_refusal(ask: _Ask, state: LimitState) -> LimitReason | None:
    # Requests first: the order a client is told about them.
    if ask.count_request and state.remaining_requests is not None and state.remaining_requests < 1:
        return "requests"
    if ask.characters > 0 and state.remaining_tokens is not None and state.remaining_tokens < ask.characters:
        return "characters"
    return None


# The moving windows and the lease of one tenant, checked together and counted only if all admit. KEYS: requests
# window, characters window, leases. ARGV: request limit (0: none or not counted), character limit (0: none),
# characters, lease limit (0: no lease), lease id, lease TTL in ms, window in ms. Returns {refusal (0 admitted,
# 1 requests, 2 characters, 3 concurrency), requests used, ms until the oldest counted request leaves the window,
# characters used, ms until the oldest counted characters leave it}, as they stand after the admission (or before a
# refusal).
_WINDOWS_LUA = """
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local window = tonumber(ARGV[7])
local function entry_of(entry)
  local sep = string.find(entry, ':', 1, true)
  return tonumber(string.sub(entry, 1, sep - 1)), tonumber(string.sub(entry, sep + 1))
end
local function total_of(list, total_key)
  local total = redis.call('GET', total_key)
  if total then return tonumber(total), false end
  total = 0  -- no running total (a list written before totals were kept): counted once
  for _, entry in ipairs(redis.call('LRANGE', list, 0, -1)) do
    local _, amount = entry_of(entry)
    total = total + amount
  end
  return total, true
end
local function used(list, total_key, trim)
  local total, counted = total_of(list, total_key)
  local dropped, oldest = 0, nil
  while oldest == nil do  -- from the oldest entry on, a few at a time, until one is still in the window
    local entries = redis.call('LRANGE', list, -(dropped + 32), -(dropped + 1))
    for i = #entries, 1, -1 do
      local at, amount = entry_of(entries[i])
      if at > now - window then oldest = at break end
      total, dropped = total - amount, dropped + 1
    end
    if #entries < 32 then break end
  end
  if oldest == nil then total = 0 end
  if trim and (dropped > 0 or counted) then
    -- SET first: on a Redis out of memory it fails before anything is written (a script that wrote may go on)
    redis.call('SET', total_key, total, 'PX', window)
    if dropped > 0 then redis.call('LTRIM', list, 0, -dropped - 1) end
  end
  return total, oldest
end
local function add(list, total_key, amount)
  redis.call('LPUSH', list, now .. ':' .. amount)
  redis.call('PEXPIRE', list, window)
  redis.call('INCRBY', total_key, amount)
  redis.call('PEXPIRE', total_key, window)
end
local function reset(oldest) if oldest then return oldest + window - now end return 0 end
"""
_ADMIT_LUA = (
    _WINDOWS_LUA
    + """
local req_limit, chars_limit, chars = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local lease_limit, lease_ttl = tonumber(ARGV[4]), tonumber(ARGV[6])
local req_used, req_oldest = used(KEYS[1], KEYS[4], true)
local chars_used, chars_oldest = used(KEYS[2], KEYS[5], true)
local refusal = 0
if req_limit > 0 and req_used + 1 > req_limit then refusal = 1
elseif chars_limit > 0 and chars > 0 and chars_used + chars > chars_limit then refusal = 2
elseif lease_limit > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  if redis.call('ZCARD', KEYS[3]) >= lease_limit then refusal = 3 end
end
if refusal == 0 then
  if req_limit > 0 then
    add(KEYS[1], KEYS[4], 1)
    req_used, req_oldest = req_used + 1, req_oldest or now
  end
  if chars_limit > 0 and chars > 0 then
    add(KEYS[2], KEYS[5], chars)
    chars_used, chars_oldest = chars_used + chars, chars_oldest or now
  end
  if lease_limit > 0 then
    redis.call('ZADD', KEYS[3], now + lease_ttl, ARGV[5])
    if redis.call('PTTL', KEYS[3]) < lease_ttl then redis.call('PEXPIRE', KEYS[3], lease_ttl) end
  end
end
return {refusal, req_used, reset(req_oldest), chars_used, reset(chars_oldest)}
"""
)
_STATE_LUA = (
    _WINDOWS_LUA
    + """
local req_used, req_oldest = used(KEYS[1], KEYS[4], false)
local chars_used, chars_oldest = used(KEYS[2], KEYS[5], false)
return {0, req_used, reset(req_oldest), chars_used, reset(chars_oldest)}
"""
)
# XX: a renewal that lands after the release must not bring the lease back.
_RENEW_LUA = """
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local ttl = tonumber(ARGV[2])
if redis.call('ZADD', KEYS[1], 'XX', 'CH', now + ttl, ARGV[1]) == 0 then return 0 end
if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
return 1
"""
_LEASE_REFUSALS: dict[LeaseKind, LimitReason] = {"streams": "concurrency", "sessions": "sessions"}


class _RedisAdmissions:
    """Windows and leases shared by every replica (see the module's docstring for the layout)."""

    def __init__(self, client: RedisClient, prefix: str = "tts:", window_s: float = _WINDOW_S) -> None:
        self._client = client
        self._prefix = prefix
        self._window_ms = _ms(window_s)
        self._admit = client.register_script(_ADMIT_LUA)
        self._state = client.register_script(_STATE_LUA)
        self._renew = client.register_script(_RENEW_LUA)

    async def admit(self, tenant: str, ask: _Ask, lease_ttl_s: float) -> _Verdict:
        limits, lease = ask.limits, ask.lease
        args: list[int | str] = [
            limits.requests_per_minute or 0 if ask.count_request else 0,
            limits.characters_per_minute or 0,
            ask.characters,
            0 if lease is None else lease.limit,
            "" if lease is None else lease.id,
            _ms(lease_ttl_s),
            self._window_ms,
        ]
        answer = await self._admit(keys=self._keys(tenant, "streams" if lease is None else lease.kind), args=args)
        refusal = int(answer[0])
        reason = {1: "requests", 2: "characters"}.get(refusal) or (_LEASE_REFUSALS[lease.kind] if lease else None)
        return _Verdict(_state_of(limits, answer), reason if refusal else None)  # type: ignore[arg-type]

    async def state(self, tenant: str, limits: TenantLimits) -> LimitState:
        if limits.requests_per_minute is None and limits.characters_per_minute is None:
            return LimitState()
        keys = self._keys(tenant, "streams")
        return _state_of(limits, await self._state(keys=keys, args=[0, 0, 0, 0, "", 0, self._window_ms]))

    async def renew(self, tenant: str, kind: LeaseKind, lease_id: str, ttl_s: float) -> bool:
        return bool(await self._renew(keys=[self._leases(tenant, kind)], args=[lease_id, _ms(ttl_s)]))

    async def release(self, tenant: str, kind: LeaseKind, lease_id: str) -> None:
        await self._client.zrem(self._leases(tenant, kind), lease_id)

    async def close(self) -> None:
        return None  # the client belongs to whoever built it

    def _keys(self, tenant: str, kind: LeaseKind) -> list[str]:
        windows = f"{self._prefix}limits:{{{tenant}}}"
        lists = [f"{windows}:requests", f"{windows}:characters"]
        return [*lists, self._leases(tenant, kind), *(f"{name}-total" for name in lists)]

    def _leases(self, tenant: str, kind: LeaseKind) -> str:
        # Stream leases keep the key they always had: replicas of both versions count the same streams.
        return f"{self._prefix}{'leases' if kind == 'streams' else kind}:{{{tenant}}}"


def _state_of(limits: TenantLimits, answer: list[Any]) -> LimitState:
    requests, characters = limits.requests_per_minute, limits.characters_per_minute
    req_used, req_reset, chars_used, chars_reset = (int(value) for value in answer[1:5])
    return LimitState(
        requests,
        None if requests is None else max(0, requests - req_used),
        None if requests is None else req_reset / 1000,
        characters,
        None if characters is None else max(0, characters - chars_used),
        None if characters is None else chars_reset / 1000,
    )


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
        self._store: _Admissions = _MemoryAdmissions() if redis is None else _RedisAdmissions(redis)

    async def admit(
        self,
        tenant: str,
        limits: TenantLimits,
        characters: int,
        *,
        count_request: bool = True,
        hold_stream: AsyncExitStack | None = None,
    ) -> LimitState:
        """Count one request of ``characters`` input characters against the tenant's per-minute limits and, with
        ``hold_stream``, take one of its concurrent streams until that stack closes — all in one step: a request
        refused by any of them consumes nothing.

        ``count_request=False`` counts the characters only: a segment of a realtime session, whose session was
        counted as the request.

        Returns:
            The state after this request, for the ``x-ratelimit-*`` headers.

        Raises:
            RateLimitExceededError: a limit would be exceeded (a stream limit only after ``stream_wait_s``).
            LimitsUnavailableError: the storage is unreachable and the limiter fails closed.
        """
        streams = limits.concurrent_streams
        lease = _Lease("streams", uuid.uuid4().hex, streams) if hold_stream is not None and streams else None
        return await self._take(tenant, _Ask(limits, characters, count_request, lease), hold_stream)

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
                lease = _Lease("sessions", uuid.uuid4().hex, limits.open_sessions)
                await self._take(tenant, _Ask(limits, 0, False, lease), held)
            yield

    async def _take(self, tenant: str, ask: _Ask, hold: AsyncExitStack | None) -> LimitState:
        """Admit ``ask`` whole; its lease, if any, is held until ``hold`` closes."""
        if ask.lease is None and not _hits(ask):
            return LimitState()
        verdict = await self._admit_within_wait(tenant, ask)
        if verdict is None:  # storage unreachable, failing open: admitted unchecked, without a lease
            self.outage_count += 1 if _hits(ask) else 0
            return _unknown_state(ask.limits)
        if verdict.refused is not None:
            raise _refusal(verdict.refused, ask, verdict.state)
        if hold is not None and (lease := ask.lease) is not None:
            hold.push_async_callback(self._let_go, tenant, lease, self._background.spawn(self._renew(tenant, lease)))
        return verdict.state

    async def state(self, tenant: str, limits: TenantLimits) -> LimitState:
        """The tenant's current standing, consuming nothing.

        Raises:
            LimitsUnavailableError: the storage is unreachable and the limiter fails closed.
        """
        try:
            state = await self._store.state(tenant, limits)
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

    async def _admit_within_wait(self, tenant: str, ask: _Ask) -> _Verdict | None:
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

    async def _renew(self, tenant: str, lease: _Lease) -> None:
        while True:
            await asyncio.sleep(self.lease_ttl_s / 3)
            try:
                if not await self._store.renew(tenant, lease.kind, lease.id, self.lease_ttl_s):
                    logger.warning("%s lease of tenant %s expired before its renewal", lease.kind, tenant)
                    return
            except STORAGE_ERRORS as exc:
                logger.debug("stream lease renewal failed: %r", exc)

    async def _let_go(self, tenant: str, lease: _Lease, renewal: asyncio.Task[None]) -> None:
        renewal.cancel()
        # Shielded: a cancelled caller (client gone) may be cancelled again at any await here (anyio cancels
        # level-triggered), and the release must still reach the storage.
        await asyncio.shield(self._background.spawn(self._release(tenant, lease, renewal)))

    async def _release(self, tenant: str, lease: _Lease, renewal: asyncio.Task[None]) -> None:
        await asyncio.wait([renewal])  # its last renewal must not land after the release
        await self._drop(tenant, lease)

    def _forget(self, tenant: str, lease: _Lease | None) -> None:
        """Release, in the background, a lease whose admission ended without its answer (the caller was cancelled,
        or the reply was lost): the script may have taken it in Redis, and nobody else knows its id. Before, such a
        lease held one of the tenant's streams until it expired (``lease_ttl_s``) after every request had ended."""
        if lease is not None:
            self._background.spawn(self._drop(tenant, lease))

    async def _drop(self, tenant: str, lease: _Lease) -> None:
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


def _refusal(reason: LimitReason, ask: _Ask, state: LimitState) -> RateLimitExceededError:
    if reason in {"concurrency", "sessions", "bodies", "fair_share"}:
        return RateLimitExceededError(reason, _CONCURRENCY_RETRY_AFTER_S, state)
    reset = state.reset_requests_s if reason == "requests" else state.reset_tokens_s
    if reason == "characters" and ask.characters > (ask.limits.characters_per_minute or 0):
        reset = float(_MAX_RETRY_AFTER_S)  # never fits in a minute; waiting a whole window is the honest answer
    # The oldest entry leaving the window frees the first unit; for a weighted hit more may be needed later.
    retry_after = min(_MAX_RETRY_AFTER_S, max(1, math.ceil(reset or 0.0)))
    return RateLimitExceededError(reason, retry_after, state)


def _unknown_state(limits: TenantLimits) -> LimitState:
    return LimitState(limit_requests=limits.requests_per_minute, limit_tokens=limits.characters_per_minute)


HoldingKind = Literal["sessions", "bodies"]


class HeldConnections:
    """What each tenant holds of this replica's connections for long: WebSocket sessions open here, and request bodies
    still arriving (``TenantLimits.bodies_in_flight``). Kept in memory, not in Redis like the leases above: what they
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
            raise RateLimitExceededError(kind, _CONCURRENCY_RETRY_AFTER_S, LimitState())
        if self._over_fair_share(tenant):
            raise RateLimitExceededError("fair_share", _CONCURRENCY_RETRY_AFTER_S, LimitState())
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
