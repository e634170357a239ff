"""Per-tenant limits: one contract over the memory and the real-Redis storage, then Redis-only behaviour."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import uuid
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING

import pytest

from auth.limits import (
    HeldConnections,
    LimitState,
    LimitsUnavailableError,
    RateLimitExceededError,
    TenantRateLimiter,
    _Ask,
    _RedisAdmissions,
)
from auth.settings import TenantLimits
from gateway.http.ratelimit_headers import UNLIMITED, format_reset, rate_limit_headers
from storage import connect_redis
from tests.waiting import wait_for

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from tests.redis_server import RedisServer


@pytest.fixture
async def make_limiter(request: pytest.FixtureRequest) -> AsyncIterator[Callable[..., TenantRateLimiter]]:
    created: list[TenantRateLimiter] = []
    clients = []

    def make(uri: str, **options: object) -> TenantRateLimiter:
        client = None if uri == "memory://" else connect_redis(uri)
        if client is not None:
            clients.append(client)
        limiter = TenantRateLimiter(client, **options)  # type: ignore[arg-type]
        created.append(limiter)
        return limiter

    yield make
    for limiter in created:
        await limiter.close()
    for client in clients:
        await client.aclose()


@pytest.fixture(params=["memory", "redis"])
def storage_uri(request: pytest.FixtureRequest) -> str:
    if request.param == "memory":
        return "memory://"
    return str(request.getfixturevalue("redis_url"))


@pytest.fixture
def limiter(make_limiter: Callable[..., TenantRateLimiter], storage_uri: str) -> TenantRateLimiter:
    return make_limiter(storage_uri, lease_ttl_s=0.3)


@pytest.fixture
def tenant() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


async def test_requests_per_minute_admits_exactly_the_limit(limiter: TenantRateLimiter, tenant: str) -> None:
    limits = TenantLimits(requests_per_minute=5)
    remaining = [(await limiter.admit(tenant, limits, 10)).remaining_requests for _ in range(5)]
    assert remaining == [4, 3, 2, 1, 0]
    with pytest.raises(RateLimitExceededError) as refused:
        await limiter.admit(tenant, limits, 10)
    assert refused.value.reason == "requests"
    assert 1 <= refused.value.retry_after_s <= 60
    assert refused.value.state.remaining_requests == 0
    assert rate_limit_headers(refused.value.state)["x-ratelimit-remaining-requests"] == "0"


async def test_characters_are_weighted_hits(limiter: TenantRateLimiter, tenant: str) -> None:
    limits = TenantLimits(characters_per_minute=100)
    assert (await limiter.admit(tenant, limits, 60)).remaining_tokens == 40
    with pytest.raises(RateLimitExceededError) as refused:
        await limiter.admit(tenant, limits, 41)
    assert refused.value.reason == "characters"
    assert 1 <= refused.value.retry_after_s <= 60
    assert (await limiter.admit(tenant, limits, 40)).remaining_tokens == 0


async def test_a_request_larger_than_the_budget_waits_a_window(limiter: TenantRateLimiter, tenant: str) -> None:
    with pytest.raises(RateLimitExceededError) as refused:
        await limiter.admit(tenant, TenantLimits(characters_per_minute=10), 11)
    assert refused.value.retry_after_s == 60


async def test_a_refused_request_consumes_nothing(limiter: TenantRateLimiter, tenant: str) -> None:
    limits = TenantLimits(requests_per_minute=10, characters_per_minute=100)
    await limiter.admit(tenant, limits, 90)
    with pytest.raises(RateLimitExceededError):
        await limiter.admit(tenant, limits, 20)
    state = await limiter.state(tenant, limits)
    assert (state.remaining_requests, state.remaining_tokens) == (9, 10)


async def test_headers_for_a_known_state(limiter: TenantRateLimiter, tenant: str) -> None:
    limits = TenantLimits(requests_per_minute=5, characters_per_minute=1000)
    fresh = rate_limit_headers(await limiter.state(tenant, limits))
    assert fresh == {
        "x-ratelimit-limit-requests": "5",
        "x-ratelimit-remaining-requests": "5",
        "x-ratelimit-reset-requests": "0s",
        "x-ratelimit-limit-tokens": "1000",
        "x-ratelimit-remaining-tokens": "1000",
        "x-ratelimit-reset-tokens": "0s",
    }
    await limiter.admit(tenant, limits, 100)
    headers = rate_limit_headers(await limiter.admit(tenant, limits, 150))
    assert headers["x-ratelimit-limit-requests"] == "5"
    assert headers["x-ratelimit-remaining-requests"] == "3"
    assert headers["x-ratelimit-limit-tokens"] == "1000"
    assert headers["x-ratelimit-remaining-tokens"] == "750"
    # The oldest hit leaves the moving window a minute after it was made, i.e. just under 60 s from now.
    for name in ("x-ratelimit-reset-requests", "x-ratelimit-reset-tokens"):
        assert re.fullmatch(r"59(\.\d{1,3})?s|1m0s", headers[name]), headers[name]


async def test_every_header_is_sent_and_unlimited_ones_read_as_plenty(limiter: TenantRateLimiter, tenant: str) -> None:
    # OpenAI always sends all six; clients parse them as integers, so "no limit" must still be a number.
    headers = rate_limit_headers(await limiter.admit(tenant, TenantLimits(requests_per_minute=3), 10))
    assert headers["x-ratelimit-limit-requests"] == "3"
    assert headers["x-ratelimit-remaining-requests"] == "2"
    assert headers["x-ratelimit-limit-tokens"] == headers["x-ratelimit-remaining-tokens"] == str(UNLIMITED)
    assert headers["x-ratelimit-reset-tokens"] == "0s"
    assert await limiter.admit(tenant, TenantLimits(concurrent_streams=2), 10) == LimitState()
    unlimited = rate_limit_headers(LimitState())
    assert len(unlimited) == 6
    assert all(int(value) == UNLIMITED for name, value in unlimited.items() if "reset" not in name)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (0.12, "120ms"),
        (0.0004, "0s"),
        (1, "1s"),
        (1.5, "1.5s"),
        (59.9991, "59.999s"),
        (60, "1m0s"),
        (360, "6m0s"),
        (61.25, "1m1.25s"),
        (3725, "1h2m5s"),
    ],
)
def test_reset_is_formatted_like_openai(seconds: float, text: str) -> None:
    assert format_reset(seconds) == text


async def test_stream_leases_up_to_the_limit(limiter: TenantRateLimiter, tenant: str) -> None:
    limits = TenantLimits(concurrent_streams=2)
    async with AsyncExitStack() as held:
        await held.enter_async_context(limiter.stream_lease(tenant, limits))
        await held.enter_async_context(limiter.stream_lease(tenant, limits))
        with pytest.raises(RateLimitExceededError) as refused:
            await held.enter_async_context(limiter.stream_lease(tenant, limits))
        assert refused.value.reason == "concurrency"
        assert refused.value.retry_after_s == 1
    async with limiter.stream_lease(tenant, limits), limiter.stream_lease(tenant, limits):
        pass


async def test_session_leases_up_to_the_limit_apart_from_streams(limiter: TenantRateLimiter, tenant: str) -> None:
    limits = TenantLimits(open_sessions=2, concurrent_streams=1)
    async with AsyncExitStack() as held:
        for _ in range(2):
            await held.enter_async_context(limiter.session_lease(tenant, limits))
        with pytest.raises(RateLimitExceededError) as refused:
            await held.enter_async_context(limiter.session_lease(tenant, limits))
        assert (refused.value.reason, refused.value.retry_after_s) == ("sessions", 1)
        async with limiter.stream_lease(tenant, limits):  # sessions and streams are counted apart
            pass
    async with limiter.session_lease(tenant, limits), limiter.session_lease(tenant, limits):
        pass  # released when the block ended
    async with AsyncExitStack() as many:
        for _ in range(5):
            await many.enter_async_context(limiter.session_lease(tenant, TenantLimits(open_sessions=None)))


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


async def test_a_stream_over_the_limit_waits_for_one_to_end_then_is_refused(
    make_limiter: Callable[..., TenantRateLimiter],
    storage_uri: str,
    tenant: str,
) -> None:
    limiter = make_limiter(storage_uri, stream_wait_s=0.5)
    limits = TenantLimits(concurrent_streams=1)
    loop = asyncio.get_running_loop()
    async with AsyncExitStack() as first:
        await first.enter_async_context(limiter.stream_lease(tenant, limits))
        loop.call_later(0.1, lambda: loop.create_task(first.aclose()))  # the first stream ends within the wait
        started = loop.time()
        async with limiter.stream_lease(tenant, limits):
            waited = loop.time() - started
            assert 0.05 < waited < 0.45, waited
            started = loop.time()
            with pytest.raises(RateLimitExceededError) as refused:  # nothing ends this time: refused after the wait
                async with limiter.stream_lease(tenant, limits):
                    pass
            assert 0.45 <= loop.time() - started < 1.5
    assert refused.value.reason == "concurrency"


async def test_lease_released_on_error_and_on_cancellation(limiter: TenantRateLimiter, tenant: str) -> None:
    limits = TenantLimits(concurrent_streams=1)
    with pytest.raises(ZeroDivisionError):
        async with limiter.stream_lease(tenant, limits):
            _ = 1 / 0
    entered = asyncio.Event()

    async def stream() -> None:
        async with limiter.stream_lease(tenant, limits):
            entered.set()
            await asyncio.sleep(10)

    task = asyncio.create_task(stream())
    await entered.wait()
    with pytest.raises(RateLimitExceededError):
        async with limiter.stream_lease(tenant, limits):
            pass
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    async with limiter.stream_lease(tenant, limits):
        pass


async def test_held_lease_is_renewed_beyond_its_ttl(limiter: TenantRateLimiter, tenant: str) -> None:
    limits = TenantLimits(concurrent_streams=1)
    async with limiter.stream_lease(tenant, limits):
        for _ in range(3):  # 0.75 s in all, 2.5 times the 0.3 s ttl
            await asyncio.sleep(0.25)
            with pytest.raises(RateLimitExceededError):
                async with limiter.stream_lease(tenant, limits):
                    pass


async def test_lease_of_a_dead_holder_expires_after_ttl(limiter: TenantRateLimiter, tenant: str) -> None:
    limits = TenantLimits(concurrent_streams=1)
    dead = limiter.stream_lease(tenant, limits)
    await dead.__aenter__()
    # The holder "dies": its renewal stops and it never releases.
    limiter._background.cancel()
    with pytest.raises(RateLimitExceededError):
        async with limiter.stream_lease(tenant, limits):
            pass
    await asyncio.sleep(0.4)
    async with limiter.stream_lease(tenant, limits):
        pass
    await dead.__aexit__(None, None, None)


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
    with caplog.at_level(logging.WARNING, logger="tts_gateway.limits"):
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
    admissions = _RedisAdmissions(client, window_s=0.5)
    limits = TenantLimits(requests_per_minute=1000, characters_per_minute=1000)
    characters = f"tts:limits:{{{tenant}}}:characters"

    async def admit(amount: int) -> LimitState:
        return (await admissions.admit(tenant, _Ask(limits, amount, True, None), 1.0)).state

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
    admissions = _RedisAdmissions(client)
    limits = TenantLimits(characters_per_minute=1000)
    characters = f"tts:limits:{{{tenant}}}:characters"
    seconds, microseconds = await client.time()
    now_ms = seconds * 1000 + microseconds // 1000
    await client.lpush(characters, *(f"{now_ms}:30" for _ in range(3)))  # as the previous layout kept it
    state = (await admissions.admit(tenant, _Ask(limits, 5, True, None), 1.0)).state
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


def test_a_tenant_holds_at_most_its_bodies_on_a_replica() -> None:
    held = HeldConnections(capacity=1000)
    releases = [held.take("acme", "bodies", limit=2) for _ in range(2)]
    with pytest.raises(RateLimitExceededError) as refused:
        held.take("acme", "bodies", limit=2)
    assert (refused.value.reason, refused.value.retry_after_s) == ("bodies", 1)
    held.take("acme", "sessions")  # another kind, and another tenant, are not held by it
    held.take("other", "bodies", limit=2)
    releases[0]()
    releases[0]()  # once only
    assert held.held("acme", "bodies") == 1
    held.take("acme", "bodies", limit=2)


def test_a_crowded_replica_refuses_a_tenant_over_its_fair_share_not_one_under_it() -> None:
    held = HeldConnections(capacity=10)  # crowded from 8 held
    greedy = [held.take("greedy", "sessions") for _ in range(9)]  # alone, it is held by its own limits only
    for _ in range(4):  # two tenants now: 4 each; the newcomer under its share gets in though the replica is crowded
        held.take("modest", "bodies")
    assert held.fair_share("modest") == 4
    for tenant in ("modest", "greedy"):  # at its share, and far over it
        with pytest.raises(RateLimitExceededError) as refused:
            held.take(tenant, "bodies")
        assert refused.value.reason == "fair_share"
    for release in greedy[:6]:
        release()
    held.take("greedy", "sessions")  # 3 + 4 held: no longer crowded
    assert (held.held("greedy"), held.held("modest")) == (4, 4)
