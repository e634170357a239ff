"""What only the Redis storage of the limits does, beyond the contract (``test_limits_contract.py``): replicas that
share one tenant's limits, a Redis that goes away or refuses writes, the layout of its windows, and a lease taken in
Redis for a caller cancelled before the answer came."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING

import pytest

from auth.limits import LimitState, LimitsUnavailableError, RateLimitExceededError, TenantRateLimiter
from auth.limits.base import Ask
from auth.limits.redis import RedisAdmissions
from auth.settings import TenantLimits
from gateway.http.ratelimit_headers import rate_limit_headers
from storage import connect_redis
from tests.waiting import wait_for

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from tests.redis_server import RedisServer


async def test_two_replicas_never_hold_more_sessions_than_the_limit(
    make_limiter: Callable[..., TenantRateLimiter], redis_url: str, tenant: str
) -> None:
    replicas = [make_limiter(redis_url), make_limiter(redis_url)]
    limits = TenantLimits(open_sessions=3)
    async with AsyncExitStack() as held:
        admitted = 0
        for i in range(8):
            try:
                await held.enter_async_context(replicas[i % 2].session_lease(tenant, limits))
                admitted += 1
            except RateLimitExceededError:
                pass
        assert admitted == 3


async def test_two_replicas_never_admit_more_than_the_limit(
    make_limiter: Callable[..., TenantRateLimiter],
    redis_url: str,
    tenant: str,
) -> None:
    replicas = [make_limiter(redis_url), make_limiter(redis_url)]
    limits = TenantLimits(requests_per_minute=20, characters_per_minute=10_000)

    async def admit(i: int) -> bool:
        try:
            await replicas[i % 2].admit(tenant, limits, 10)
        except RateLimitExceededError:
            return False
        return True

    admitted = await asyncio.gather(*(admit(i) for i in range(80)))
    assert sum(admitted) == 20
    state = await replicas[0].state(tenant, limits)
    assert (state.remaining_requests, state.remaining_tokens) == (0, 10_000 - 200)


async def test_two_replicas_never_hold_more_leases_than_the_limit(
    make_limiter: Callable[..., TenantRateLimiter],
    redis_url: str,
    tenant: str,
) -> None:
    replicas = [make_limiter(redis_url), make_limiter(redis_url)]
    limits = TenantLimits(concurrent_streams=3)
    holding = 0
    peak = 0
    started = 0

    async def stream(i: int) -> None:
        nonlocal holding, peak, started
        try:
            async with replicas[i % 2].stream_lease(tenant, limits):
                started += 1
                holding += 1
                peak = max(peak, holding)
                await asyncio.sleep(0.05)
                holding -= 1
        except RateLimitExceededError:
            pass

    await asyncio.gather(*(stream(i) for i in range(30)))
    assert (peak, started) == (3, 3)


async def test_fail_open_admits_counts_and_warns_once_per_outage(
    make_limiter: Callable[..., TenantRateLimiter],
    outage_redis: RedisServer,
    tenant: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    limiter = make_limiter(outage_redis.url, fail_mode="open")
    limits = TenantLimits(requests_per_minute=5, concurrent_streams=1)
    assert (await limiter.admit(tenant, limits, 10)).remaining_requests == 4
    outage_redis.stop()
    with caplog.at_level(logging.WARNING, logger="chattts_gateway.limits"):
        for _ in range(3):
            state = await limiter.admit(tenant, limits, 10)
            assert state == LimitState(limit_requests=5)
            headers = rate_limit_headers(state)
            assert headers["x-ratelimit-limit-requests"] == "5"
            assert "x-ratelimit-remaining-requests" not in headers  # unknown during the outage
        async with limiter.stream_lease(tenant, limits):
            pass
        assert limiter.outage_count == 3
        assert len([r for r in caplog.records if "unreachable" in r.getMessage()]) == 1
        outage_redis.start()
        # No persistence: the restarted server starts with an empty window.
        assert (await limiter.admit(tenant, limits, 10)).remaining_requests == 4
        outage_redis.stop()
        await limiter.admit(tenant, limits, 10)
    assert limiter.outage_count == 4
    assert len([r for r in caplog.records if "unreachable" in r.getMessage()]) == 2


async def test_fail_closed_refuses_while_storage_is_down(
    make_limiter: Callable[..., TenantRateLimiter],
    outage_redis: RedisServer,
    tenant: str,
) -> None:
    limiter = make_limiter(outage_redis.url, fail_mode="closed")
    limits = TenantLimits(requests_per_minute=5, concurrent_streams=1)
    await limiter.admit(tenant, limits, 10)
    outage_redis.stop()
    with pytest.raises(LimitsUnavailableError):
        await limiter.admit(tenant, limits, 10)
    with pytest.raises(LimitsUnavailableError):
        await limiter.state(tenant, limits)
    with pytest.raises(LimitsUnavailableError):
        async with limiter.stream_lease(tenant, limits):
            pass
    assert limiter.outage_count == 0
    outage_redis.start()
    assert (await limiter.admit(tenant, limits, 10)).remaining_requests == 4
    async with limiter.stream_lease(tenant, limits):
        pass


async def test_a_redis_that_refuses_writes_is_an_episode_not_an_outage(
    make_limiter: Callable[..., TenantRateLimiter],
    outage_redis: RedisServer,
    tenant: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    limiter = make_limiter(outage_redis.url, fail_mode="open")
    limits = TenantLimits(requests_per_minute=5)
    client = connect_redis(outage_redis.url)
    await client.config_set("maxmemory-policy", "noeviction")
    await client.config_set("maxmemory", 1)
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            assert await limiter.admit(tenant, limits, 10) == LimitState(limit_requests=5)  # admitted unchecked
        assert limiter.write_refusals.refusing
        await client.config_set("maxmemory", 0)
        assert (await limiter.admit(tenant, limits, 10)).remaining_requests == 4
    assert not limiter.write_refusals.refusing
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1 and "refuses writes to the limits store" in messages[0], messages
    await client.aclose()


async def test_the_redis_windows_move_and_drop_only_what_left_them(redis_url: str, tenant: str) -> None:
    # A half-second window instead of the minute: the same script, the entries leaving it in time for a test.
    client = connect_redis(redis_url)
    admissions = RedisAdmissions(client, window_s=0.5)
    limits = TenantLimits(requests_per_minute=1000, characters_per_minute=1000)
    characters = f"tts:limits:{{{tenant}}}:characters"

    async def admit(amount: int) -> LimitState:
        return (await admissions.admit(tenant, Ask(limits, amount, True, None), 1.0)).state

    await admit(100)
    await admit(200)
    await asyncio.sleep(0.3)
    assert (await admit(50)).remaining_tokens == 1000 - 350
    await asyncio.sleep(0.3)  # the first two have left the window, the third has not
    assert (await admissions.state(tenant, limits)).remaining_tokens == 1000 - 50
    later = await admit(10)
    assert (later.remaining_requests, later.remaining_tokens) == (1000 - 2, 1000 - 60)
    assert len(await client.lrange(characters, 0, -1)) == 2  # what left the window is gone from Redis too
    assert await client.get(f"{characters}-total") == b"60"
    await client.aclose()


async def test_a_window_written_without_its_total_is_counted_once(redis_url: str, tenant: str) -> None:
    client = connect_redis(redis_url)
    admissions = RedisAdmissions(client)
    limits = TenantLimits(characters_per_minute=1000)
    characters = f"tts:limits:{{{tenant}}}:characters"
    seconds, microseconds = await client.time()
    now_ms = seconds * 1000 + microseconds // 1000
    await client.lpush(characters, *(f"{now_ms}:30" for _ in range(3)))  # as the previous layout kept it
    state = (await admissions.admit(tenant, Ask(limits, 5, True, None), 1.0)).state
    assert state.remaining_tokens == 1000 - 95
    assert await client.get(f"{characters}-total") == b"95"
    await client.aclose()


@asynccontextmanager
async def replies_delayed(upstream_port: int, delay_s: float) -> AsyncIterator[int]:
    """A TCP proxy in front of Redis that passes requests at once and holds each reply ``delay_s``: a command has
    run in Redis for that long before its caller learns so. Yields the port to connect to."""

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                if delay:
                    await asyncio.sleep(delay)
                writer.write(data)
                await writer.drain()
        writer.close()

    async def serve(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        redis_reader, redis_writer = await asyncio.open_connection("127.0.0.1", upstream_port)
        await asyncio.gather(pipe(client_reader, redis_writer, 0.0), pipe(redis_reader, client_writer, delay_s))

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()


async def test_a_lease_taken_as_its_caller_was_cancelled_is_released(
    make_limiter: Callable[..., TenantRateLimiter], redis_server: RedisServer, tenant: str
) -> None:
    """Before: a request cancelled after its admission script ran in Redis but before the reply came back (a client
    gone in those milliseconds, on a busy loop) left its stream lease held until ``lease_ttl_s`` after everything
    had ended, and the tenant got 429 for streams it no longer had."""
    admin = redis_server.client()
    leases, limits = f"tts:leases:{{{tenant}}}", TenantLimits(concurrent_streams=1)
    # Replies held 0.25 s, under the client's 1 s socket timeout; a first admission (another tenant's) connects and
    # loads the script, so that the one below is a single round trip.
    async with replies_delayed(redis_server.port, 0.25) as port:
        limiter = make_limiter(f"redis://127.0.0.1:{port}/0", lease_ttl_s=30.0)
        await limiter.admit(f"{tenant}-warm", limits, 1)
        request = asyncio.create_task(limiter.admit(tenant, limits, 1, hold_stream=AsyncExitStack()))
        await wait_for(lambda: admin.zcard(leases) == 1, timeout_s=5.0, what="the lease taken in Redis")
        request.cancel()
        with pytest.raises(asyncio.CancelledError):
            await request
        await wait_for(lambda: admin.zcard(leases) == 0, timeout_s=5.0, what="the lease released")
        await limiter.close()
    admin.close()
