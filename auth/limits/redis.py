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
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from auth.limits.base import LEASE_REFUSALS, WINDOW_S, Ask, LeaseKind, LimitState, Verdict

if TYPE_CHECKING:
    from auth.settings import TenantLimits
    from storage import RedisClient

__all__ = ["RedisAdmissions"]


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

    async def admit(self, tenant: str, ask: Ask, lease_ttl_s: float) -> Verdict:
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
        reason = {1: "requests", 2: "characters"}.get(refusal) or (LEASE_REFUSALS[lease.kind] if lease else None)
        return Verdict(_state_of(limits, answer), reason if refusal else None)  # type: ignore[arg-type]

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
