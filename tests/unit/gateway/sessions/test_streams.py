"""A session's share of its tenant's streams (``gateway/sessions/streams.py``), on the real in-memory limiter: lanes
speaking side by side hold the session's own stream and one more of the tenant's each; what finds none waits its turn
and is handed the session's own stream in order; a segment given up while it waits takes nothing with it."""

from __future__ import annotations

import asyncio
import contextlib
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING

import pytest

from auth.limits import RateLimitExceededError
from auth.limits.limiter import TenantRateLimiter
from auth.settings import TenantLimits
from gateway.sessions.streams import SessionStreams

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

LIMITS = TenantLimits(concurrent_streams=2)


@pytest.fixture
async def limiter() -> AsyncIterator[TenantRateLimiter]:
    limits = TenantRateLimiter(None, stream_wait_s=0.0)
    yield limits
    await limits.close()


def session_of(limiter: TenantRateLimiter) -> SessionStreams:
    return SessionStreams(lambda: limiter.stream_lease("acme", LIMITS))


async def tenant_streams_free(limiter: TenantRateLimiter) -> int:
    """How many more streams the tenant could take now (each taken and let go at once)."""
    free = 0
    async with AsyncExitStack() as held:
        for _ in range(LIMITS.concurrent_streams or 0):
            try:
                await held.enter_async_context(limiter.stream_lease("acme", LIMITS))
            except RateLimitExceededError:
                break
            free += 1
    return free


async def test_lanes_at_once_hold_the_session_stream_and_one_more_each(limiter: TenantRateLimiter) -> None:
    async with limiter.stream_lease("acme", LIMITS):  # the session's own, taken when it was admitted
        streams = session_of(limiter)
        speaking: list[int] = []
        now = 0

        async def segment() -> None:
            nonlocal now
            held = streams.segment()
            assert held is not None
            async with held:
                now += 1
                speaking.append(now)
                await asyncio.sleep(0.05)
                now -= 1

        await asyncio.gather(*(segment() for _ in range(5)))
        assert max(speaking) == 2  # the session's stream and the tenant's one other
        assert len(speaking) == 5  # and every segment was spoken
        assert await tenant_streams_free(limiter) == 1  # every further stream was given back


async def test_the_sessions_stream_goes_to_the_segments_waiting_in_order(limiter: TenantRateLimiter) -> None:
    async with limiter.stream_lease("acme", LIMITS), limiter.stream_lease("acme", LIMITS):  # the tenant's all held
        streams = session_of(limiter)
        order: list[int] = []
        first = streams.segment()
        assert first is not None
        async with first:

            async def segment(n: int) -> None:
                held = streams.segment()
                assert held is not None
                async with held:
                    order.append(n)

            waiting = [asyncio.create_task(segment(n)) for n in range(3)]
            await asyncio.sleep(0.05)
            assert not order  # nothing free: they wait their turn
        await asyncio.gather(*waiting)
        assert order == [0, 1, 2]


async def test_a_segment_given_up_while_it_waits_takes_nothing(limiter: TenantRateLimiter) -> None:
    async with limiter.stream_lease("acme", LIMITS), limiter.stream_lease("acme", LIMITS):
        streams = session_of(limiter)
        first, given_up = streams.segment(), streams.segment()
        assert first is not None and given_up is not None
        async with first:
            waiting = asyncio.create_task(given_up.__aenter__())
            await asyncio.sleep(0.05)
            waiting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await waiting
        after = streams.segment()
        assert after is not None
        async with asyncio.timeout(0.05), after:  # the session's own stream is free at once
            pass


def test_a_tenant_without_concurrent_streams_holds_nothing() -> None:
    assert SessionStreams(None).segment() is None
