"""The limits contract: every rule of the windows and leases asserted once, through the limiter, run against both
storages (memory, and Redis on a real redis-server).

What only Redis does (replicas sharing the limits, outages, its windows' layout) is ``test_limits_redis.py``; what a
replica holds of its own connections is ``test_held_connections.py``.
"""

from __future__ import annotations

import asyncio
import re
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING

import pytest

from auth.limits import LimitState, RateLimitExceededError, RequestTooLargeError, TenantRateLimiter
from auth.settings import TenantLimits
from gateway.http.ratelimit_headers import UNLIMITED, rate_limit_headers
from tests.auth_backends import MEMORY

if TYPE_CHECKING:
    from collections.abc import Callable


@pytest.fixture(params=["memory", "redis"])
def storage_uri(request: pytest.FixtureRequest) -> str:
    if request.param == "memory":
        return MEMORY
    return str(request.getfixturevalue("redis_url"))


@pytest.fixture
def limiter(make_limiter: Callable[..., TenantRateLimiter], storage_uri: str) -> TenantRateLimiter:
    return make_limiter(storage_uri, lease_ttl_s=0.3)


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


async def test_a_request_larger_than_the_whole_limit_is_too_large(limiter: TenantRateLimiter, tenant: str) -> None:
    with pytest.raises(RequestTooLargeError) as refused:
        await limiter.admit(tenant, TenantLimits(characters_per_minute=10), 11)
    assert (refused.value.reason, refused.value.asked, refused.value.limit) == ("characters", 11, 10)
    assert refused.value.retry_after_s == 60
    with pytest.raises(RateLimitExceededError) as over:  # what fits once the window moves on is not too large
        await limiter.admit(tenant, TenantLimits(characters_per_minute=10), 10)
        await limiter.admit(tenant, TenantLimits(characters_per_minute=10), 1)
    assert not isinstance(over.value, RequestTooLargeError)


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
