"""Usage ledgers: one contract over memory, fakeredis and a real Redis; then Redis outages."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING

import fakeredis
import pytest
import redis.asyncio as aioredis

from auth.settings import TenantLimits
from auth.tenants import Tenant
from auth.usage import MemoryUsageLedger, RedisUsageLedger, UsageLedger, UsageRecord, UsageUnavailableError

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from tests.redis_server import RedisServer


def tenant(name: str, generation: str = "g1") -> Tenant:
    return Tenant(name, TenantLimits(), None, generation=generation)


ACME, ZETA = tenant("acme"), tenant("zeta")


@pytest.fixture(params=["memory", "fakeredis", "redis"])
async def ledger(request: pytest.FixtureRequest) -> AsyncIterator[UsageLedger]:
    if request.param == "memory":
        yield MemoryUsageLedger(retired_retention_s=1)
        return
    client: aioredis.Redis
    if request.param == "fakeredis":
        client = fakeredis.FakeAsyncRedis()
    else:
        client = aioredis.Redis.from_url(request.getfixturevalue("redis_url"), decode_responses=True)
    made = RedisUsageLedger(client, retired_retention_s=1)
    yield made
    await made.close()
    await client.aclose()


async def test_unknown_tenant_has_zero_usage(ledger: UsageLedger) -> None:
    assert await ledger.get(tenant("nobody")) == UsageRecord(0, 0, 0.0, 0, {})
    assert await ledger.retired("nobody") == []


async def test_requests_and_rejections_add_up(ledger: UsageLedger) -> None:
    ledger.record_request(ACME, characters=120, audio_seconds=2.5, cache_hit=False)
    ledger.record_request(ACME, characters=30, audio_seconds=0.75, cache_hit=True)
    ledger.record_request(ZETA, characters=7, audio_seconds=0.25, cache_hit=False)
    ledger.record_rejection(ACME, "requests")
    ledger.record_rejection(ACME, "requests")
    ledger.record_rejection(ACME, "characters")
    acme = UsageRecord(
        requests=2, input_characters=150, audio_seconds=3.25, cache_hits=1, rejections={"requests": 2, "characters": 1}
    )
    zeta = UsageRecord(requests=1, input_characters=7, audio_seconds=0.25, cache_hits=0, rejections={})
    assert await ledger.get(ACME) == acme
    assert await ledger.many([ZETA, tenant("nobody"), ACME]) == [zeta, UsageRecord(), acme]


async def test_a_tenant_created_again_starts_empty_and_the_old_usage_is_kept_apart(ledger: UsageLedger) -> None:
    old, new = tenant("acme", "old"), tenant("acme", "new")
    ledger.record_request(old, characters=10, audio_seconds=5.0, cache_hit=False)
    await ledger.retire(old)
    # A stream that was in flight at the deletion ends after it: its usage joins the retired record, not the new one.
    ledger.record_request(old, characters=3, audio_seconds=1.0, cache_hit=False)
    ledger.record_request(new, characters=1, audio_seconds=0.5, cache_hit=False)
    assert await ledger.get(new) == UsageRecord(requests=1, input_characters=1, audio_seconds=0.5)
    assert await ledger.get(old) == UsageRecord()
    [retired] = await ledger.retired("acme")
    assert (retired.tenant, retired.generation) == ("acme", "old")
    assert retired.usage == UsageRecord(requests=2, input_characters=13, audio_seconds=6.0)
    assert abs(retired.retired_at - time.time()) < 5
    assert await ledger.retired("zeta") == []


async def test_retired_usage_is_kept_for_its_retention_only(ledger: UsageLedger) -> None:
    ledger.record_request(ACME, characters=1, audio_seconds=1.0, cache_hit=False)
    await ledger.retire(ACME)
    assert len(await ledger.retired("acme")) == 1
    await asyncio.sleep(1.2)
    assert await ledger.retired("acme") == []


async def test_recording_returns_before_redis_answers(redis_url: str) -> None:
    """Usage is written off the response's path: recording is a plain call, the write follows in the background."""
    client = aioredis.Redis.from_url(redis_url)
    ledger = RedisUsageLedger(client)
    ledger.record_request(ACME, characters=5, audio_seconds=1.0, cache_hit=False)
    key = "tts:usage:{acme}:g1"
    deadline = time.monotonic() + 2
    while not await client.hgetall(key) and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert await client.hgetall(key) == {b"requests": b"1", b"input_characters": b"5", b"audio_seconds": b"1"}
    assert (await RedisUsageLedger(client).get(ACME)).input_characters == 5
    await ledger.close()
    await client.aclose()


async def test_nothing_is_lost_while_redis_is_down(
    outage_redis: RedisServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = aioredis.Redis.from_url(outage_redis.url, socket_connect_timeout=0.5, socket_timeout=0.5)
    ledger = RedisUsageLedger(client)
    ledger.record_request(ACME, characters=10, audio_seconds=1.0, cache_hit=False)
    await ledger.get(ACME)  # written
    outage_redis.stop()
    with caplog.at_level(logging.WARNING, logger="chattts_gateway.usage"):
        for _ in range(3):
            ledger.record_request(ACME, characters=10, audio_seconds=1.0, cache_hit=True)
        ledger.record_rejection(ACME, "concurrency")
        with pytest.raises(UsageUnavailableError):
            await ledger.get(ACME)
        await asyncio.sleep(1.5)  # the background writer tries again meanwhile
    assert len([r for r in caplog.records if "unreachable" in r.getMessage()]) == 1
    # No persistence: the restarted server is empty, so what it holds afterwards came from the buffer.
    outage_redis.start()
    ledger.record_request(ZETA, characters=1, audio_seconds=0.5, cache_hit=False)
    fresh = RedisUsageLedger(client)
    deadline = time.monotonic() + 3
    while (await fresh.get(ACME)).requests < 3 and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert await fresh.get(ACME) == UsageRecord(
        requests=3, input_characters=30, audio_seconds=3.0, cache_hits=3, rejections={"concurrency": 1}
    )
    assert (await fresh.get(ZETA)).requests == 1
    await ledger.close()
    await client.aclose()


async def test_pending_usage_is_visible_and_flushed_by_reads() -> None:
    server = fakeredis.FakeServer()
    client = fakeredis.FakeAsyncRedis(server=server)
    ledger = RedisUsageLedger(client)
    server.connected = False
    ledger.record_request(ACME, characters=4, audio_seconds=0.5, cache_hit=False)
    await asyncio.sleep(0)  # the writer's first try fails
    server.connected = True
    assert (await ledger.many([ACME]))[0].input_characters == 4
    assert (await RedisUsageLedger(client).get(ACME)).input_characters == 4
    await ledger.close()
    await client.aclose()


async def test_a_reader_cancelled_mid_write_leaves_each_request_counted_once(redis_url: str) -> None:
    """A reader that goes away cancels at an await, maybe after a write reached Redis (anyio cancels again at every
    await): each request must still be counted once, neither lost nor written again."""
    client = aioredis.Redis.from_url(redis_url)
    ledger = RedisUsageLedger(client)
    await ledger.get(ACME)  # a pooled connection
    for spins in range(40):  # cancelled at each step of the write in turn: connection, send, reply
        ledger.record_request(ACME, characters=1, audio_seconds=0.0, cache_hit=False)
        task = asyncio.create_task(ledger.get(ACME))
        for _ in range(spins % 8 + 1):
            await asyncio.sleep(0)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    deadline = time.monotonic() + 2
    while (await ledger.get(ACME)).requests < 40 and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)  # late writes, if any, would land now
    assert (await ledger.get(ACME)).requests == 40
    await ledger.close()
    await client.aclose()


class AnswerLosingRelay:
    """A TCP relay to a real Redis that, while :attr:`answers_to_lose` is above zero, loses Redis's answers: each
    cuts both connections instead of reaching the client. Redis has applied the command all the same, as a master
    that dies before its answer leaves, or a connection that breaks on the way back, would have."""

    def __init__(self, upstream_port: int) -> None:
        self._upstream_port = upstream_port
        self.answers_to_lose = 0
        self.answers_lost = 0
        self._server: asyncio.Server | None = None
        self._relays: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)

    async def close(self) -> None:
        assert self._server is not None
        self._server.close()
        for relay in self._relays:
            relay.cancel()
        await asyncio.gather(*self._relays, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        relay = asyncio.current_task()
        assert relay is not None
        self._relays.add(relay)
        upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self._upstream_port)
        try:
            await asyncio.gather(self._pipe(reader, upstream_writer, lose=False), self._pipe(upstream_reader, writer))
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            upstream_writer.close()
            self._relays.discard(relay)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, lose: bool = True) -> None:
        while data := await reader.read(65536):
            if lose and self.answers_to_lose > 0:
                self.answers_to_lose -= 1
                self.answers_lost += 1
                raise ConnectionResetError("the answer is lost")
            writer.write(data)
            await writer.drain()


async def test_a_write_applied_but_never_answered_counts_once(redis_server: RedisServer, redis_url: str) -> None:
    """Redis applies a write whose answer is lost: the client (redis-py retries a broken connection itself) and then
    the ledger try it again. Before: each try that reached Redis counted again (here two requests for one)."""
    relay = AnswerLosingRelay(redis_server.port)
    await relay.start()
    client = aioredis.Redis(port=relay.port, socket_timeout=2)
    direct = aioredis.Redis.from_url(redis_url)
    ledger = RedisUsageLedger(client)
    ledger.record_request(ZETA, characters=1, audio_seconds=0.0, cache_hit=False)
    await ledger.get(ZETA)  # connected, the script loaded: the next command is the write
    relay.answers_to_lose = 3
    ledger.record_request(ACME, characters=7, audio_seconds=1.0, cache_hit=False)
    deadline = time.monotonic() + 10
    while relay.answers_to_lose > 0:
        assert time.monotonic() < deadline, "the write was never tried again"
        await asyncio.sleep(0.05)
    while True:  # a read writes what still waits first; the relay loses nothing more
        with contextlib.suppress(UsageUnavailableError):
            await ledger.get(ACME)
            break
        assert time.monotonic() < deadline, "the write was never answered"
    assert await direct.hgetall("tts:usage:{acme}:g1") == {
        b"requests": b"1",
        b"input_characters": b"7",
        b"audio_seconds": b"1",
    }
    ledger.record_request(ACME, characters=1, audio_seconds=0.0, cache_hit=False)  # later batches still count
    assert (await ledger.get(ACME)).requests == 2
    await ledger.close()
    await client.aclose()
    await direct.aclose()
    await relay.close()


async def test_a_write_applied_but_never_answered_is_not_counted_again_by_a_full_redis(
    outage_redis: RedisServer,
) -> None:
    """The try again of a write Redis applied, while Redis is out of memory (noeviction): it writes nothing, so Redis
    does not refuse it, and usage reads as it is. Before: the try again was refused for as long as memory was full,
    and each read added the batch, still waiting, to what Redis held: two requests for one."""
    relay = AnswerLosingRelay(outage_redis.port)
    await relay.start()
    client = aioredis.Redis(port=relay.port, socket_timeout=2)
    direct = aioredis.Redis.from_url(outage_redis.url)
    ledger = RedisUsageLedger(client)
    ledger.record_request(ZETA, characters=1, audio_seconds=0.0, cache_hit=False)
    await ledger.get(ZETA)  # connected, the script loaded: the next command is the write
    relay.answers_to_lose = 1000  # every try of the write, and every reconnection, until the test stops it
    ledger.record_request(ACME, characters=7, audio_seconds=1.0, cache_hit=False)
    deadline = time.monotonic() + 10
    while not await direct.exists("tts:usage:{acme}:g1") or relay.answers_lost < 2:
        assert time.monotonic() < deadline, "the write never reached Redis"
        await asyncio.sleep(0.05)
    used = int((await direct.info("memory"))["used_memory"])
    await direct.config_set("maxmemory-policy", "noeviction")
    await direct.config_set("maxmemory", str(used - 100_000))
    relay.answers_to_lose = 0
    while True:
        with contextlib.suppress(UsageUnavailableError):
            assert (await ledger.get(ACME)).requests == 1
            break
        assert time.monotonic() < deadline, "usage never read"
    assert ledger.write_refusals.refusals == 0
    await direct.config_set("maxmemory", "0")
    await ledger.close()
    await client.aclose()
    await direct.aclose()
    await relay.close()


async def test_a_redis_that_refuses_writes_is_one_episode_and_loses_nothing(
    outage_redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    client = aioredis.Redis.from_url(outage_redis.url)
    ledger = RedisUsageLedger(client)
    await client.config_set("maxmemory-policy", "noeviction")
    await client.config_set("maxmemory", 1)  # everything refused: the server holds more than a byte already
    with caplog.at_level(logging.INFO, logger="chattts_gateway.usage"):
        for _ in range(3):
            ledger.record_request(ACME, characters=2, audio_seconds=0.5, cache_hit=False)
            await asyncio.sleep(0.05)
        assert ledger.write_refusals.refusing
        await client.config_set("maxmemory", 0)
        deadline = time.monotonic() + 3
        while (await RedisUsageLedger(client).get(ACME)).requests < 3 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
    assert (await RedisUsageLedger(client).get(ACME)).requests == 3
    assert not ledger.write_refusals.refusing
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "refuses writes to the usage store" in warnings[0], warnings
    await ledger.close()
    await client.aclose()
