"""A job whose segment raises what no engine raises ends, in bounded time and with a clear ``error``, and no log line
quotes its text: a segment whose request is not valid fails the job at once, any other fault of the gateway's own is
tried ``segment_attempts`` times; a run that raises (its store out of reach) is taken over by the queue (a real
redis-server) after a pause, not at once, and its last takeover fails the job, or, the store still out of reach then,
a later sweep does.

Before, the runner let such an error through: SAQ took it for a replica's death and ran the job again twenty times in
0.2 s, logging each time a traceback that quoted the input (a pydantic error's ``input_value``), then left the job
``running``, with no ``error``, for good.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, cast

import redis.exceptions
from saq import Job

from engines.errors import SynthesisFailedError
from gateway.jobs.dispatch import LocalDispatch, QueueDispatch, _queue_key
from gateway.jobs.store import MemoryJobStore
from gateway.settings import JobsSettings
from storage import connect_redis, sortable_id
from tests.job_runs import TENANT, Engines, job, runner
from tests.waiting import wait_for

if TYPE_CHECKING:
    import pytest

    from gateway.jobs.records import JobRecord, JobStatus
    from gateway.jobs.runner import JobRunner

SECRET = "Quixotic marmalade sails at dawn."
"""The job's text, which no log line may hold."""


def logged(caplog: pytest.LogCaptureFixture) -> str:
    """Everything the records say: their messages, tracebacks and structured fields."""
    return caplog.text + "".join(repr(getattr(record, "record", "")) for record in caplog.records)


async def test_a_segment_whose_request_is_not_valid_fails_the_job_at_once(caplog: pytest.LogCaptureFixture) -> None:
    """A segment longer than a request may be (as a version that joined emoji runs whole stored them)."""
    store, engines = MemoryJobStore(ttl_s=60), Engines()
    job_id = await job(store, "tts-1", [SECRET + " \U0001f600" * 60_000, SECRET])
    with caplog.at_level(logging.DEBUG):
        await asyncio.wait_for(runner(store, engines).run(TENANT, job_id), 10)
    record = await store.get(TENANT, job_id)
    assert record is not None and (record.status, engines.tries.total()) == ("failed", 0)  # it never will be valid
    assert record.error == (
        "A segment could not be spoken: its request is not valid: "
        "input: string_too_long: String should have at most 100000 characters"
    )
    assert "Quixotic" not in logged(caplog)
    assert "speech job failed" in caplog.text


async def test_a_fault_of_the_gateway_is_tried_again_like_an_engines(caplog: pytest.LogCaptureFixture) -> None:
    store, engines = MemoryJobStore(ttl_s=60), Engines()
    job_id = await job(store, "tts-1", [SECRET])
    engines.down["tts-1"] = KeyError(SECRET)
    with caplog.at_level(logging.DEBUG):
        running = asyncio.create_task(runner(store, engines).run(TENANT, job_id))
        await wait_for(lambda: engines.tries["tts-1"] == 2, what="a second try")
        del engines.down["tts-1"]  # the fault has passed
        await asyncio.wait_for(running, 10)
    record = await store.get(TENANT, job_id)
    assert record is not None and (record.status, record.error, engines.tries["tts-1"]) == ("completed", None, 3)
    assert "Quixotic" not in logged(caplog)
    assert "KeyError" in logged(caplog)  # what an operator needs: the fault's type and where it was raised


async def test_a_fault_on_every_try_fails_the_job_after_segment_attempts(caplog: pytest.LogCaptureFixture) -> None:
    store, engines = MemoryJobStore(ttl_s=60), Engines()
    job_id = await job(store, "tts-1", [SECRET, SECRET])
    engines.down["tts-1"] = KeyError(SECRET)
    with caplog.at_level(logging.DEBUG):
        await asyncio.wait_for(runner(store, engines).run(TENANT, job_id), 10)  # two pauses: 0.5 s, then 1 s at most
    record = await store.get(TENANT, job_id)
    assert record is not None and (record.status, engines.tries["tts-1"]) == ("failed", 3)
    assert record.error == "A segment could not be spoken: the gateway failed on it (KeyError)"
    assert "Quixotic" not in logged(caplog)


async def test_an_engines_failure_is_logged_by_its_type_not_its_message(caplog: pytest.LogCaptureFixture) -> None:
    """An engine's message may quote the text: ChatTTS's normalizer raised "invalid literal for int() with base 10:
    '82.8'" on "82.8-2", which its worker passes on as ``f"{type}: {exc}"``. The job's ``error``, its tenant's own,
    says it; no log line does (before, each pause before a try again logged it)."""
    store, engines = MemoryJobStore(ttl_s=60), Engines()
    job_id = await job(store, "tts-1", [SECRET])
    said = f"ValueError: invalid literal for int() with base 10: '{SECRET}'"
    engines.down["tts-1"] = SynthesisFailedError(said)
    with caplog.at_level(logging.DEBUG):
        await asyncio.wait_for(runner(store, engines).run(TENANT, job_id), 10)  # two pauses: 0.5 s, then 1 s at most
    record = await store.get(TENANT, job_id)
    assert record is not None and (record.status, record.error) == ("failed", f"A segment could not be spoken: {said}")
    assert "Quixotic" not in logged(caplog)
    assert "tried again after a pause: SynthesisFailedError" in caplog.text


class BrokenStore(MemoryJobStore):
    """A store whose reads of a job's segments raise ``fault`` (a fault of the gateway's own, outside a segment)."""

    def __init__(self, fault: Exception) -> None:
        super().__init__(ttl_s=60)
        self.fault = fault
        self.ended = asyncio.Event()

    async def segments(self, tenant: str, job_id: str) -> list[str]:
        raise self.fault

    async def finish(self, tenant: str, job_id: str, status: JobStatus, error: str | None = None) -> JobRecord | None:
        self.ended.set()
        return await super().finish(tenant, job_id, status, error)


async def test_a_fault_outside_a_segment_fails_the_job(caplog: pytest.LogCaptureFixture) -> None:
    store = BrokenStore(KeyError(SECRET))
    job_id = await job(store, "tts-1", [SECRET])
    with caplog.at_level(logging.DEBUG):
        await asyncio.wait_for(runner(store, Engines()).run(TENANT, job_id), 10)
    record = await store.get(TENANT, job_id)
    assert record is not None and record.status == "failed"
    assert record.error == "The job could not go on: the gateway failed (KeyError)."
    assert "Quixotic" not in logged(caplog)


async def test_without_a_queue_a_run_that_raises_fails_its_job(caplog: pytest.LogCaptureFixture) -> None:
    """What the run hands over for a queue to resume (the store out of reach, as it takes it) has no queue here."""
    store = BrokenStore(RuntimeError(SECRET))
    job_id = await job(store, "tts-1", [SECRET])
    dispatch = LocalDispatch(runner(store, Engines()))
    with caplog.at_level(logging.DEBUG):
        await dispatch.submit(TENANT, job_id)
        await asyncio.wait_for(store.ended.wait(), 10)
    await dispatch.close()
    record = await store.get(TENANT, job_id)
    assert record is not None and record.error == "The job could not go on: the gateway failed (RuntimeError)."
    assert "Quixotic" not in logged(caplog)


class Unreachable:
    """Stands in for a runner whose store is out of reach: every run raises; what it failed is recorded."""

    def __init__(self) -> None:
        self.runs: list[str] = []
        self.failed: list[tuple[str, str]] = []

    async def run(self, _tenant: str, job_id: str) -> None:
        self.runs.append(job_id)
        raise redis.exceptions.ConnectionError(f"Error 111 connecting: {SECRET}")

    async def fail(self, _tenant: str, job_id: str, error: str) -> None:
        self.failed.append((job_id, error))


async def test_a_run_that_raises_is_taken_over_after_a_pause_and_failed_at_the_last(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    redis_client = connect_redis(redis_url)
    runs = Unreachable()
    dispatch = QueueDispatch(redis_client, cast("JobRunner", runs), JobsSettings())
    dispatch.start()
    try:
        first = sortable_id("job_")
        with caplog.at_level(logging.DEBUG):
            await dispatch.submit(TENANT, first)
            await wait_for(lambda: len(runs.runs) >= 2, timeout_s=10, what="the job taken over")
            await asyncio.sleep(1.5)
        assert len(runs.runs) <= 3  # a pause of 1 s before each takeover; before, 20 runs in 0.2 s
        assert "Quixotic" not in logged(caplog)

        last = sortable_id("job_")  # a job with two takeovers: its last run fails it instead of leaving it running
        await dispatch.queue.enqueue(Job("speak_job", kwargs={"tenant": TENANT, "job_id": last},
                                         key=_queue_key(TENANT, last), timeout=0, retries=2))  # fmt: skip
        await wait_for(lambda: [job_id for job_id, _ in runs.failed] == [last], timeout_s=15, what="the job failed")
        assert runs.runs.count(last) == 2
        assert runs.failed[0][1] == "The job could not go on: its store failed 2 times (ConnectionError)."
    finally:
        await dispatch.close()
        await redis_client.aclose()


class StillUnreachable(Unreachable):
    """A runner whose store stays out of reach for its runs and for the first ``outage`` attempts to fail a job."""

    def __init__(self, outage: int) -> None:
        super().__init__()
        self.outage = outage

    async def fail(self, tenant: str, job_id: str, error: str) -> None:
        if self.outage:
            self.outage -= 1
            raise redis.exceptions.ConnectionError(f"Error 111 connecting: {SECRET}")
        await super().fail(tenant, job_id, error)


async def test_a_job_that_cannot_be_failed_at_its_last_takeover_is_failed_by_a_later_sweep(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The last run cannot fail the job, nor can the queue when it gives the job up: its entry stays, without a
    heartbeat, and the sweep that finds it fails the job once the store is back (before, it stayed running)."""
    redis_client = connect_redis(redis_url)
    runs = StillUnreachable(outage=2)
    dispatch = QueueDispatch(redis_client, cast("JobRunner", runs), JobsSettings(heartbeat_s=1, sweep_s=1))
    dispatch.start()
    try:
        last = sortable_id("job_")
        with caplog.at_level(logging.DEBUG):
            await dispatch.queue.enqueue(Job("speak_job", kwargs={"tenant": TENANT, "job_id": last}, heartbeat=1,
                                             key=_queue_key(TENANT, last), timeout=0, retries=2))  # fmt: skip
            await wait_for(lambda: bool(runs.failed), timeout_s=20, what="the job failed")
        assert runs.failed == [
            (last, "The job could not go on: its runner was lost, and the queue gave it up after 2 runs (runner_lost).")
        ]
        assert "Quixotic" not in logged(caplog)
    finally:
        await dispatch.close()
        await redis_client.aclose()
