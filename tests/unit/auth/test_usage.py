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

from auth.usage import MemoryUsageLedger, RedisUsageLedger, UsageLedger, UsageRecord, UsageUnavailableError

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from tests.redis_server import RedisServer


@pytest.fixture(params=["memory", "fakeredis", "redis"])
async def ledger(request: pytest.FixtureRequest) -> AsyncIterator[UsageLedger]:
    if request.param == "memory":
        yield MemoryUsageLedger()
        return
    client: aioredis.Redis
    if request.param == "fakeredis":
        client = fakeredis.FakeAsyncRedis()
    else:
        client = aioredis.Redis.from_url(request.getfixturevalue("redis_url"), decode_responses=True)
    yield RedisUsageLedger(client)
    await client.aclose()


async def test_unknown_tenant_has_zero_usage(ledger: UsageLedger) -> None:
    assert await ledger.get("nobody") == UsageRecord(0, 0, 0.0, 0, {})
    assert await ledger.all() == {}


async def test_requests_and_rejections_add_up(ledger: UsageLedger) -> None:
    await ledger.record_request("acme", characters=120, audio_seconds=2.5, cache_hit=False)
    await ledger.record_request("acme", characters=30, audio_seconds=0.75, cache_hit=True)
    await ledger.record_request("zeta", characters=7, audio_seconds=0.25, cache_hit=False)
    await ledger.record_rejection("acme", "requests")
    await ledger.record_rejection("acme", "requests")
    await ledger.record_rejection("acme", "characters")
    acme = UsageRecord(
        requests=2, input_characters=150, audio_seconds=3.25, cache_hits=1, rejections={"requests": 2, "characters": 1}
    )
    zeta = UsageRecord(requests=1, input_characters=7, audio_seconds=0.25, cache_hits=0, rejections={})
    assert await ledger.get("acme") == acme
    assert await ledger.all() == {"acme": acme, "zeta": zeta}


async def test_redis_usage_survives_a_new_ledger(redis_url: str) -> None:
    client = aioredis.Redis.from_url(redis_url)
    await RedisUsageLedger(client).record_request("acme", characters=5, audio_seconds=1.0, cache_hit=False)
    assert (await RedisUsageLedger(client).get("acme")).input_characters == 5
    assert await client.hgetall("tts:usage:acme") == {
        b"requests": b"1",
        b"input_characters": b"5",
        b"audio_seconds": b"1",
    }
    await client.aclose()


async def test_nothing_is_lost_while_redis_is_down(
    outage_redis: RedisServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = aioredis.Redis.from_url(outage_redis.url, socket_connect_timeout=0.5, socket_timeout=0.5)
    ledger = RedisUsageLedger(client)
    await ledger.record_request("acme", characters=10, audio_seconds=1.0, cache_hit=False)
    outage_redis.stop()
    with caplog.at_level(logging.WARNING, logger="tts_gateway.usage"):
        for _ in range(3):
            await ledger.record_request("acme", characters=10, audio_seconds=1.0, cache_hit=True)
        await ledger.record_rejection("acme", "concurrency")
        with pytest.raises(UsageUnavailableError):
            await ledger.get("acme")
    assert len([r for r in caplog.records if "unreachable" in r.getMessage()]) == 1
    # No persistence: the restarted server is empty, so what it holds afterwards came from the buffer.
    outage_redis.start()
    await ledger.record_request("zeta", characters=1, audio_seconds=0.5, cache_hit=False)
    fresh = RedisUsageLedger(client)
    assert await fresh.get("acme") == UsageRecord(
        requests=3, input_characters=30, audio_seconds=3.0, cache_hits=3, rejections={"concurrency": 1}
    )
    assert (await fresh.get("zeta")).requests == 1
    await client.aclose()


async def test_pending_usage_is_visible_and_flushed_by_reads() -> None:
    server = fakeredis.FakeServer()
    client = fakeredis.FakeAsyncRedis(server=server)
    ledger = RedisUsageLedger(client)
    server.connected = False
    await ledger.record_request("acme", characters=4, audio_seconds=0.5, cache_hit=False)
    server.connected = True
    assert (await ledger.all())["acme"].input_characters == 4
    assert (await RedisUsageLedger(client).get("acme")).input_characters == 4
    await client.aclose()


async def test_a_caller_cancelled_mid_write_is_counted_once(redis_url: str) -> None:
    """A client that goes away cancels its accounting at an await, maybe after the transaction reached Redis (anyio
    cancels again at every await): each request must still be counted once, neither lost nor written again."""
    client = aioredis.Redis.from_url(redis_url)
    ledger = RedisUsageLedger(client)
    await ledger.record_request("warm", characters=1, audio_seconds=0.0, cache_hit=False)  # a pooled connection
    for spins in range(40):  # cancelled at each step of the write in turn: connection, send, reply
        task = asyncio.create_task(ledger.record_request("acme", characters=1, audio_seconds=0.0, cache_hit=False))
        for _ in range(spins % 8 + 1):
            await asyncio.sleep(0)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    deadline = time.monotonic() + 2
    while (await ledger.get("acme")).requests < 40 and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)  # late writes, if any, would land now
    assert (await ledger.get("acme")).requests == 40
    await client.aclose()
