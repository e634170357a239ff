"""The jobs' sweep on a real redis-server: a job a live worker has just taken is not swept as lost while its worker
marks it active, and a lost one is still queued again."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, cast

from saq.job import Status

from gateway.jobs.dispatch import QueueDispatch, _queue_key
from gateway.settings import JobsSettings
from storage import connect_redis, sortable_id

if TYPE_CHECKING:
    from saq import Job, Queue

    from gateway.jobs.runner import JobRunner


async def taken(queue: Queue, dispatch: QueueDispatch, tenant: str) -> Job:
    """A job submitted and moved to the active list, as a worker's take does before it marks the job active."""
    job_id = sortable_id("job_")
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
