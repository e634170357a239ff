"""The audio cache (memory LRU and a real Redis) and single-flight sharing of identical syntheses."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import random
import re
import weakref
from typing import TYPE_CHECKING, Any

import pytest
from prometheus_client import CollectorRegistry
from redis.exceptions import OutOfMemoryError, ReadOnlyError

from gateway.observability.metrics import CacheWriteCollector
from gateway.settings import CacheSettings
from gateway.speech import cache as cache_module
from gateway.speech import singleflight
from gateway.speech.cache import SHARDS, AudioCache, cache_key
from gateway.speech.singleflight import SingleFlight
from storage import connect_redis
from storage.pressure import WriteRefusals

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Sequence

    from storage import RedisClient
    from tests.redis_server import RedisServer

BASE: dict[str, Any] = {
    "engine": "chattts",
    "weights_id": "sha256:abc",
    "text": "Hello world",
    "voice_id": "nova",
    "response_format": "mp3",
    "speed": 1.0,
    "instructions": None,
    "params": {"temperature": 0.3, "seed": 7},
}


def key(**changes: Any) -> str:
    return cache_key(**{**BASE, **changes})


def test_key_normalizes_text() -> None:
    assert key(text="  Hello \n\t world ") == key()
    assert key(text="caf\u00e9") == key(text="cafe\u0301")  # NFC: composed and decomposed é
    assert key(params={"seed": 7, "temperature": 0.3}) == key()
    assert key(speed=1) == key()
    assert len(key()) == 64


@pytest.mark.parametrize(
    "change",
    [
        {"engine": "espeak"},
        {"weights_id": "sha256:abd"},
        {"text": "Hello world!"},
        {"text": "hello world"},
        {"text": "Helloworld"},
        {"voice_id": "alloy"},
        {"response_format": "wav"},
        {"speed": 1.25},
        {"instructions": "cheerful"},
        {"instructions": ""},
        {"params": {"temperature": 0.31, "seed": 7}},
        {"params": {"temperature": 0.3}},
        {"params": {"temperature": 0.3, "seed": 7, "top_p": 0.7}},
    ],
)
def test_any_change_gives_another_key(change: dict[str, Any]) -> None:
    assert key(**change) != key()


@pytest.fixture(params=["memory", "redis"])
async def cache(request: pytest.FixtureRequest) -> AsyncIterator[AudioCache]:
    client = None if request.param == "memory" else connect_redis(str(request.getfixturevalue("redis_url")))
    audio_cache = AudioCache(CacheSettings(max_entry_bytes=4096), client)
    yield audio_cache
    await audio_cache.close()
    if client is not None:
        await client.aclose()


async def test_binary_audio_round_trips(cache: AudioCache) -> None:
    audio = b"\xff\xfe\x00\x80ID3\xc3\x28" + os.urandom(2000)  # not UTF-8
    assert await cache.get(key()) is None
    await cache.set(key(), audio)
    assert await cache.get(key()) == audio
    assert await cache.get(key(voice_id="alloy")) is None


async def test_a_lookup_while_the_entry_is_written_finds_it(cache: AudioCache) -> None:
    # The first write to Redis learns the budget first (a round trip of its own): the lookup reaches Redis before
    # the entry does, as a repeated request did on a Cluster.
    audio = os.urandom(2000)
    _, found = await asyncio.gather(cache.set(key(), audio), cache.get(key()))
    assert found == audio


async def test_a_write_redis_holds_is_counted_in_flight_until_it_lands(redis_url: str) -> None:
    # A reply ends at most STORE_BEFORE_END_S after its audio while its write goes on: the gauge says one is under way.
    client, admin = connect_redis(redis_url), connect_redis(redis_url)
    cache = AudioCache(CacheSettings(), client)
    collector = CacheWriteCollector()
    collector.watch(lambda: cache.writes_in_flight)
    registry = CollectorRegistry()
    registry.register(collector)
    await cache.start()
    await admin.execute_command("CLIENT", "PAUSE", "10000", "WRITE")  # Redis holds every write (the cache's script)
    try:
        writing = asyncio.create_task(cache.set(key(), b"audio"))
        await until(lambda: cache.writes_in_flight == 1)
        assert registry.get_sample_value("tts_cache_writes_in_flight") == 1
        await asyncio.sleep(0.1)
        assert not writing.done()
    finally:
        await admin.execute_command("CLIENT", "UNPAUSE")
    await writing
    assert cache.writes_in_flight == 0
    assert registry.get_sample_value("tts_cache_writes_in_flight") == 0
    assert await cache.get(key()) == b"audio"
    await cache.close()
    await client.aclose()
    await admin.aclose()


async def test_entries_over_max_entry_bytes_are_skipped(cache: AudioCache) -> None:
    await cache.set("big", b"x" * 4097)
    await cache.set("fits", b"x" * 4096)
    assert await cache.get("big") is None
    assert await cache.get("fits") == b"x" * 4096


async def test_redis_entry_layout_and_ttl(redis_url: str) -> None:
    client = connect_redis(redis_url)
    cache = AudioCache(CacheSettings(ttl_s=600), client)
    await cache.set(key(), b"\x00audio")
    [entry] = await entry_keys(client)
    tag = entry.split(b":")[2].decode()
    assert re.fullmatch(r"\{s(0\d|1[0-5])\}", tag)  # one of 16 hash tags: a Redis Cluster spreads them
    assert entry.decode() == f"tts:audio:{tag}:{key()}"
    assert await client.get(entry) == b"\x00audio"
    index, count = f"tts:audio:{tag}:index", f"tts:audio:{tag}:bytes"
    for name in (entry, index, count):  # every key of the cache carries a TTL: volatile-* policies may evict them
        assert 599_000 < await client.pttl(name) <= 600_000
    [member] = await client.zrange(index, 0, -1)
    assert isinstance(member, bytes) and member.startswith(key().encode() + b":")
    counted = await client.get(count)
    assert counted is not None
    assert int(counted) == int(member.rsplit(b":", 1)[1]) >= len(b"\x00audio")
    await cache.close()
    await client.aclose()


async def test_the_cache_authenticates_as_the_urls_acl_user(outage_redis: RedisServer) -> None:
    # A Redis 6+ ACL URL names a user; the cache must use it like every other user of the shared client, not fall
    # back to the default user (here switched off, so only the named user can read or write).
    admin = connect_redis(outage_redis.url)
    await admin.execute_command("ACL", "SETUSER", "speech", "on", ">s3cret", "~tts:*", "+@all")
    await admin.execute_command("ACL", "SETUSER", "default", "off")
    await admin.aclose()
    host_port = outage_redis.url.removeprefix("redis://")
    client = connect_redis(f"redis://speech:s3cret@{host_port}")
    cache = AudioCache(CacheSettings(), client)
    await cache.set("acl", b"\x01audio")
    assert await cache.get("acl") == b"\x01audio"
    assert [await client.get(entry) for entry in await entry_keys(client)] == [b"\x01audio"]
    await cache.close()
    await client.aclose()


async def test_memory_cache_evicts_least_recently_used() -> None:
    cache = AudioCache(CacheSettings(max_memory_entries=2), None)
    await cache.set("a", b"A")
    await cache.set("b", b"B")
    assert await cache.get("a") == b"A"  # now b is the least recently used
    await cache.set("c", b"C")
    assert [await cache.get(k) for k in ("a", "b", "c")] == [b"A", None, b"C"]


async def test_disabled_cache_stores_nothing() -> None:
    cache = AudioCache(CacheSettings(enabled=False), None)
    await cache.set("a", b"A")
    assert await cache.get("a") is None


async def test_outage_reads_as_a_miss_and_writes_are_dropped(
    outage_redis: RedisServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = connect_redis(outage_redis.url)
    cache = AudioCache(CacheSettings(), client)
    await cache.set("a", b"A")
    outage_redis.stop()
    with caplog.at_level(logging.WARNING, logger="chattts_gateway.cache"):
        assert await cache.get("a") is None
        await cache.set("b", b"B")
        assert await cache.get("b") is None
    assert len([r for r in caplog.records if "unreachable" in r.getMessage()]) == 1
    outage_redis.start()
    await cache.set("c", b"C")
    assert await cache.get("c") == b"C"
    await cache.close()
    await client.aclose()


# ------------------------------------------------------------------ Redis memory: the budget and refused writes
async def entry_keys(client: RedisClient) -> list[bytes]:
    """The cache's entries in Redis (not the shards' indexes and byte counts)."""
    names = [name async for name in client.scan_iter(match="tts:audio:*")]
    return sorted(name for name in names if not name.endswith((b":index", b":bytes")))


async def counted_bytes(client: RedisClient) -> int:
    """What the shards' byte counts add up to."""
    counts = [await client.get(f"tts:audio:{{s{shard:02d}}}:bytes") for shard in range(SHARDS)]
    return sum(int(count) for count in counts if count is not None)


async def used_memory(client: RedisClient) -> int:
    return int((await client.info("memory"))["used_memory"])


async def limit_memory(client: RedisClient, maxmemory: int, policy: str = "noeviction") -> None:
    await client.config_set("maxmemory-policy", policy)
    await client.config_set("maxmemory", str(maxmemory))


async def test_the_budget_keeps_the_newest_entries(redis_url: str) -> None:
    client = connect_redis(redis_url)
    cache = AudioCache(CacheSettings(max_redis_bytes=65536), client)  # 4 KiB per shard: two 1 KB entries each
    written = [key(text=f"clip {n}") for n in range(200)]
    for name in written:
        await cache.set(name, os.urandom(1000))
    assert 32_768 < await counted_bytes(client) <= 65536
    kept = await entry_keys(client)
    assert 16 <= len(kept) <= 48
    assert await client.dbsize() == len(kept) + 2 * SHARDS  # evicted entries are gone, not only forgotten
    assert await cache.get(written[-1]) is not None
    assert [await cache.get(name) for name in written[:20]] == [None] * 20
    index_members = sum([await client.zcard(f"tts:audio:{{s{shard:02d}}}:index") for shard in range(SHARDS)])
    assert index_members == len(kept)
    await client.aclose()


async def test_an_entry_that_expires_first_still_evicts_the_older_ones(redis_url: str) -> None:
    # The index orders a shard's entries by expiry. An entry written with a shorter TTL (another replica's
    # cache.ttl_s, or a TTL lowered since) comes before older ones: the eviction took it for the only one left, kept
    # the older ones and reset the shard's count to it alone, so the shard went over its budget. Entries written in
    # the same millisecond (one score, ordered by name) did the same.
    client = connect_redis(redis_url)
    budget = SHARDS * 150_000  # one 100 kB entry a shard
    longer = AudioCache(CacheSettings(max_redis_bytes=budget, ttl_s=3600), client)
    shorter = AudioCache(CacheSettings(max_redis_bytes=budget, ttl_s=60), client)
    for n in range(2 * SHARDS):
        await longer.set(key(text=f"long-lived {n}"), os.urandom(100_000))
    for n in range(2 * SHARDS):
        await shorter.set(key(text=f"short-lived {n}"), os.urandom(100_000))
    shards = [name.split(b"}")[0] for name in await entry_keys(client)]
    assert max(shards.count(shard) for shard in shards) == 1
    assert await counted_bytes(client) <= budget
    await client.aclose()


async def test_the_budget_counts_what_redis_spends(outage_redis: RedisServer) -> None:
    client = connect_redis(outage_redis.url)
    cache = AudioCache(CacheSettings(max_redis_bytes=1 << 30), client)
    await cache.set(key(text="warm up"), b"x")  # loads the script: its memory is not an entry's
    before, counted_before = await used_memory(client), await counted_bytes(client)
    sizes = [random.Random(n).randrange(1_000, 60_000) for n in range(300)]
    for n, size in enumerate(sizes):
        await cache.set(key(text=f"clip {n}"), os.urandom(size))
    spent, counted = await used_memory(client) - before, await counted_bytes(client) - counted_before
    assert spent <= counted <= spent * 1.2, (spent, counted)
    await client.aclose()


@pytest.mark.parametrize(("own_redis", "share"), [(False, 0.5), (True, 0.75)])
async def test_the_default_budget_is_a_share_of_maxmemory(
    outage_redis: RedisServer,
    redis_url: str,
    own_redis: bool,
    share: float,
) -> None:
    client = connect_redis(outage_redis.url)
    maxmemory = 4 * 1024 * 1024
    await limit_memory(client, maxmemory)
    if own_redis:  # the shared Redis (the session's) stays empty: the cache writes to its own
        shared = connect_redis(redis_url)
        cache = AudioCache(CacheSettings(redis_url=outage_redis.url), shared)
    else:
        shared = client
        cache = AudioCache(CacheSettings(), client)
    await cache.start()
    for n in range(300):
        await cache.set(key(text=f"clip {n}"), os.urandom(20_000))
    usable = maxmemory - int((await client.info("memory"))["used_memory_startup"])  # what Redis leaves to data
    assert share * usable * 0.8 < await counted_bytes(client) <= share * usable
    assert await used_memory(client) < maxmemory
    assert cache.write_refusals.refusals == 0
    assert await shared.dbsize() == (await client.dbsize() if not own_redis else 0)
    await cache.close()
    await client.aclose()
    if own_redis:
        await shared.aclose()


async def test_a_full_redis_costs_the_cache_not_the_control_plane(
    outage_redis: RedisServer,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cache_module, "REFUSAL_PAUSE_S", 0.5)
    client = connect_redis(outage_redis.url)
    cache = AudioCache(CacheSettings(max_redis_bytes=16 * 1024 * 1024), client)
    for n in range(50):
        await cache.set(key(text=f"clip {n}"), os.urandom(20_000))
    held = await counted_bytes(client)
    # Something else filled Redis: it is over its maxmemory, under noeviction, and refuses every write.
    await limit_memory(client, await used_memory(client) - 50_000)
    with pytest.raises(OutOfMemoryError):
        await client.set("tts:{auth}:tenant:new", b"record")
    with caplog.at_level(logging.INFO, logger="chattts_gateway.cache"):
        await cache.set(key(text="one more"), os.urandom(20_000))
        await client.set("tts:{auth}:tenant:new", b"record")  # the cache gave way: the control plane writes again
        assert held * 0.4 < await counted_bytes(client) <= held * 0.75  # whole entries: a quarter or more
        assert await cache.get(key(text="clip 49")) is not None  # the newest entries stay, and hits are served
        assert cache.write_refusals.refusing
        for n in range(5):  # paused: not even tried
            await cache.set(key(text=f"paused {n}"), os.urandom(20_000))
        assert cache.write_refusals.refusals == 1
        await asyncio.sleep(0.5)
        await limit_memory(client, 0)
        await cache.set(key(text="after the pause"), os.urandom(20_000))
        assert not cache.write_refusals.refusing
        assert await cache.get(key(text="after the pause")) is not None
        for n in range(50):  # for a while, the cache keeps to what it held once it gave way
            await cache.set(key(text=f"later {n}"), os.urandom(20_000))
        assert await counted_bytes(client) <= held * 0.75
    lines = [(record.levelname, record.getMessage()) for record in caplog.records]
    [warning] = [message for level, message in lines if level == "WARNING"]
    assert "refuses writes to the cache store" in warning and "maxmemory" in warning
    assert any("accepts writes to the cache store again, after 1 refused" in message for _, message in lines)
    assert not any("unreachable" in message for _, message in lines)
    await client.aclose()


async def test_a_redis_full_for_the_control_plane_makes_the_cache_give_way(
    outage_redis: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The cache's last write was accepted just under maxmemory: the next writes refused are the control plane's (a
    # rate limit's, usage's), and the cache, which meets no refusal itself, must make room for them.
    monkeypatch.setattr(cache_module, "REFUSAL_PAUSE_S", 0.5)
    client = connect_redis(outage_redis.url)
    cache = AudioCache(CacheSettings(max_redis_bytes=16 * 1024 * 1024), client)
    control_plane = WriteRefusals("limits", logging.getLogger("test"), "admitted anyway")
    cache.give_way_to(control_plane)
    for n in range(50):
        await cache.set(key(text=f"clip {n}"), os.urandom(20_000))
    held = await counted_bytes(client)
    await limit_memory(client, await used_memory(client) - 50_000)
    try:
        await client.set("tts:{limits}:window", b"1")
    except OutOfMemoryError as exc:
        control_plane.refused(exc)
    await until(lambda: cache._yielding is not None and cache._yielding.done())  # its give-way ran
    await client.set("tts:{limits}:window", b"1")  # room was made
    assert await counted_bytes(client) <= held * 0.75
    await cache.set(key(text="while it yields"), os.urandom(20_000))  # paused: not even tried
    assert await cache.get(key(text="while it yields")) is None
    assert cache.write_refusals.refusals == 0  # none of its own
    await asyncio.sleep(0.5)
    await limit_memory(client, 0)
    await cache.set(key(text="after the pause"), os.urandom(20_000))
    assert await cache.get(key(text="after the pause")) is not None
    control_plane.refused(ReadOnlyError("READONLY You can't write against a read only replica."))
    assert cache._yielding is not None and cache._yielding.done()  # a read-only replica: no room to make
    assert await cache.get(key(text="after the pause")) is not None
    await cache.close()
    await client.aclose()


async def test_a_cache_that_gave_way_twice_still_caches(
    outage_redis: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two replicas meet one refusal each. The second gives way from what the first left (one entry a shard), so three
    # quarters of it is less than one entry a shard: the second replica had stopped caching for ten minutes.
    monkeypatch.setattr(cache_module, "REFUSAL_PAUSE_S", 0.0)
    client = connect_redis(outage_redis.url)
    settings = CacheSettings(max_redis_bytes=SHARDS * 250_000)  # two 100 kB entries a shard
    replicas = [AudioCache(settings, client), AudioCache(settings, client)]
    await asyncio.gather(*(replica.start() for replica in replicas))
    for n in range(100):
        await replicas[0].set(key(text=f"clip {n}"), os.urandom(100_000))
    for n, replica in enumerate(replicas):
        await limit_memory(client, await used_memory(client) - 50_000)  # something else filled Redis
        await replica.set(key(text=f"refused {n}"), os.urandom(100_000))
        assert replica.write_refusals.refusals == 1
    await limit_memory(client, 0)
    for r, replica in enumerate(replicas):
        for n in range(4):
            await replica.set(key(text=f"fresh {r} {n}"), audio := os.urandom(100_000))
            assert await replica.get(key(text=f"fresh {r} {n}")) == audio
    # Still shrunk: a shard keeps one entry, where its whole share holds two.
    for n in range(3 * SHARDS):
        await replicas[1].set(key(text=f"more {n}"), os.urandom(100_000))
    shards = [name.split(b"}")[0] for name in await entry_keys(client)]
    assert max(shards.count(shard) for shard in shards) == 1
    await client.aclose()


async def test_a_redis_that_refuses_every_write_is_one_warning_and_serves_hits(
    outage_redis: RedisServer,
    redis_server: RedisServer,
    redis_url: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A replica answers reads and refuses writes (READONLY): a read that works and a write that fails on every
    # request, where the outage latch logged an "unreachable" and "reachable again" pair per request.
    monkeypatch.setattr(cache_module, "REFUSAL_PAUSE_S", 0.0)
    primary = connect_redis(redis_url)
    await primary.config_set("repl-diskless-sync-delay", 0)  # the replica syncs at once, not after 5 s
    await AudioCache(CacheSettings(), primary).set(key(), b"cached audio")
    replica = connect_redis(outage_redis.url)
    await replica.replicaof("127.0.0.1", redis_server.port)
    async with asyncio.timeout(10):
        while (await replica.info("replication")).get("master_link_status") != "up":
            await asyncio.sleep(0.05)
    cache = AudioCache(CacheSettings(), replica)
    with caplog.at_level(logging.INFO, logger="chattts_gateway.cache"):
        for n in range(20):
            assert await cache.get(key()) == b"cached audio"
            await cache.set(key(text=f"new {n}"), b"new audio")
    assert cache.write_refusals.refusals == 20
    [warning] = [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]
    assert "read only replica" in warning
    await replica.replicaof("NO", "ONE")
    await replica.aclose()
    await primary.config_set("repl-diskless-sync-delay", 5)
    await primary.aclose()


class Producer:
    """Makes ``chunks`` with a pause between them, counting its runs and how they ended."""

    def __init__(self, chunks: int = 5, fail_after: int | None = None, pause_s: float = 0.02) -> None:
        self.chunks = chunks
        self.fail_after = fail_after
        self.pause_s = pause_s
        self.runs = 0
        self.cancelled = 0
        self.finished = 0
        self.first_chunk = asyncio.Event()
        """Set once a production has made its first chunk: tests wait on it instead of sleeping."""

    async def __call__(self) -> AsyncIterator[bytes]:
        self.runs += 1
        try:
            for i in range(self.chunks):
                if i == self.fail_after:
                    raise RuntimeError("engine crashed")
                await asyncio.sleep(self.pause_s)
                self.first_chunk.set()
                yield bytes([i]) * 100
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        self.finished += 1

    @property
    def audio(self) -> bytes:
        return b"".join(bytes([i]) * 100 for i in range(self.chunks))


async def until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Wait for ``condition`` to hold, looking after every turn of the event loop."""
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0)


async def read(stream: AsyncIterator[bytes], stop_after: int | None = None) -> bytes:
    received = b""
    async for chunk in stream:
        received += chunk
        if stop_after is not None and len(received) >= stop_after:
            await stream.aclose()  # type: ignore[attr-defined]  # the client goes away
            break
    return received


async def test_identical_streams_share_one_production() -> None:
    flights = SingleFlight()
    produce = Producer()
    stored: list[bytes] = []

    async def store(chunks: Sequence[bytes]) -> None:
        stored.append(b"".join(chunks))

    async def late_reader() -> bytes:
        await produce.first_chunk.wait()  # joins mid-production and still gets everything from the start
        return await read(flights.stream("k", produce, store))

    results = await asyncio.gather(*(read(flights.stream("k", produce, store)) for _ in range(4)), late_reader())
    assert produce.runs == 1
    assert results == [produce.audio] * 5
    assert stored == [produce.audio]
    assert flights.in_flight == 0


async def test_a_stream_ends_once_its_audio_is_stored() -> None:
    # Another replica asked the moment a reply ended must find the entry: the store lands before the end.
    flights = SingleFlight()
    produce = Producer(chunks=2)
    stored: list[bytes] = []

    async def store(chunks: Sequence[bytes]) -> None:
        await asyncio.sleep(0.05)  # a store's round trips
        stored.append(b"".join(chunks))

    assert await read(flights.stream("k", produce, store)) == produce.audio
    assert stored == [produce.audio]


async def test_a_hung_store_holds_the_end_no_longer_than_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(singleflight, "STORE_BEFORE_END_S", 0.05)
    flights = SingleFlight()
    produce = Producer(chunks=2)
    release = asyncio.Event()
    stored: list[bytes] = []

    async def store(chunks: Sequence[bytes]) -> None:
        await release.wait()
        stored.append(b"".join(chunks))

    async with asyncio.timeout(2):
        assert await read(flights.stream("k", produce, store)) == produce.audio
    assert stored == []
    release.set()
    await until(lambda: stored == [produce.audio])  # the store went on after the reply ended
    await until(lambda: flights.in_flight == 0)


async def test_a_reader_that_leaves_does_not_disturb_the_others() -> None:
    flights = SingleFlight()
    produce = Producer()
    stored: list[bytes] = []

    async def store(chunks: Sequence[bytes]) -> None:
        stored.append(b"".join(chunks))

    early, full = await asyncio.gather(
        read(flights.stream("k", produce, store), stop_after=100), read(flights.stream("k", produce, store))
    )
    assert early == produce.audio[:100]
    assert full == produce.audio
    assert (produce.runs, produce.cancelled, produce.finished) == (1, 0, 1)
    assert stored == [produce.audio]


async def test_a_cancelled_reader_does_not_disturb_the_others() -> None:
    flights = SingleFlight()
    produce = Producer()
    leaving = asyncio.create_task(read(flights.stream("k", produce)))
    staying = asyncio.create_task(read(flights.stream("k", produce)))
    await produce.first_chunk.wait()
    leaving.cancel()
    assert await staying == produce.audio
    assert (produce.runs, produce.cancelled) == (1, 0)


async def test_production_is_cancelled_when_every_reader_left() -> None:
    flights = SingleFlight()
    produce = Producer(chunks=20)
    stored: list[bytes] = []

    async def store(chunks: Sequence[bytes]) -> None:
        stored.append(b"".join(chunks))

    await asyncio.gather(*(read(flights.stream("k", produce, store), stop_after=100) for _ in range(3)))
    await until(lambda: produce.cancelled == 1)
    assert (produce.runs, produce.cancelled, produce.finished) == (1, 1, 0)
    assert stored == []
    assert flights.in_flight == 0
    # A new request for the same key starts afresh.
    assert await read(flights.stream("k", produce, store)) == produce.audio
    assert produce.runs == 2
    assert stored == [produce.audio]


async def test_producer_error_reaches_every_reader() -> None:
    flights = SingleFlight()
    produce = Producer(fail_after=2)
    stored: list[bytes] = []

    async def store(chunks: Sequence[bytes]) -> None:
        stored.append(b"".join(chunks))

    async def read_all() -> tuple[bytes, BaseException | None]:
        received = b""
        try:
            async for chunk in flights.stream("k", produce, store):
                received += chunk
        except RuntimeError as exc:
            return received, exc
        return received, None

    results = await asyncio.gather(*(read_all() for _ in range(3)))
    assert produce.runs == 1
    for received, error in results:
        assert received == produce.audio[:200]
        assert isinstance(error, RuntimeError)
        assert str(error) == "engine crashed"
    assert stored == []
    assert flights.in_flight == 0


async def test_different_keys_do_not_share() -> None:
    flights = SingleFlight()
    produce = Producer(chunks=2)
    await asyncio.gather(read(flights.stream("a", produce)), read(flights.stream("b", produce)))
    assert produce.runs == 2


async def test_a_stream_never_iterated_starts_nothing() -> None:
    flights = SingleFlight()
    produce = Producer()
    stream = flights.stream("k", produce)
    await asyncio.sleep(0.01)
    assert (produce.runs, flights.in_flight) == (0, 0)
    await stream.aclose()


class Held:
    """Stands for what a production holds while it runs: an encoder, the engine's stream."""


@pytest.mark.parametrize("ending", ["abandoned", "failed"])
async def test_an_ended_production_is_freed_without_the_cyclic_collector(ending: str) -> None:
    flights = SingleFlight()
    held: list[weakref.ref[Held]] = []

    async def produce() -> AsyncIterator[bytes]:
        resource = Held()
        held.append(weakref.ref(resource))
        yield b"a" * 100
        await asyncio.sleep(0.01)
        if ending == "failed":
            raise RuntimeError("engine crashed")
        await asyncio.sleep(10)
        yield b"b" * 100

    gc.collect()
    gc.disable()
    try:
        if ending == "abandoned":
            await read(flights.stream("k", produce), stop_after=100)
        else:
            results = await asyncio.gather(
                read(flights.stream("k", produce)), read(flights.stream("k", produce)), return_exceptions=True
            )
            assert [type(r) for r in results] == [RuntimeError, RuntimeError]
            del results  # a caller that handled the error lets go of it
        await until(lambda: held[0]() is None)  # freed once the production winds down, without gc.collect()
    finally:
        gc.enable()
