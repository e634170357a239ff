"""The jobs' queue through a Redis outage: its workers neither spin a core nor log a traceback a second, and take
jobs again once Redis is back."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, cast

from gateway.jobs.dispatch import QueueDispatch
from gateway.settings import JobsSettings
from storage import connect_redis, sortable_id

if TYPE_CHECKING:
    import pytest

    from gateway.jobs.runner import JobRunner
    from tests.redis_server import RedisServer


class Runs:
    """Stands in for the job runner: records the jobs the queue hands it."""

    def __init__(self) -> None:
        self.started: asyncio.Queue[str] = asyncio.Queue()

    async def run(self, tenant: str, job_id: str) -> None:
        await self.started.put(job_id)


async def test_workers_wait_out_an_outage_quietly(outage_redis: RedisServer, caplog: pytest.LogCaptureFixture) -> None:
    redis = connect_redis(outage_redis.url)
    runs = Runs()
    dispatch = QueueDispatch(redis, cast("JobRunner", runs), JobsSettings(concurrency=4, sweep_s=1))
    dispatch.start()
    try:
        await asyncio.sleep(0.5)
        outage_redis.stop()
        cpu, wall = time.process_time(), time.perf_counter()
        with caplog.at_level(logging.WARNING):
            await asyncio.sleep(2.0)
        share = (time.process_time() - cpu) / (time.perf_counter() - wall)
        assert share < 0.25, f"the workers used {share:.0%} of a core while Redis was down"
        assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records]
        outage_redis.start()
        job_id = sortable_id("job_")
        await dispatch.submit("acme", job_id)
        assert await asyncio.wait_for(runs.started.get(), 10) == job_id
    finally:
        await dispatch.close()
        await redis.aclose()
