"""A job meets engines that cannot speak yet: a segment refused because its engine is still loading or overloaded
waits for it (with backoff, giving its turn up meanwhile) and the job goes on from where it was; an engine that stays
unready fails the job within the wait's bound, one that fails while speaking within ``segment_attempts`` tries; and a
replica takes no job from the queue (a real redis-server) before its engines are ready.

A graceful restart used to fail every running job for good: the new process's worker took the job handed back at
once, and its three tries, one after the other, all met "engine ... is not ready: still loading"
(``tests/e2e/test_jobs_restart.py`` restarts a real gateway).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, cast

from engines.errors import EngineNotReadyError, EngineOverloadedError, SynthesisFailedError
from gateway.jobs.dispatch import QueueDispatch
from gateway.jobs.store import MemoryJobStore
from gateway.settings import JobsSettings
from gateway.speech.errors import FailoverExhaustedError
from storage import connect_redis, sortable_id
from tests.job_runs import TENANT, Engines, job, runner
from tests.waiting import wait_for

if TYPE_CHECKING:
    from gateway.jobs.runner import JobRunner

SEGMENTS = ["The first sentence.", "The second sentence.", "The third sentence."]
LOADING = "still loading: no worker is ready yet"


def not_ready(engine: str, reason: str = LOADING) -> FailoverExhaustedError:
    """What the speech service raises when the one engine of a model is not ready."""
    error = EngineNotReadyError(engine, reason)
    exhausted = FailoverExhaustedError(error, 0)
    exhausted.__cause__ = error
    return exhausted


async def test_a_segment_waits_for_an_engine_still_loading_and_the_job_completes() -> None:
    store, engines = MemoryJobStore(ttl_s=60), Engines()
    job_id = await job(store, "paced", SEGMENTS)
    engines.down["paced"] = not_ready("paced")
    running = asyncio.create_task(runner(store, engines).run(TENANT, job_id))  # the default wait: 300 s
    await wait_for(lambda: engines.tries["paced"] > 3, what="more tries than segment_attempts")
    assert not running.done()  # before the fix: failed after three tries at once
    del engines.down["paced"]  # the engine is ready now
    await asyncio.wait_for(running, 30)
    record = await store.get(TENANT, job_id)
    assert record is not None and (record.status, record.error, record.segments_done) == ("completed", None, 3)
    assert engines.spoken == SEGMENTS  # each once, in order


async def test_an_overloaded_engine_is_waited_for_no_sooner_than_it_asks() -> None:
    store, engines = MemoryJobStore(ttl_s=60), Engines()
    job_id = await job(store, "busy", SEGMENTS)
    engines.down["busy"] = EngineOverloadedError("busy", retry_after_s=1)
    started = time.monotonic()
    running = asyncio.create_task(runner(store, engines).run(TENANT, job_id))
    await wait_for(lambda: engines.tries["busy"] == 2, what="a second try")
    assert time.monotonic() - started >= 1.0  # its Retry-After
    del engines.down["busy"]
    await asyncio.wait_for(running, 30)
    record = await store.get(TENANT, job_id)
    assert record is not None and record.status == "completed"


async def test_an_engine_that_never_becomes_ready_fails_the_job_within_the_wait() -> None:
    store, engines = MemoryJobStore(ttl_s=60), Engines()
    job_id = await job(store, "broken", SEGMENTS)
    engines.down["broken"] = not_ready("broken", "worker failed to start (no weights)")
    started = time.monotonic()
    await asyncio.wait_for(runner(store, engines, engine_wait_s=2.0).run(TENANT, job_id), 10)
    assert 2.0 <= time.monotonic() - started < 4.0
    record = await store.get(TENANT, job_id)
    assert record is not None and record.status == "failed"
    assert record.error == (
        "A segment could not be spoken: engine 'broken' is not ready: worker failed to start (no weights) "
        "(waited 2 s for the engine)"
    )
    assert 3 <= engines.tries["broken"] <= 8  # backed off: 0.5 s doubling, not a busy loop


async def test_an_engine_that_fails_to_speak_is_tried_segment_attempts_times() -> None:
    store, engines = MemoryJobStore(ttl_s=60), Engines()
    job_id = await job(store, "crashing", SEGMENTS)
    engines.down["crashing"] = SynthesisFailedError("the engine worker died (exit code -9)")
    await asyncio.wait_for(runner(store, engines).run(TENANT, job_id), 10)
    record = await store.get(TENANT, job_id)
    assert record is not None and record.status == "failed"
    assert record.error == "A segment could not be spoken: the engine worker died (exit code -9)"
    assert engines.tries["crashing"] == 3


async def test_a_job_waiting_for_its_engine_gives_its_turn_up() -> None:
    """One slot: a job whose engine is loading waits outside it, so a job on another engine is spoken meanwhile."""
    store, engines = MemoryJobStore(ttl_s=60), Engines()
    jobs = runner(store, engines, slots=1)
    waiting_id = await job(store, "loading", SEGMENTS)
    engines.down["loading"] = not_ready("loading")
    waiting = asyncio.create_task(jobs.run(TENANT, waiting_id))
    await wait_for(lambda: engines.tries["loading"] > 0, what="the first job's first try")
    other_id = await job(store, "ready", SEGMENTS)
    await asyncio.wait_for(jobs.run(TENANT, other_id), 10)
    other = await store.get(TENANT, other_id)
    assert other is not None and other.status == "completed"
    assert not waiting.done()
    del engines.down["loading"]
    await asyncio.wait_for(waiting, 30)
    first = await store.get(TENANT, waiting_id)
    assert first is not None and first.status == "completed"


class Runs:
    """Stands in for the job runner behind the queue: records each run, which ends at once."""

    def __init__(self) -> None:
        self.started: list[str] = []

    async def run(self, _tenant: str, job_id: str) -> None:
        self.started.append(job_id)


async def test_a_replica_takes_no_job_before_its_engines_are_ready(redis_url: str) -> None:
    redis = connect_redis(redis_url)
    runs, ready = Runs(), asyncio.Event()
    dispatch = QueueDispatch(redis, cast("JobRunner", runs), JobsSettings(), engines_ready=ready.is_set)
    dispatch.start()
    try:
        job_id = sortable_id("job_")
        await dispatch.submit(TENANT, job_id)
        await asyncio.sleep(1.5)  # a worker takes a queued job within 0.2 s
        assert runs.started == []
        assert await dispatch.queue.count("queued") == 1  # waiting for another replica, or this one once ready
        ready.set()
        await wait_for(lambda: runs.started == [job_id], timeout_s=10, what="the job taken once the engines are ready")
    finally:
        await dispatch.close()
        await redis.aclose()
