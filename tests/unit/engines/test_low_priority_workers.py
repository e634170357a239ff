"""``low_priority_workers``: the ``low`` priority class (speech jobs) on workers of its own at a lower CPU priority, and
paused while other requests are in flight; with real worker processes running the synthetic engine."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import psutil
import pytest

from engines.base import SynthesisRequest
from engines.pool import EnginePool
from engines.scheduling import TenantShare
from engines.settings import local_engine_settings

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

pytestmark = pytest.mark.slow  # starts engine worker processes: left out of `make quick`

LOW = TenantShare(priority="low")
# 0.05 s of audio a character, spoken in real time: a 200-character job takes 10 s of its worker.
OPTIONS = {"seconds_per_char": 0.05, "rtf": 1.0}


@pytest.fixture
async def pool() -> AsyncIterator[EnginePool]:
    settings: dict[str, Any] = {"workers": 1, "low_priority_workers": 1}
    engine = EnginePool("test", local_engine_settings(kind="synthetic", options=OPTIONS, **settings))
    await engine.start()
    try:
        assert await engine.wait_ready(30)
        deadline = time.monotonic() + 30
        while engine.status().ready_workers < 2:
            assert time.monotonic() < deadline, engine.status()
            await asyncio.sleep(0.05)
        yield engine
    finally:
        await engine.stop()


def request(chars: int) -> SynthesisRequest:
    return SynthesisRequest(text="x" * chars, voice="nova")


async def test_the_low_worker_runs_at_a_lower_cpu_priority(pool: EnginePool) -> None:
    first, last = pool.status().pids
    assert psutil.Process(last).nice() == psutil.Process(first).nice() + 10


async def test_a_request_does_not_wait_for_a_low_request_running(pool: EnginePool) -> None:
    async with pool.open_stream(request(200), tenant="jobs", share=LOW) as job:
        await anext(job)  # the job's 10 s hold a worker
        started = time.perf_counter()
        async with pool.open_stream(request(2), tenant="caller") as interactive:
            await anext(interactive)
            first_audio_s = time.perf_counter() - started
        assert first_audio_s < 2, first_audio_s  # not the job's 10 s


async def test_low_requests_keep_to_their_own_workers(pool: EnginePool) -> None:
    async with pool.open_stream(request(200), tenant="jobs", share=LOW) as job:
        await anext(job)
        second = asyncio.create_task(_first_audio(pool, request(2), LOW))
        await asyncio.sleep(0.5)
        assert not second.done()  # the main worker is idle, but it is not the jobs'
        assert pool.status().queued == 1
    await asyncio.wait_for(second, 5)  # once the first job's worker is free


async def test_the_low_lane_pauses_while_another_request_is_in_flight_then_goes_on(pool: EnginePool) -> None:
    async with pool.open_stream(request(200), tenant="jobs", share=LOW) as job:
        await anext(job)
        async with pool.open_stream(request(60), tenant="caller") as interactive:  # 3 s of real-time audio
            await anext(interactive)
            paused = time.perf_counter()
            await anext(job)
            first_gap_s = time.perf_counter() - paused
            pieces = 0
            until = time.perf_counter() + 1.5
            while time.perf_counter() < until:
                await anext(job)
                pieces += 1
        assert 0.3 < first_gap_s < 1.5, first_gap_s  # paused, at most about 0.5 s at a time
        assert pieces > 0  # and not stopped by a request that lasts


async def _first_audio(pool: EnginePool, req: SynthesisRequest, share: TenantShare) -> bytes:
    async with pool.open_stream(req, tenant="jobs", share=share) as stream:
        return await anext(stream)
