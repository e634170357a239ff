"""Windows and leases in Redis, shared by every replica (:class:`RedisAdmissions`).

One Lua script checks both windows and the lease of a request and, only if all three admit it, counts it in both and
takes the lease: one round trip per request instead of one per window and lease (``limits`` hits one item per call),
and a refused request consumes nothing, whichever limit refused it. The windows have the same moving semantics as
``limits``'s, over a compact list per tenant and window (``<ms>:<amount>`` per admitted request, newest first) rather
than one entry per character, with its running total beside it (``...-total``): an admission drops the entries that
left the window since the last one, oldest first, and never walks the entries still in it, so its cost does not grow
with the tenant's request rate. Redis's own clock times them, so replicas with skewed clocks agree. A tenant's windows
and lease share one hash tag (``{<tenant>}``), the one slot Redis Cluster needs for one script.

The leases are a sorted set per tenant and kind (member: lease id, score: expiry in ms), renewed while held, so that a
replica that dies stops holding its leases after ``lease_ttl_s``.

The monthly budgets are two counters per tenant generation and month (``...:month:<YYYY-MM>:<generation>:characters``
and ``...:audio_seconds``, without ``:<generation>`` for a tenant that has none; kept a day past the month's end), under
the same hash tag: the admission script checks and
counts the characters with the windows, and reads the audio seconds, which :meth:`RedisAdmissions.spend` adds once a
request has been spoken (and a job's characters, once it has ended).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from auth.limits.base import (
    LEASE_REFUSALS,
    WINDOW_S,
    Ask,
    Budget,
    BudgetState,
    LeaseKind,
    LimitReason,
    LimitState,
    Month,
    Verdict,
)

if TYPE_CHECKING:
    from auth.settings import TenantLimits
    from storage import RedisClient

__all__ = ["RedisAdmissions"]


# The moving windows, the monthly budgets and the lease of one tenant, checked together and counted only if all admit.
# KEYS: requests window, characters window, leases, the windows' running totals, the month's characters, the month's
# audio seconds. ARGV: request limit (0: none or not counted), character limit (0: none), characters, lease limit
# (0: no lease), lease id, lease TTL in ms, window in ms, month counted (1) or not (0), monthly character limit (0:
# none), monthly audio seconds limit (0: none), the month's counters' TTL in ms. Returns {refusal (0 admitted,
# 1 requests, 2 characters, 3 concurrency, 4 monthly characters, 5 monthly audio), requests used, ms until the oldest
# counted request leaves the window, characters used, ms until the oldest counted characters leave it, the month's
# characters, the month's audio seconds (a string: Lua numbers come back as integers)}, as they stand after the
# admission (or before a refusal).
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
local function month_used()
  if ARGV[8] ~= '1' then return 0, 0 end
  return tonumber(redis.call('GET', KEYS[6]) or '0'), tonumber(redis.call('GET', KEYS[7]) or '0')
end
"""
_ADMIT_LUA = (
    _WINDOWS_LUA
    + """
local req_limit, chars_limit, chars = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local lease_limit, lease_ttl = tonumber(ARGV[4]), tonumber(ARGV[6])
local req_used, req_oldest = used(KEYS[1], KEYS[4], true)
local chars_used, chars_oldest = used(KEYS[2], KEYS[5], true)
local month_chars_limit, month_audio_limit = tonumber(ARGV[9]), tonumber(ARGV[10])
local month_chars, month_audio = month_used()
local refusal = 0
-- the budgets first: no wait for a window helps a request they refuse
if month_chars_limit > 0 and (month_chars >= month_chars_limit or month_chars + chars > month_chars_limit) then
  refusal = 4
elseif month_audio_limit > 0 and month_audio >= month_audio_limit then refusal = 5
elseif req_limit > 0 and req_used + 1 > req_limit then refusal = 1
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
  if ARGV[8] == '1' and chars > 0 then
    month_chars = redis.call('INCRBY', KEYS[6], chars)
    redis.call('PEXPIRE', KEYS[6], ARGV[11])
  end
  if lease_limit > 0 then
    redis.call('ZADD', KEYS[3], now + lease_ttl, ARGV[5])
    if redis.call('PTTL', KEYS[3]) < lease_ttl then redis.call('PEXPIRE', KEYS[3], lease_ttl) end
  end
end
return {refusal, req_used, reset(req_oldest), chars_used, reset(chars_oldest), month_chars, tostring(month_audio)}
"""
)
_STATE_LUA = (
    _WINDOWS_LUA
    + """
local req_used, req_oldest = used(KEYS[1], KEYS[4], false)
local chars_used, chars_oldest = used(KEYS[2], KEYS[5], false)
local month_chars, month_audio = month_used()
return {0, req_used, reset(req_oldest), chars_used, reset(chars_oldest), month_chars, tostring(month_audio)}
"""
)
# Work done, added to one of the tenant's month's counters. KEYS: the counter. ARGV: the amount, the counter's TTL in
# ms, INCRBY (characters) or INCRBYFLOAT (audio seconds).
_SPEND_LUA = """
redis.call(ARGV[3], KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"""
_REFUSALS: dict[int, LimitReason] = {
    1: "requests",
    2: "characters",
    4: "characters_per_month",
    5: "audio_seconds_per_month",
}
# XX: a renewal that lands after the release must not bring the lease back.
_RENEW_LUA = """
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local ttl = tonumber(ARGV[2])
if redis.call('ZADD', KEYS[1], 'XX', 'CH', now + ttl, ARGV[1]) == 0 then return 0 end
if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
return 1
"""


class RedisAdmissions:
    """Windows and leases shared by every replica (see the module's docstring for the layout). Methods as on
    :class:`~auth.limits.base.Admissions`."""

    def __init__(self, client: RedisClient, prefix: str = "tts:", window_s: float = WINDOW_S) -> None:
        self._client = client
        self._prefix = prefix
        self._window_ms = _ms(window_s)
        self._admit = client.register_script(_ADMIT_LUA)
        self._state = client.register_script(_STATE_LUA)
        self._renew = client.register_script(_RENEW_LUA)
        self._spend = client.register_script(_SPEND_LUA)

    async def admit(self, tenant: str, ask: Ask, lease_ttl_s: float) -> Verdict:
        limits, lease = ask.limits, ask.lease
        args: list[int | float | str] = [
            limits.requests_per_minute or 0 if ask.count_request else 0,
            limits.characters_per_minute or 0,
            ask.characters,
            0 if lease is None else lease.limit,
            "" if lease is None else lease.id,
            _ms(lease_ttl_s),
            self._window_ms,
            *_month_args(limits, ask.month),
        ]
        keys = self._keys(tenant, "streams" if lease is None else lease.kind, ask.month)
        answer = await self._admit(keys=keys, args=args)
        refusal = int(answer[0])
        reason = _REFUSALS.get(refusal) or (LEASE_REFUSALS[lease.kind] if lease else None)
        return Verdict(_state_of(limits, answer, ask.month), reason if refusal else None)

    async def state(self, tenant: str, limits: TenantLimits, month: Month | None = None) -> LimitState:
        if limits.requests_per_minute is None and limits.characters_per_minute is None and month is None:
            return LimitState()
        keys = self._keys(tenant, "streams", month)
        args = [0, 0, 0, 0, "", 0, self._window_ms, *_month_args(limits, month)]
        return _state_of(limits, await self._state(keys=keys, args=args), month)

    async def spend(self, tenant: str, month: Month, budget: Budget, amount: float) -> None:
        characters, audio = self._keys(tenant, "streams", month)[-2:]
        if budget == "characters_per_month":
            args: list[int | str] = [round(amount), _month_ttl_ms(month), "INCRBY"]
            await self._spend(keys=[characters], args=args)
        else:
            await self._spend(keys=[audio], args=[repr(float(amount)), _month_ttl_ms(month), "INCRBYFLOAT"])

    async def renew(self, tenant: str, kind: LeaseKind, lease_id: str, ttl_s: float) -> bool:
        return bool(await self._renew(keys=[self._leases(tenant, kind)], args=[lease_id, _ms(ttl_s)]))

    async def release(self, tenant: str, kind: LeaseKind, lease_id: str) -> None:
        await self._client.zrem(self._leases(tenant, kind), lease_id)

    async def close(self) -> None:
        return None  # the client belongs to whoever built it

    def _keys(self, tenant: str, kind: LeaseKind, month: Month | None) -> list[str]:
        windows = f"{self._prefix}limits:{{{tenant}}}"
        lists = [f"{windows}:requests", f"{windows}:characters"]
        counters = f"{windows}:month:{month.counter_key if month else 'none'}"
        months = [f"{counters}:characters", f"{counters}:audio_seconds"]
        return [*lists, self._leases(tenant, kind), *(f"{name}-total" for name in lists), *months]

    def _leases(self, tenant: str, kind: LeaseKind) -> str:
        # Stream leases keep the key they always had: replicas of both versions count the same streams.
        return f"{self._prefix}{'leases' if kind == 'streams' else kind}:{{{tenant}}}"


def _month_args(limits: TenantLimits, month: Month | None) -> list[int | float | str]:
    if month is None:
        return [0, 0, 0, 1]
    return [1, limits.characters_per_month or 0, limits.audio_seconds_per_month or 0, _month_ttl_ms(month)]


def _month_ttl_ms(month: Month) -> int:
    # A day past the month's end: a replica whose clock is behind still finds the month it counts in.
    return _ms(month.end - time.time() + 86400)


def _state_of(limits: TenantLimits, answer: list[Any], month: Month | None) -> LimitState:
    requests, characters = limits.requests_per_minute, limits.characters_per_minute
    req_used, req_reset, chars_used, chars_reset = (int(value) for value in answer[1:5])
    budget = (
        None
        if month is None
        else BudgetState(
            month,
            limits.characters_per_month,
            int(answer[5]),
            limits.audio_seconds_per_month,
            float(answer[6].decode() if isinstance(answer[6], bytes) else answer[6]),
        )
    )
    return LimitState(
        requests,
        None if requests is None else max(0, requests - req_used),
        None if requests is None else req_reset / 1000,
        characters,
        None if characters is None else max(0, characters - chars_used),
        None if characters is None else chars_reset / 1000,
        budget,
    )


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))
