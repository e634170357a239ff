"""The worker pool with real worker processes running the synthetic engine."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import psutil
import pytest

from engines.base import InvalidSynthesisRequestError, SynthesisRequest
from engines.errors import EngineNotReadyError, EngineOverloadedError, SynthesisFailedError
from engines.pool import EnginePool
from engines.settings import local_engine_settings
from tests.waiting import wait_for

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

pytestmark = pytest.mark.slow  # starts engine worker processes: left out of `make quick`

RATE = 24000


@pytest.fixture
async def make_pool() -> AsyncIterator[Callable[..., Any]]:
    pools: list[EnginePool] = []

    async def make(options: dict[str, Any] | None = None, *, wait: bool = True, **settings: Any) -> EnginePool:
        pool = EnginePool("test", local_engine_settings(kind="synthetic", options=options or {}, **settings))
        pools.append(pool)
        await pool.start()
        if wait:
            await pool.wait_ready(30)
        return pool

    yield make
    for pool in pools:
        await pool.stop()
        assert all(
            not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
            for pid in pool.status().pids
        )


def request(text: str = "x" * 20, voice: str = "nova") -> SynthesisRequest:
    return SynthesisRequest(text=text, voice=voice)


async def collect(pool: EnginePool, req: SynthesisRequest) -> bytes:
    async with pool.open_stream(req) as stream:
        return b"".join([chunk async for chunk in stream])


async def test_streams_exactly_the_audio_the_engine_made(make_pool: Callable[..., Any]) -> None:
    pool = await make_pool({"seconds_per_char": 0.05}, workers=2)
    results = await asyncio.gather(*(collect(pool, request("y" * n)) for n in (10, 20, 30)))
    assert [len(pcm) // 2 for pcm in results] == [round(n * 0.05 * RATE) for n in (10, 20, 30)]
    assert pool.status().active_jobs == 0


async def test_excess_requests_are_refused_fast_beyond_the_queue(make_pool: Callable[..., Any]) -> None:
    pool = await make_pool({"rtf": 1.0}, workers=1, queue_size=1)
    running = asyncio.create_task(collect(pool, request("x" * 20)))  # 1 s of audio at real time
    queued = asyncio.create_task(collect(pool, request("x" * 2)))
    await wait_for(lambda: pool.status().queued == 1)
    started = time.monotonic()
    with pytest.raises(EngineOverloadedError) as refused:
        await collect(pool, request())
    assert time.monotonic() - started < 0.1
    assert refused.value.retry_after_s >= 1
    assert len(await running) > 0 and len(await queued) > 0


async def test_a_request_waiting_too_long_is_refused(make_pool: Callable[..., Any]) -> None:
    pool = await make_pool({"rtf": 1.0}, workers=1, queue_size=4, queue_timeout_s=0.3)
    running = asyncio.create_task(collect(pool, request("x" * 30)))
    await wait_for(lambda: pool.status().busy_workers == 1)
    with pytest.raises(EngineOverloadedError):
        await collect(pool, request())
    assert pool.status().queued == 0
    await running


async def test_leaving_early_cancels_and_frees_the_worker(make_pool: Callable[..., Any]) -> None:
    pool = await make_pool({"rtf": 1.0}, workers=1)
    async with pool.open_stream(request("x" * 400)) as stream:  # 20 s of audio at real time
        await anext(stream)
    started = time.monotonic()
    assert len(await collect(pool, request("x" * 2))) > 0
    assert time.monotonic() - started < 1.0
    assert pool.status().active_jobs == 0
    assert pool.status().restarts == 0


async def test_a_crashed_worker_fails_its_job_and_is_replaced(make_pool: Callable[..., Any]) -> None:
    pool = await make_pool(workers=1)
    with pytest.raises(SynthesisFailedError, match="worker died"):
        await collect(pool, request("x" * 40 + " #crash-after=2"))
    await wait_for(lambda: pool.status().ready_workers == 1)
    assert pool.status().restarts == 1
    assert len(await collect(pool, request())) > 0


async def test_a_stuck_generation_is_killed_by_the_watchdog(make_pool: Callable[..., Any]) -> None:
    pool = await make_pool(workers=1, stall_timeout_s=0.5)
    started = time.monotonic()
    with pytest.raises(SynthesisFailedError, match="no progress"):
        await collect(pool, request("x" * 40 + " #hang-after=1"))
    assert time.monotonic() - started < 3
    await wait_for(lambda: pool.status().ready_workers == 1)
    assert len(await collect(pool, request())) > 0


async def test_a_worker_deaf_to_cancellation_is_replaced(make_pool: Callable[..., Any]) -> None:
    pool = await make_pool(workers=1, cancel_timeout_s=0.3)
    async with pool.open_stream(request("x" * 40 + " #hang-after=1")) as stream:
        await anext(stream)
    await wait_for(lambda: pool.status().restarts == 1 and pool.status().ready_workers == 1)
    assert len(await collect(pool, request())) > 0


async def test_an_engine_error_fails_the_job_but_keeps_the_worker(make_pool: Callable[..., Any]) -> None:
    pool = await make_pool(workers=1)
    pid = pool.status().pids
    with pytest.raises(SynthesisFailedError, match="injected failure"):
        await collect(pool, request("x #fail-after=1"))
    with pytest.raises(InvalidSynthesisRequestError) as invalid:
        await collect(pool, request(voice="nobody"))
    assert invalid.value.param == "voice"
    assert pool.status().pids == pid
    assert len(await collect(pool, request())) > 0


async def test_an_engine_that_cannot_load_says_why(make_pool: Callable[..., Any]) -> None:
    pool = await make_pool({"unavailable": "no weights in /models"}, workers=1)
    status = pool.status()
    assert status.state == "unavailable"
    assert status.reason == "no weights in /models"
    with pytest.raises(EngineNotReadyError, match="no weights"):
        await collect(pool, request())


async def test_a_client_that_stops_reading_is_dropped(make_pool: Callable[..., Any]) -> None:
    pool = await make_pool(workers=1, max_buffered_audio_s=0.5)
    async with pool.open_stream(request("x" * 200)) as stream:  # 10 s of audio, as fast as possible
        await wait_for(lambda: pool.status().active_jobs == 0)  # the worker gave up on us
        with pytest.raises(SynthesisFailedError, match="too slowly"):
            async for _ in stream:
                pass
    assert len(await collect(pool, request("x" * 5))) > 0  # 0.25 s: fits the buffer, the worker serves on


async def test_stop_ends_every_worker_process(make_pool: Callable[..., Any]) -> None:
    pool = await make_pool(workers=2)
    await wait_for(lambda: len(pool.status().pids) == 2, what="both workers started")  # ready: one of them is
    pids = pool.status().pids
    await pool.stop()
    for pid in pids:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


async def test_a_request_while_the_engine_is_still_loading_is_told_so_at_once(make_pool: Callable[..., Any]) -> None:
    # Not queued until the queue times out as "overloaded": the client (or the alias's next engine) learns that the
    # engine is loading, which is what it is.
    pool = await make_pool({"load_delay_s": 30.0}, wait=False)
    assert pool.status().state == "starting"
    with pytest.raises(EngineNotReadyError, match="still loading"):
        await collect(pool, request())
    assert pool.status().queued == 0
