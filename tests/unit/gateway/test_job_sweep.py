"""The jobs' sweep on a real redis-server: a job a live worker has just taken is not swept as lost while its worker
marks it active, and a lost one is still queued again; whatever way the queue ends a job without its runner (given up
after its last takeover, its entry gone, aborted by another hand than a cancel), the job's record fails
(``runner_lost``) rather than stay ``running`` for ever."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, cast

from saq.job import Status
from saq.utils import now

from engines.errors import EngineNotReadyError
from gateway.jobs.dispatch import QueueDispatch, _queue_key
from gateway.jobs.store import MemoryJobStore
from gateway.settings import JobsSettings
from storage import connect_redis, sortable_id
from tests.job_runs import TENANT, Engines, job, runner
from tests.waiting import wait_for

if TYPE_CHECKING:
    from saq import Job, Queue

    from gateway.jobs.records import JobRecord, JobStatus
    from gateway.jobs.runner import JobRunner


async def taken(queue: Queue, dispatch: QueueDispatch, tenant: str, job_id: str | None = None) -> Job:
    """A job submitted and moved to the active list, as a worker's take does before it marks the job active."""
    job_id = job_id or sortable_id("job_")
    await dispatch.submit(tenant, job_id)
    job = await queue.job(_queue_key(tenant, job_id))
    assert job is not None
    await queue.redis.lmove(queue._queued, queue._active)  # type: ignore[attr-defined]
    return job


async def test_a_job_marked_active_within_the_grace_is_not_swept(redis_url: str) -> None:
    redis = connect_redis(redis_url)
    dispatch = QueueDispatch(redis, cast("JobRunner", None), JobsSettings())
    queue = dispatch.queue
    try:
        job = await taken(queue, dispatch, "acme")

        async def mark_active() -> None:
            await asyncio.sleep(0.3)  # the sweep has read the active list by now: the job is still queued in it
            await job.update(status=Status.ACTIVE)

        swept, _ = await asyncio.gather(queue.sweep(lock=1), mark_active())
        assert swept == []
        stored = await queue.job(job.key)
        assert stored is not None and stored.status == Status.ACTIVE and stored.error is None
        assert await queue.count("queued") == 0  # not queued again beside the worker running it
    finally:
        await redis.aclose()


async def test_a_job_never_marked_active_is_queued_again(redis_url: str) -> None:
    redis = connect_redis(redis_url)
    dispatch = QueueDispatch(redis, cast("JobRunner", None), JobsSettings())
    queue = dispatch.queue
    try:
        job = await taken(queue, dispatch, "acme")
        await redis.rpush(queue._active, b"saq:job:{tts-jobs}:gone")  # type: ignore[attr-defined]
        assert sorted(await queue.sweep(lock=1)) == sorted([job.id, "saq:job:{tts-jobs}:gone"])
        stored = await queue.job(job.key)
        assert stored is not None and stored.status == Status.QUEUED
        assert await queue.count("queued") == 1
        assert await redis.lrange(queue._active, 0, -1) == []  # type: ignore[attr-defined]
        assert await queue.sweep(lock=1) == []  # the lock: one sweep a second here
    finally:
        await redis.aclose()


class EndingStore(MemoryJobStore):
    """The memory store, telling when a job ended."""

    def __init__(self) -> None:
        super().__init__(ttl_s=60)
        self.ended = asyncio.Event()

    async def finish(self, tenant: str, job_id: str, status: JobStatus, error: str | None = None) -> JobRecord | None:
        ended = await super().finish(tenant, job_id, status, error)
        if ended is not None:
            self.ended.set()
        return ended


async def running_job(store: MemoryJobStore) -> str:
    """A job its runner started (then its replica died, say)."""
    job_id = await job(store, "tts-1", ["The fox ran through the wood.", "It stopped at the river."])
    assert await store.start(TENANT, job_id) is not None
    return job_id


async def test_a_job_given_up_after_its_last_takeover_fails(redis_url: str) -> None:
    redis = connect_redis(redis_url)
    store = MemoryJobStore(ttl_s=60)
    dispatch = QueueDispatch(redis, runner(store, Engines()), JobsSettings(heartbeat_s=1))
    queue = dispatch.queue
    try:
        job_id = await running_job(store)
        lost = await taken(queue, dispatch, TENANT, job_id)  # its 20th run, whose replica stopped beating 5 s ago
        lost.status, lost.attempts, lost.touched = Status.ACTIVE, lost.retries, now() - 5000
        await redis.set(lost.id, queue.serialize(lost))
        assert await queue.sweep(lock=1) == [lost.id]
        stored = await queue.job(lost.key)
        assert stored is not None and stored.status == Status.ABORTED  # SAQ gave it up...
        record = await store.get(TENANT, job_id)
        assert record is not None and record.status == "failed"  # ... and its record says so (before: running)
        assert record.error == (
            "The job could not go on: its runner was lost, and the queue gave it up after 20 runs (runner_lost)."
        )
    finally:
        await redis.aclose()


async def test_a_job_whose_queue_entry_is_gone_fails(redis_url: str) -> None:
    redis = connect_redis(redis_url)
    store = MemoryJobStore(ttl_s=60)
    dispatch = QueueDispatch(redis, runner(store, Engines()), JobsSettings())
    queue = dispatch.queue
    try:
        job_id = await running_job(store)
        lost = await taken(queue, dispatch, TENANT, job_id)
        await redis.delete(lost.id)  # evicted, say: the queue can never run it again
        assert await queue.sweep(lock=1) == [lost.id]
        record = await store.get(TENANT, job_id)
        assert record is not None and record.status == "failed"
        assert record.error == "The job could not go on: the queue lost it (runner_lost)."
    finally:
        await redis.aclose()


async def test_a_running_job_aborted_by_another_hand_fails(redis_url: str) -> None:
    """Aborted in SAQ (its web UI, an operator's script) rather than cancelled by the API, which ends the record
    first: the worker stops the run, and the record fails."""
    redis = connect_redis(redis_url)
    store, engines = EndingStore(), Engines()
    engines.down["tts-1"] = EngineNotReadyError("tts-1", "still loading")  # its segment waits: the job runs on
    dispatch = QueueDispatch(redis, runner(store, engines), JobsSettings())
    dispatch.start()
    try:
        job_id = await job(store, "tts-1", ["The fox ran through the wood."])
        await dispatch.submit(TENANT, job_id)
        await wait_for(lambda: engines.tries["tts-1"] >= 1, what="the job running")
        running = await dispatch.queue.job(_queue_key(TENANT, job_id))
        assert running is not None
        await dispatch.queue.abort(running, "aborted by an operator")
        await asyncio.wait_for(store.ended.wait(), 10)
        record = await store.get(TENANT, job_id)
        assert record is not None and record.status == "failed"
        assert record.error == "The job could not go on: the queue aborted it (runner_lost)."
    finally:
        await dispatch.close()
        await redis.aclose()
