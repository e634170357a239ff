"""The audio cache: finished audio by a key over everything that shapes it, in Redis or in memory.

A cache key covers everything that changes the audio (:func:`cache_key`). The cache never fails a request: a
backend error reads as a miss and a write that fails is dropped, with one warning per outage.

In Redis the cache never costs the control plane (API keys, tenants, voices, usage) its room: its entries are
sharded over :data:`SHARDS` hash tags, each shard with an index and a byte count in its own tag, and every write
evicts the shard's oldest entries until the shard holds at most a sixteenth of a byte budget (``cache.max_redis_bytes``,
by default half of the Redis's ``maxmemory``), so the cache alone never brings Redis to ``maxmemory``, where Redis
would evict keys or refuse writes. When Redis refuses the cache's writes all the same (``noeviction`` at
``maxmemory``, filled by something else), the cache gives up a quarter of its entries, oldest first, keeps to three
quarters of what it held (a shard to one entry at least) for a while and writes nothing for a few seconds after each
refusal: one warning per episode, a metric and a line of ``/readyz`` (``storage/pressure.py``). Reading is one GET,
so hits keep working meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
import unicodedata
import zlib
from collections import OrderedDict
from typing import TYPE_CHECKING, Protocol

from lifecycle import naming
from storage import STORAGE_ERRORS, OutageLatch, connect_redis
from storage.memory import read_memory_limit
from storage.pressure import WriteRefusals, out_of_memory, refuses_writes

if TYPE_CHECKING:
    from collections.abc import Mapping

    from gateway.settings import CacheSettings
    from storage.memory import MemoryLimit
    from storage.redis import RedisClient

__all__ = ["DEFAULT_REDIS_BUDGET_BYTES", "REFUSAL_PAUSE_S", "SHARDS", "SHRUNK_BUDGET_HOLD_S", "AudioCache", "cache_key"]

logger = naming.logger("cache")

# Bump when the key's contents or the value's format change, so old entries are never served for new requests: 2 when
# values began to carry word timestamps (``gateway/speech/service.py``), whose header an older replica would have
# played as audio.
_KEY_VERSION = 2


def cache_key(
    *,
    engine: str,
    weights_id: str,
    text: str,
    voice_id: str,
    response_format: str,
    speed: float,
    instructions: str | None,
    params: Mapping[str, object],
) -> str:
    """The cache key of one synthesis: a SHA-256 over a canonical JSON of everything that shapes the audio.

    The text is NFC-normalized with whitespace runs collapsed to one space and stripped, so texts that read the
    same share an entry. ``params`` are the sampling parameters; their values must be JSON-serializable.
    """
    canonical = {
        "v": _KEY_VERSION,
        "engine": engine,
        "weights": weights_id,
        "text": " ".join(unicodedata.normalize("NFC", text).split()),
        "voice": voice_id,
        "format": response_format,
        "speed": float(speed),
        "instructions": instructions,
        "params": dict(params),
    }
    encoded = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(encoded.encode()).hexdigest()


class _AudioStore(Protocol):
    async def start(self) -> None: ...
    async def get(self, key: str) -> bytes | None: ...
    async def set(self, key: str, audio: bytes) -> None: ...
    async def give_way(self) -> None: ...
    async def close(self) -> None: ...


class _MemoryLRU:
    """In-process entries, least recently used evicted first.

    Written here, as the Redis side is: aiocache's memory cache has no size bound, and its Redis cache can neither
    keep a byte budget (one script per write, below) nor take a Redis Cluster client.
    """

    def __init__(self, max_entries: int, ttl_s: float) -> None:
        self._entries: OrderedDict[str, tuple[float, bytes]] = OrderedDict()
        self._max_entries = max_entries
        self._ttl_s = ttl_s

    async def start(self) -> None:
        return None

    async def get(self, key: str) -> bytes | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        expires, audio = entry
        if expires <= time.monotonic():
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return audio

    async def set(self, key: str, audio: bytes) -> None:
        self._entries[key] = (time.monotonic() + self._ttl_s, audio)
        self._entries.move_to_end(key)
        while len(self._entries) > self._max_entries:
            self._entries.popitem(last=False)

    async def give_way(self) -> None:
        return None  # this process's memory refuses nothing

    async def close(self) -> None:
        self._entries.clear()


SHARDS = 16
"""Hash tags the Redis entries are spread over (``tts:audio:{s00}:…`` to ``{s15}``): on a Redis Cluster, over up to
16 nodes; each shard keeps to a sixteenth of the budget."""

DEFAULT_REDIS_BUDGET_BYTES = 256 * 1024 * 1024
"""The budget when the Redis has no ``maxmemory`` or does not tell it."""

REFUSAL_PAUSE_S = 5.0
"""After Redis refuses a write, the cache writes nothing for this long."""

SHRUNK_BUDGET_HOLD_S = 600.0
"""After Redis refuses a write, the cache keeps to three quarters of what it held, for this long: under a Redis that
is full for other reasons it would otherwise fill up again at once and meet the next refusal."""

_GIVE_WAY_KEEPS = 0.75  # the share of its bytes each shard keeps when Redis refuses a write
_ENTRY_OVERHEAD_BYTES = 768  # an entry's key, its TTL and its place in the index (measured: 400 to 650 on Redis 7)

# Shared by both scripts: drop one member of the shard's index ("<cache key>:<cost>"), its entry and its cost.
# KEYS[1] is the shard's index, KEYS[2] its byte count, ARGV[1] the shard's key prefix.
_FORGET_LUA = """
local function forget(member)
  local key, cost = string.match(member, '^(.*):(%d+)$')
  redis.call('ZREM', KEYS[1], member)
  redis.call('DEL', ARGV[1] .. key)
  redis.call('DECRBY', KEYS[2], cost)
  return tonumber(cost)
end
local function bytes() return tonumber(redis.call('GET', KEYS[2]) or '0') end
"""

# Stores one entry, then evicts the shard's expired and oldest entries until it is within its budget.
# KEYS: index, byte count, entry. ARGV: prefix, index member, audio, TTL (ms), cost, the shard's budget.
# SET is the first write on purpose: Redis checks memory before a script's first write only, so a Redis out of memory
# refuses the whole script (nothing half done) and never refuses the evictions that follow a write.
_STORE_LUA = (
    _FORGET_LUA
    + """
if redis.call('EXISTS', KEYS[3]) == 1 then return 0 end
local ttl_ms, cost, budget = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
redis.call('SET', KEYS[3], ARGV[3], 'PX', ttl_ms)
local time = redis.call('TIME')
local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
if redis.call('ZADD', KEYS[1], now_ms + ttl_ms, ARGV[2]) == 1 then redis.call('INCRBY', KEYS[2], cost) end
-- Members are scored by expiry: a few expired ones leave on every write, so the index never outgrows the entries.
for _, member in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms, 'LIMIT', 0, 8)) do forget(member) end
local evicted = 0
while bytes() > budget do
  -- The oldest other than this entry: one written in the same millisecond has the same score (its expiry), and
  -- members of one score come in the order of their names, so this entry may come first.
  local first = redis.call('ZRANGE', KEYS[1], 0, 1)
  local oldest = first[1]
  if oldest == ARGV[2] then oldest = first[2] end
  if oldest == nil then
    -- Only this entry is left: a budget under one entry (shrunk), or a count that had drifted (Redis itself evicted
    -- an index or count). Either way the count starts afresh.
    redis.call('SET', KEYS[2], cost)
    break
  end
  forget(oldest)
  evicted = evicted + 1
end
redis.call('PEXPIRE', KEYS[1], ttl_ms)  -- an idle cache leaves nothing behind
redis.call('PEXPIRE', KEYS[2], ttl_ms)
return evicted
"""
)

# Gives up the shard's oldest entries until it holds ARGV[2] of its bytes; returns the bytes it held before. Runs on a
# Redis out of memory: ZREM and DEL are writes that memory never refuses, and the DECRBY after them is allowed.
_GIVE_WAY_LUA = (
    _FORGET_LUA
    + """
local held = bytes()
local keep = math.floor(held * tonumber(ARGV[2]))
while bytes() > keep do
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0)[1]
  if oldest == nil then
    redis.call('DEL', KEYS[2])
    break
  end
  forget(oldest)
end
return held
"""
)


def _redis_cost(size: int) -> int:
    """What an entry of ``size`` bytes costs Redis: the value as jemalloc (Redis's allocator) allocates it, rounded up
    to one of four size classes per power of two (up to a quarter more), and the entry's key, TTL and index member."""
    allocated = size + 16  # the string's header
    step = max(16, 1 << max(0, (allocated - 1).bit_length() - 3))
    return -(-allocated // step) * step + _ENTRY_OVERHEAD_BYTES


def _redis_budget(settings: CacheSettings, limit: MemoryLimit | None, *, own_redis: bool) -> tuple[int, str]:
    """The bytes the cache may hold in Redis, and why: ``cache.max_redis_bytes`` when set; else half of what the
    Redis's ``maxmemory`` leaves to data (three quarters in a Redis of the cache's own), the rest being the control
    plane's and Redis's own (client buffers, scripts); else :data:`DEFAULT_REDIS_BUDGET_BYTES`."""
    if settings.max_redis_bytes is not None:
        return settings.max_redis_bytes, "cache.max_redis_bytes"
    if limit is None:
        return DEFAULT_REDIS_BUDGET_BYTES, "its Redis does not tell its maxmemory; set cache.max_redis_bytes"
    if limit.maxmemory == 0:
        return DEFAULT_REDIS_BUDGET_BYTES, "its Redis has no maxmemory; set cache.max_redis_bytes"
    share, name = (0.75, "three quarters") if own_redis else (0.5, "half")
    return int(limit.usable * share), f"{name} of the {limit.usable} bytes its Redis's maxmemory leaves to data"


class _RedisShards:
    """Entries in Redis under a byte budget the gateway enforces, shard by shard (see the module docstring).

    Args:
        client: The Redis (the shared one, or the cache's own).
        settings: TTL, budget.
        own_redis: Whether the Redis is the cache's alone (a larger share of its ``maxmemory`` by default).
    """

    def __init__(self, client: RedisClient, settings: CacheSettings, *, own_redis: bool) -> None:
        self._client = client
        self._settings = settings
        self._own_redis = own_redis
        self._ttl_ms = settings.ttl_s * 1000
        self._store_entry = client.register_script(_STORE_LUA)
        self._give_way = client.register_script(_GIVE_WAY_LUA)
        self._budget: int | None = None
        self._shrunk_to: int | None = None
        self._shrunk_until = 0.0

    async def start(self) -> None:
        with contextlib.suppress(*STORAGE_ERRORS):  # unreachable: learned on the first write
            await self._learn_budget()

    async def get(self, key: str) -> bytes | None:
        audio = await self._client.get(_prefix(key) + key)
        return audio if isinstance(audio, bytes) else None  # the client never decodes (``connect_redis``)

    async def set(self, key: str, audio: bytes) -> None:
        if self._budget is None:
            await self._learn_budget()
        cost = _redis_cost(len(audio))
        if cost > self._budget_or_default() // SHARDS:
            return
        # Shrunk, a shard's share can be less than this entry (it held one, gave way twice): it keeps this one alone
        # then, rather than nothing for SHRUNK_BUDGET_HOLD_S.
        shard_budget = self._shard_budget()
        prefix = _prefix(key)
        keys = [prefix + "index", prefix + "bytes", prefix + key]
        await self._store_entry(keys, [prefix, f"{key}:{cost}", audio, self._ttl_ms, cost, shard_budget])

    async def give_way(self) -> None:
        """Give up a quarter of every shard's bytes, oldest entries first (whole entries: a shard of two gives up
        one), and keep to three quarters of what the cache held for a while (a shard to one entry at least)."""
        held = 0
        for shard in range(SHARDS):
            prefix = _shard_prefix(shard)
            held += int(await self._give_way([prefix + "index", prefix + "bytes"], [prefix, _GIVE_WAY_KEEPS]))
        self._shrunk_to = max(int(held * _GIVE_WAY_KEEPS), 0)
        self._shrunk_until = time.monotonic() + SHRUNK_BUDGET_HOLD_S

    async def close(self) -> None:
        return None  # the client is closed by its owner

    async def _learn_budget(self) -> None:
        limit = await read_memory_limit(self._client)
        self._budget, why = _redis_budget(self._settings, limit, own_redis=self._own_redis)
        logger.info("the audio cache keeps to %d bytes of Redis (%s)", self._budget, why)
        largest = self._budget // SHARDS
        if _redis_cost(self._settings.max_entry_bytes) > largest:
            logger.info("audio over about %d bytes is not cached in Redis (a shard holds a sixteenth of it)", largest)
        explicit = self._settings.max_redis_bytes
        if limit is not None and explicit is not None and not self._own_redis and explicit > limit.usable // 2 > 0:
            logger.warning(
                "cache.max_redis_bytes (%d) is over half of the %d bytes the shared Redis's maxmemory leaves to data: "
                "the cache may fill it, and Redis then refuses writes or evicts keys (by its maxmemory-policy %s)",
                explicit,
                limit.usable,
                limit.policy,
            )

    def _budget_or_default(self) -> int:
        return self._budget or DEFAULT_REDIS_BUDGET_BYTES

    def _shard_budget(self) -> int:
        budget = self._budget_or_default()
        if self._shrunk_to is not None:
            if time.monotonic() < self._shrunk_until:
                budget = min(budget, self._shrunk_to)
            else:
                self._shrunk_to = None
        return budget // SHARDS


def _prefix(key: str) -> str:
    """The key prefix of ``key``'s shard; CRC-32 spreads any key, not only hexadecimal ones."""
    return _shard_prefix(zlib.crc32(key.encode()) % SHARDS)


def _shard_prefix(shard: int) -> str:
    return f"tts:audio:{{s{shard:02d}}}:"


class AudioCache:
    """Finished audio by :func:`cache_key`: in Redis (``cache.redis_url``'s, else the shared one), else an in-memory
    LRU.

    Args:
        settings: TTL, entry size bound, Redis budget, memory entry count, whether caching is on and shared across
            tenants.
        redis: The process's shared Redis client (used unless ``cache.redis_url`` names another), or ``None``.
    """

    def __init__(self, settings: CacheSettings, redis: RedisClient | None) -> None:
        self._settings = settings
        self._own_client = connect_redis(settings.redis_url) if settings.redis_url is not None else None
        client = self._own_client or redis
        self._store: _AudioStore
        if client is None:
            self._store = _MemoryLRU(settings.max_memory_entries, settings.ttl_s)
        else:
            self._store = _RedisShards(client, settings, own_redis=self._own_client is not None)
        self._outage = OutageLatch(
            logger, "audio cache unreachable, bypassing it until it returns", "audio cache reachable again"
        )
        self.write_refusals = WriteRefusals(
            "cache",
            logger,
            f"the cache gives up a quarter of its entries, oldest first, keeps to three quarters of what it held for "
            f"{SHRUNK_BUDGET_HOLD_S:.0f} s and writes nothing for {REFUSAL_PAUSE_S:g} s after each refusal; hits are "
            "still served",
            pause_s=REFUSAL_PAUSE_S,
        )
        """Writes its Redis refused (``storage/pressure.py``): for the metrics and ``/readyz``."""
        self._yielded_until = float("-inf")  # while another store's writes are refused for want of memory
        self._yielding: asyncio.Task[None] | None = None
        self._writing: dict[str, bytes] = {}
        """Entries on their way to the store. A client that repeats a request the moment its audio ended would
        otherwise miss the entry (and synthesize again) for the write's round trips, longer on a Cluster."""

    @property
    def writes_in_flight(self) -> int:
        """Writes sent to the store and not yet answered (nor failed): a reply may end before its write does."""
        return len(self._writing)

    @property
    def shared_across_tenants(self) -> bool:
        """Whether tenants hit each other's entries (``cache.shared_across_tenants``)."""
        return self._settings.shared_across_tenants

    async def start(self) -> None:
        """Learn the Redis's ``maxmemory`` for the budget (on the first write instead, when Redis is unreachable)."""
        if self._settings.enabled:
            await self._store.start()

    async def get(self, key: str) -> bytes | None:
        """The cached audio, or ``None`` on a miss, with caching off, or when the backend fails."""
        if not self._settings.enabled:
            return None
        if (writing := self._writing.get(key)) is not None:
            return writing
        try:
            audio = await self._store.get(key)
        except STORAGE_ERRORS as exc:
            self._outage.failed(exc)
            return None
        self._outage.worked()
        return audio

    async def set(self, key: str, audio: bytes) -> None:
        """Store ``audio``; entries over ``max_entry_bytes`` are skipped, backend errors swallowed, and nothing is
        written for a while after Redis refused a write."""
        if not self._settings.enabled or len(audio) > self._settings.max_entry_bytes or self._paused():
            return
        self._writing[key] = audio
        try:
            await self._store.set(key, audio)
        except STORAGE_ERRORS as exc:
            await self._write_failed(exc)
            return
        finally:
            if self._writing.get(key) is audio:  # not a later write's of the same key
                del self._writing[key]
        self._outage.worked()
        self.write_refusals.worked()

    def give_way_to(self, *others: WriteRefusals) -> None:
        """Make room when Redis refuses ``others``' writes for want of memory (the limiter's, the usage ledger's: stores
        on the cache's Redis): the cache gives up a quarter of its entries and writes nothing for ``REFUSAL_PAUSE_S``,
        as after a refusal of its own. Without it the control plane's writes stay refused until the next cache write
        meets a refusal too. A cache on a Redis of its own (``cache.redis_url``) listens to none."""
        if self._own_client is not None or not self._settings.enabled:
            return
        for refusals in others:
            refusals.on_refused(self._other_refused)

    def _other_refused(self, exc: BaseException) -> None:
        if not out_of_memory(exc) or self._paused():
            return  # a read-only replica or a failed save: no room to make; or given way a moment ago
        self._yielded_until = time.monotonic() + REFUSAL_PAUSE_S
        if self._yielding is None or self._yielding.done():
            self._yielding = asyncio.get_running_loop().create_task(self._give_way())

    async def _give_way(self) -> None:
        logger.info("Redis is out of memory for the gateway's other writes: the audio cache gives way")
        with contextlib.suppress(*STORAGE_ERRORS):
            await self._store.give_way()

    def _paused(self) -> bool:
        return self.write_refusals.paused or time.monotonic() < self._yielded_until

    async def close(self) -> None:
        """Close the backend's connections (the client of ``cache.redis_url``; the shared one is its owner's)."""
        if self._yielding is not None:
            self._yielding.cancel()
        with contextlib.suppress(*STORAGE_ERRORS):
            await self._store.close()
            if self._own_client is not None:
                await self._own_client.aclose()

    async def _write_failed(self, exc: Exception) -> None:
        if not refuses_writes(exc):
            self._outage.failed(exc)
            return
        self._outage.worked()  # Redis answered: no outage
        self.write_refusals.refused(exc)
        with contextlib.suppress(*STORAGE_ERRORS):
            await self._store.give_way()
