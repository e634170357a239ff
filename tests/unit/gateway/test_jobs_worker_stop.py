"""A replica's jobs worker stops quietly on a real redis-server: with no job running its stop logs no warning (SAQ
warned on every stop that its tasks "did not finish within the shutdown grace period": its idle loops never do by
themselves), and a job it runs goes back to the queue at once, for another replica to resume."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, cast

from saq.job import Status

from gateway.jobs.dispatch import QueueDispatch, _queue_key
from gateway.settings import JobsSettings
from storage import connect_redis, sortable_id
from tests.waiting import wait_for

if TYPE_CHECKING:
    import pytest

    from gateway.jobs.runner import JobRunner


class Endless:
    """A runner whose job speaks until it is cancelled."""

    def __init__(self) -> None:
        self.started = asyncio.Event()

    async def run(self, _tenant: str, _job_id: str) -> None:
        self.started.set()
        await asyncio.Event().wait()


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]


async def test_an_idle_worker_stops_without_a_warning(redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    redis = connect_redis(redis_url)
    dispatch = QueueDispatch(redis, cast("JobRunner", Endless()), JobsSettings())
    try:
        dispatch.start()
        await wait_for(lambda: dispatch._worker is not None and bool(dispatch._worker.tasks))
        await asyncio.sleep(0.2)  # its loops wait in their dequeue and sleeps now
        with caplog.at_level(logging.WARNING):
            await asyncio.wait_for(dispatch.close(), 10)
        assert _warnings(caplog) == []
    finally:
        await redis.aclose()


async def test_a_running_job_goes_back_to_the_queue_at_stop(redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    redis = connect_redis(redis_url)
    runner = Endless()
    dispatch = QueueDispatch(redis, cast("JobRunner", runner), JobsSettings())
    try:
        dispatch.start()
        job_id = sortable_id("job_")
        await dispatch.submit("acme", job_id)
        await asyncio.wait_for(runner.started.wait(), 10)
        with caplog.at_level(logging.WARNING):
            await asyncio.wait_for(dispatch.close(), 10)
        assert _warnings(caplog) == []
        job = await dispatch.queue.job(_queue_key("acme", job_id))
        assert job is not None and job.status == Status.QUEUED
    finally:
        await redis.aclose()
