"""Who speaks a job, and where: a durable queue on the shared Redis, or this process's own tasks without Redis.

With Redis the queue is SAQ's (``saq``): a job waits in a Redis list until a worker on some replica (``jobs.run``)
takes it; while it runs, the worker beats (``jobs.heartbeat_s``); a job whose replica stopped beating (SIGKILL, a
node gone) is swept by another replica's worker (``jobs.sweep_s``) and queued again, and the next runner resumes it
from its last committed segment (``gateway/jobs/runner.py``). Cancelling is SAQ's abort, which the worker running the
job notices within ``_ABORT_CHECK_S``. SAQ was chosen over arq because it takes the process's own Redis client (one
pool, the timeout policy, Sentinel's failover handling: ``storage/redis.py``) and has heartbeats, where arq builds its
own connection and notices a dead worker only when the job's whole timeout (hours, for a book) has passed. Its keys
all carry one hash tag (the queue's name ``{tts-jobs}``), so its scripts and transactions keep to one slot of a
Cluster.

Without Redis a job is an asyncio task of the process that took it: not durable (a restart loses it, and another
replica never sees it), documented in ``docs/jobs.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any, Protocol, cast

from saq import Job, Queue, Worker
from saq.job import TERMINAL_STATUSES, Status
from saq.queue.redis import RedisQueue

from lifecycle import BackgroundTasks
from storage import STORAGE_ERRORS

if TYPE_CHECKING:
    from collections.abc import Iterable

    from saq.types import ListenCallback, PartialTimersDict, VersionTuple, WorkerInfo

    from gateway.jobs.runner import JobRunner
    from gateway.settings import JobsSettings
    from storage import RedisClient

__all__ = ["JobDispatch", "LocalDispatch", "QueueDispatch"]

logger = logging.getLogger("tts_gateway.jobs")

QUEUE_NAME = "{tts-jobs}"
_FUNCTION = "speak_job"
_ABORT_CHECK_S = 0.2
"""How often a worker looks whether one of its jobs was cancelled: the engine work stops within about this long."""
_DEQUEUE_WAIT_S = 0.5
"""How long a worker's blocking take from the queue waits: below the Redis client's socket timeout (1 s)."""
_OUTAGE_PAUSE_S = 1.0
"""How long a worker waits before it tries the queue again when Redis is out of reach."""
_TAKEOVERS = 20
"""How often one job may be taken over (its replica died or shut down) before it is given up."""


def _queue_key(job_id: str) -> str:
    """The key of a job in SAQ's queue: its id, under the queue's hash tag, which SAQ's abort key (``saq:abort:`` and
    the key) would otherwise lack: on a Cluster its enqueue script refused the keys (all must share a slot)."""
    return f"{QUEUE_NAME}{job_id}"


class JobDispatch(Protocol):
    """Hands jobs to whoever speaks them."""

    async def submit(self, tenant: str, job_id: str) -> None: ...

    async def cancel(self, tenant: str, job_id: str) -> None:
        """Stop the job's engine work now, wherever it runs (its record was marked cancelled already)."""
        ...

    async def close(self) -> None: ...


class LocalDispatch:
    """Jobs as tasks of this process, ``concurrency`` of them speaking at once."""

    def __init__(self, runner: JobRunner, concurrency: int) -> None:
        self._runner = runner
        self._slots = asyncio.Semaphore(concurrency)
        self._tasks = BackgroundTasks("speech jobs")
        self._running: dict[str, asyncio.Task[None]] = {}

    async def submit(self, tenant: str, job_id: str) -> None:
        task = self._tasks.spawn(self._run(tenant, job_id))
        self._running[job_id] = task
        task.add_done_callback(lambda _: self._running.pop(job_id, None))

    async def _run(self, tenant: str, job_id: str) -> None:
        async with self._slots:
            await self._runner.run(tenant, job_id)

    async def cancel(self, tenant: str, job_id: str) -> None:
        task = self._running.get(job_id)
        if task is not None:
            task.cancel()
            await asyncio.wait([task])

    async def close(self) -> None:
        await self._tasks.close()


class _Queue(RedisQueue):
    """SAQ's Redis queue on the process's client, without what that client cannot do.

    - ``listen`` polls the jobs instead of subscribing: SAQ's subscriber blocks on a read with no timeout, which the
      client's 1 s socket timeout would break every second; only the sweep listens (for a swept job's abort).
    - ``version`` is known rather than read with ``INFO`` (an ACL user may not run it; on a Cluster it answers per
      node): the gateway needs Redis 6.2 or newer, whose ``BLMOVE`` the queue uses.
    - ``abort`` announces outside its transaction (a Cluster's pipeline refuses ``PUBLISH``).
    - ``disconnect`` leaves the client open: the composition root owns and closes it.
    - Through a Redis outage a worker pauses between takes, and its upkeep stays quiet.
    """

    async def version(self) -> VersionTuple:
        return (6, 2, 0)

    async def dequeue(self, timeout: float = 0.0, poll_interval: float = 0.0) -> Job | None:  # noqa: ASYNC109
        """SAQ's take, pausing when Redis is out of reach: SAQ's worker asks again at once after a failed take, a
        loop that spun a core for as long as Redis was down."""
        try:
            return await super().dequeue(timeout, poll_interval)
        except STORAGE_ERRORS as exc:
            logger.debug("the jobs' queue is out of reach: %r", exc)
            await asyncio.sleep(_OUTAGE_PAUSE_S)
            return None

    async def schedule(self, lock: int = 1) -> list[str]:
        """SAQ's upkeep, quiet through an outage (its worker logs a traceback for every failure, every second)."""
        try:
            return await super().schedule(lock)
        except STORAGE_ERRORS:
            return []

    async def write_worker_info(self, worker_id: str, info: WorkerInfo, ttl: int) -> None:
        with contextlib.suppress(*STORAGE_ERRORS):
            await super().write_worker_info(worker_id, info, ttl)

    async def listen(
        self,
        job_keys: Iterable[str],
        callback: ListenCallback,
        timeout: float | None = 10,  # noqa: ASYNC109 - SAQ's signature
        poll_interval: float = 0.5,
    ) -> None:
        keys = list(job_keys)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout if timeout else None
        while deadline is None or loop.time() < deadline:
            for job in await self.jobs(keys):
                if job is not None and await _called(callback, job.key, job.status):
                    return
            await asyncio.sleep(_ABORT_CHECK_S)
        raise TimeoutError

    async def sweep(self, lock: int = 60, abort: float = 5.0) -> list[str]:
        try:
            return await super().sweep(lock, abort=1.0)  # a swept job's worker is gone: waiting for it is moot
        except STORAGE_ERRORS:
            return []

    async def abort(self, job: Job, error: str, ttl: float = 5) -> None:
        """SAQ's abort, with its announcement sent after its transaction rather than in it: redis-py's Cluster
        pipeline refuses ``PUBLISH``. Nothing here subscribes (``listen`` polls); it is kept for SAQ's other users."""
        async with self._op_sem:
            job.status = Status.ABORTING
            job.error = error
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.lrem(self._queued, 0, job.id)
                pipe.zrem(self._incomplete, job.id)
                pipe.set(job.id, self.serialize(job))
                pipe.set(job.abort_id, error, ex=max(1, round(ttl)))
                dequeued, *_ = await pipe.execute()
            await self.notify(job)
            if dequeued:
                await self.finish(job, Status.ABORTED, error=error)
                await self.redis.delete(job.abort_id)
            else:
                await self.redis.lrem(self._active, 0, job.id)

    async def disconnect(self) -> None:
        return None


async def _called(callback: ListenCallback, key: str, status: Any) -> bool:
    answer = callback(key, status)
    return bool(await answer if asyncio.iscoroutine(answer) else answer)


class _Worker(Worker):  # type: ignore[type-arg]  # SAQ's context type: the default dict
    """SAQ's worker inside the gateway's process: uvicorn handles the signals, the app's lifespan stops the worker."""

    SIGNALS = []  # noqa: RUF012 - SAQ's class attribute


class QueueDispatch:
    """Jobs in SAQ's queue on the shared Redis; this replica runs a worker unless ``jobs.run`` is off."""

    def __init__(self, redis: RedisClient, runner: JobRunner, settings: JobsSettings) -> None:
        self._runner = runner
        self._settings = settings
        self.queue: Queue = _Queue(cast("Any", redis), name=QUEUE_NAME)
        self._worker: _Worker | None = None
        self._tasks = BackgroundTasks("the speech jobs' worker")

    def start(self) -> None:
        """Start taking jobs (when this replica runs them)."""
        if not self._settings.run:
            return
        timers = cast("PartialTimersDict", {"abort": _ABORT_CHECK_S, "sweep": self._settings.sweep_s})
        self._worker = _Worker(
            self.queue,
            functions=[(_FUNCTION, self._speak_job)],
            concurrency=self._settings.concurrency,
            timers=timers,
            dequeue_timeout=_DEQUEUE_WAIT_S,
        )
        self._tasks.spawn(self._worker.start())

    async def submit(self, tenant: str, job_id: str) -> None:
        job = Job(
            _FUNCTION,
            kwargs={"tenant": tenant, "job_id": job_id},
            key=_queue_key(job_id),
            timeout=0,  # a book takes hours: the heartbeat, not a timeout, tells a dead runner
            heartbeat=self._settings.heartbeat_s,
            retries=_TAKEOVERS,
            ttl=self._settings.ttl_s,
        )
        await self.queue.enqueue(job)

    async def cancel(self, tenant: str, job_id: str) -> None:
        job = await self.queue.job(_queue_key(job_id))
        if job is not None and job.status not in TERMINAL_STATUSES:
            await self.queue.abort(job, "cancelled")

    async def close(self) -> None:
        """Stop the worker: the jobs it runs go back to the queue, and another replica resumes them."""
        if self._worker is not None:
            await self._worker.stop()
        await self._tasks.close()

    async def _speak_job(self, ctx: dict[str, Any], *, tenant: str, job_id: str) -> None:
        job: Job = ctx["job"]
        beating = asyncio.create_task(self._beat(job))
        try:
            await self._runner.run(tenant, job_id)
        finally:
            beating.cancel()

    async def _beat(self, job: Job) -> None:
        """Tell the queue the job's runner lives, three times per ``heartbeat_s``."""
        while True:
            await asyncio.sleep(self._settings.heartbeat_s / 3)
            try:
                await job.update()
            except Exception as exc:  # Redis out of reach: the next beat tries again
                logger.warning("a speech job's heartbeat failed: %r", exc)
