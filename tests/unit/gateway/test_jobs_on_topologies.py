"""Speech jobs' Redis parts on each topology (one Redis, a Sentinel-managed master, a 3-master Cluster), through the
gateway's own client (``storage.connect_redis``): the job store's scripts and the SAQ queue's (its keys under one
hash tag) keep to one slot, a queued job reaches the worker, and a cancel stops its run."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, cast

from gateway.jobs.dispatch import QueueDispatch
from gateway.jobs.records import JobRecord, now_s
from gateway.jobs.store import RedisJobStore, SpokenSegment
from gateway.settings import JobsSettings
from storage import connect_redis, sortable_id

if TYPE_CHECKING:
    from gateway.jobs.runner import JobRunner


class Runs:
    """Stands in for the job runner (what the queue hands jobs to): records each run, and holds it until released
    or cancelled."""

    def __init__(self) -> None:
        self.started: asyncio.Queue[str] = asyncio.Queue()
        self.cancelled: asyncio.Queue[str] = asyncio.Queue()
        self.release = asyncio.Event()

    async def run(self, tenant: str, job_id: str) -> None:
        await self.started.put(job_id)
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            await self.cancelled.put(job_id)
            raise


async def test_the_store_keeps_to_one_slot(any_redis_url: str) -> None:
    redis = connect_redis(any_redis_url)
    try:
        store = RedisJobStore(redis, ttl_s=60)
        record = JobRecord(sortable_id("job_"), "acme", {"model": "m", "response_format": "pcm"}, 5, 1, int(now_s()))
        assert await store.create(record, ["Hello"], quota_bytes=10**6, max_jobs=10) is None
        assert await store.start("acme", record.id) is not None
        assert await store.commit("acme", record.id, 0, SpokenSegment(b"\x00\x01" * 100, 5, 4))
        assert await store.finish("acme", record.id, "completed")
        assert await store.chunk("acme", record.id, 0) == b"\x00\x01" * 100
        assert [job.id for job in (await store.page("acme", after=None, limit=5)).data] == [record.id]
        # A creation reads the tenant's other records (by name, in its slot) to count what they hold: 200 bytes here.
        second = JobRecord(sortable_id("job_"), "acme", record.request, 5, 1, int(now_s()), reserved_bytes=1)
        refusal = await store.create(second, ["Hello"], quota_bytes=200, max_jobs=10)
        assert refusal is not None and (refusal.reason, refusal.held) == ("storage_quota", 200)
        assert await store.create(second, ["Hello"], quota_bytes=201, max_jobs=10) is None
        assert await store.delete("acme", record.id)
        assert await store.start("acme", second.id) is not None
        assert await store.commit("acme", second.id, 0, SpokenSegment(b"\x00\x01", 5, 4))
        assert await store.delete_many("acme", [record.id, second.id]) == 1  # a deleted tenant's page of jobs
        assert await store.chunk("acme", second.id, 0) is None
    finally:
        await redis.aclose()


async def test_the_queue_hands_jobs_over_and_cancels_them(any_redis_url: str) -> None:
    redis = connect_redis(any_redis_url)
    runs = Runs()
    dispatch = QueueDispatch(redis, cast("JobRunner", runs), JobsSettings(concurrency=2))
    dispatch.start()
    try:
        job_id = sortable_id("job_")
        await dispatch.submit("acme", job_id)
        assert await asyncio.wait_for(runs.started.get(), 10) == job_id
        await dispatch.cancel("acme", job_id)
        assert await asyncio.wait_for(runs.cancelled.get(), 2) == job_id  # the worker looks every 0.2 s
        runs.release.set()
        other = sortable_id("job_")
        await dispatch.submit("acme", other)
        assert await asyncio.wait_for(runs.started.get(), 10) == other
    finally:
        await dispatch.close()
        await redis.aclose()
