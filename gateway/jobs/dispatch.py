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

Tenants take turns. A replica holds up to ``jobs.max_in_progress`` jobs, which speak one segment per turn at its
``jobs.concurrency`` slots, tenant by tenant (``gateway/jobs/turns.py``). It takes jobs from the queue fairly rather
than first come, first served (``_TAKE_LUA``): the waiting job of the tenant with the fewest jobs running on all
replicas goes first; and once it holds as many jobs as it has slots, it takes only jobs of tenants it holds none of,
so that a newcomer's job starts within a segment while a flood's other jobs wait for (or go to) other replicas.

A replica takes jobs only once its engines can speak (``engines_ready``: what ``/readyz`` requires): a job handed back
by a replica that stopped, or queued while this one starts (a rolling update), waits in the queue meanwhile, for
another replica or for this one once it is ready.

Whatever way SAQ ends a job without its runner having ended it (given up after ``_TAKEOVERS`` takeovers, its run
raising on its last, aborted by hand, its entry gone), the replica that notices fails the job's record
(``runner_lost``): before, SAQ's entry ended and the record stayed ``running`` for ever.

Without Redis a job is an asyncio task of the process that took it: not durable (a restart loses it, and another
replica never sees it), documented in ``docs/jobs.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, cast

from saq import Job, Queue, Worker
from saq.job import TERMINAL_STATUSES, Status
from saq.queue.redis import RedisQueue

from gateway.jobs.runner import fault
from lifecycle import BackgroundTasks, naming
from storage import STORAGE_ERRORS

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable

    from redis.commands.core import AsyncScript
    from saq.types import ListenCallback, PartialTimersDict, VersionTuple, WorkerInfo

    from gateway.jobs.runner import JobRunner
    from gateway.settings import JobsSettings
    from storage import RedisClient

    Settle: TypeAlias = Callable[[str, str, str], Awaitable[None]]
    """Fail a job's record (tenant, job id, error) if it is still active: :meth:`JobRunner.fail`."""

__all__ = ["JobDispatch", "LocalDispatch", "QueueDispatch", "TakePolicy"]

logger = naming.logger("jobs")

QUEUE_NAME = "{tts-jobs}"
_FUNCTION = "speak_job"
_ABORT_CHECK_S = 0.2
"""How often a worker looks whether one of its jobs was cancelled: the engine work stops within about this long."""
_DEQUEUE_WAIT_S = 0.5
"""How long a worker's blocking take from the queue waits: below the Redis client's socket timeout (1 s)."""
_OUTAGE_PAUSE_S = 1.0
"""How long a worker waits before it tries the queue again when Redis is out of reach."""
_TAKEOVERS = 20
"""How often one job may be taken over (its replica died or shut down, or its run could not reach the store) before it
is given up."""
_HAND_OVER_PAUSE_S = 1.0
"""How long a run that could not reach the store waits before the queue takes its job over: a store back at once
resumes it, one still out of reach is not asked again and again."""
_TAKE_POLL_S = 0.2
"""How often a replica with room looks for a job it may take (one look at a time per replica)."""
_TAKE_LOOKAHEAD = 2000
"""How many of the oldest queued jobs a take chooses among (beyond them, the queue is first come, first served)."""
_SETTLE_S = 1.0
"""How long a take waits for the job taken before it to start running here (and be counted) before it looks again."""
_TAKEN_GRACE_S = 2.0
"""How long a job in the active list may stay unmarked (taken; its worker marks it active next) before it is swept."""
_READY_POLL_S = 0.2
"""How often a replica whose engines are not ready yet looks again before it starts taking jobs."""
_GIVEN_UP = frozenset({Status.FAILED, Status.ABORTED})
"""How SAQ ends a job that its runner did not end (a run that ends the job returns, and SAQ completes it)."""

# Moves the fairest queued job a replica may take to the active list, as SAQ's take (BLMOVE) does with the first:
# the oldest of the tenant with the fewest active jobs (on all replicas), among those this replica may take: any when
# it has room to speak at once (ARGV[1] is 1), else only tenants it holds no job of (ARGV[3..]). A job's tenant is in
# its key (after its id's ``@``). KEYS: queued, active. ARGV[2]: how many queued jobs to look at. Returns the job's id.
_TAKE_LUA = """
local queued = redis.call('LRANGE', KEYS[1], 0, tonumber(ARGV[2]) - 1)
if #queued == 0 then return false end
local here, active = {}, {}
for i = 3, #ARGV do here[ARGV[i]] = true end
for _, id in ipairs(redis.call('LRANGE', KEYS[2], 0, -1)) do
  local tenant = string.match(id, '@(.*)$') or ''
  active[tenant] = (active[tenant] or 0) + 1
end
local best, fewest
for _, id in ipairs(queued) do
  local tenant = string.match(id, '@(.*)$') or ''
  if ARGV[1] == '1' or not here[tenant] then
    local n = active[tenant] or 0
    if fewest == nil or n < fewest then best, fewest = id, n end
    if n == 0 then break end
  end
end
if not best then return false end
redis.call('LREM', KEYS[1], 1, best)
redis.call('RPUSH', KEYS[2], best)
return best
"""

# SAQ's sweep lock and listing: the active list's job ids, unless a replica swept it within the last ARGV[1] seconds.
# KEYS: the sweep lock, active.
_SWEEP_LUA = """
if redis.call('EXISTS', KEYS[1]) == 1 then return {} end
redis.call('SETEX', KEYS[1], ARGV[1], 1)
return redis.call('LRANGE', KEYS[2], 0, -1)
"""


def _queue_key(tenant: str, job_id: str) -> str:
    """The key of a job in SAQ's queue: its id and its tenant (which a take chooses by), under the queue's hash tag,
    which SAQ's abort key (``saq:abort:`` and the key) would otherwise lack: on a Cluster its enqueue script refused
    the keys (all must share a slot)."""
    return f"{QUEUE_NAME}{job_id}@{tenant}"


def _job_of(queued_id: str) -> tuple[str, str] | None:
    """The tenant and the job of an id in SAQ's lists (which ends with :func:`_queue_key`); ``None`` for another."""
    job_id, at, tenant = queued_id.rpartition(QUEUE_NAME)[2].partition("@")
    return (tenant, job_id) if at and job_id else None


def _runner_lost(why: str) -> str:
    """The ``error`` of a job that SAQ ended without its runner."""
    return f"The job could not go on: {why} (runner_lost)."


def _why_given_up(job: Job, status: Status) -> str:
    if status == Status.FAILED:
        return f"its run failed, and the queue gave it up after {job.attempts} runs"
    return "the queue aborted it"


class _HandedOverError(Exception):
    """A job's run could not settle it (its store out of reach): the queue takes it over, as after a replica's death.
    Raised in place of the run's error, whose text SAQ would log and store with the job."""


class TakePolicy(Protocol):
    """What a replica may take from the queue now (``_TAKE_LUA``)."""

    def may_take(self) -> tuple[bool, list[str]]:
        """Whether it has room to speak a job at once, and the tenants it holds jobs of."""
        ...

    def taken(self) -> None:
        """A job was taken: it is counted once it runs."""
        ...

    async def settle(self) -> None:
        """Wait (briefly) until the jobs taken run, so that the next take counts them."""
        ...


class JobDispatch(Protocol):
    """Hands jobs to whoever speaks them."""

    async def submit(self, tenant: str, job_id: str) -> None: ...

    async def cancel(self, tenant: str, job_id: str) -> None:
        """Stop the job's engine work now, wherever it runs (its record was marked cancelled already)."""
        ...

    async def close(self) -> None: ...


class LocalDispatch:
    """Jobs as tasks of this process, each waiting for its tenant's turns at the runner's slots."""

    def __init__(self, runner: JobRunner) -> None:
        self._runner = runner
        self._tasks = BackgroundTasks("speech jobs")
        self._running: dict[str, asyncio.Task[None]] = {}

    async def submit(self, tenant: str, job_id: str) -> None:
        task = self._tasks.spawn(self._run(tenant, job_id))
        self._running[job_id] = task
        task.add_done_callback(lambda _: self._running.pop(job_id, None))

    async def _run(self, tenant: str, job_id: str) -> None:
        """The job's run; one that raised fails its job (no queue takes it over here: it stayed ``running``)."""
        try:
            await self._runner.run(tenant, job_id)
        except Exception as exc:
            await self._runner.fail_for(tenant, job_id, exc)

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
    - A take is fair (``_TAKE_LUA``) rather than the queue's first job, and one take at a time per replica: its idle
      workers do not each poll Redis.
    """

    def __init__(self, redis: Any, policy: TakePolicy, settle: Settle) -> None:
        super().__init__(redis, name=QUEUE_NAME)
        self._policy = policy
        self._settle = settle
        self._take: AsyncScript = redis.register_script(_TAKE_LUA)
        self._sweep_list: AsyncScript = redis.register_script(_SWEEP_LUA)
        self._taking = asyncio.Lock()

    async def version(self) -> VersionTuple:
        return (6, 2, 0)

    async def dequeue(self, timeout: float = 0.0, poll_interval: float = 0.0) -> Job | None:  # noqa: ASYNC109
        """SAQ's take, pausing when Redis is out of reach: SAQ's worker asks again at once after a failed take, a
        loop that spun a core for as long as Redis was down."""
        async with self._taking:
            try:
                job_id = await self._take_fairly(timeout)
                return None if job_id is None else await self._get_job_by_id(job_id)
            except STORAGE_ERRORS as exc:
                logger.debug("the jobs' queue is out of reach: %r", exc)
                await asyncio.sleep(_OUTAGE_PAUSE_S)
                return None

    async def _take_fairly(self, timeout: float) -> bytes | None:  # noqa: ASYNC109 - SAQ's
        """The id of the job taken (moved to the active list), looking every ``_TAKE_POLL_S`` for ``timeout``."""
        await self._policy.settle()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            room, tenants = self._policy.may_take()
            args: list[str | int] = [int(room), _TAKE_LOOKAHEAD, *tenants]
            job_id = cast("bytes | None", await self._take(keys=[self._queued, self._active], args=args))
            if job_id is not None:
                self._policy.taken()
                return job_id
            if loop.time() >= deadline:
                return None
            await asyncio.sleep(min(_TAKE_POLL_S, max(0.0, deadline - loop.time())))

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
        """SAQ's sweep of the active list (one replica per ``lock`` seconds), except that a job taken but not yet
        marked active gets ``_TAKEN_GRACE_S`` to become so: SAQ's swept it at once as lost, aborting and queuing
        again a job a live worker had just taken (it restarted its segment)."""
        try:
            listed = await self._listed_once_per(lock)
            if any(job is not None and job.status == Status.QUEUED for _, job in listed):
                await asyncio.sleep(_TAKEN_GRACE_S)
                listed = [(job_id, await self._again_if_queued(job_id, job)) for job_id, job in listed]
            return [job_id for job_id, job in listed if await self._swept(job_id, job)]
        except STORAGE_ERRORS:
            return []

    async def _listed_once_per(self, lock: int) -> list[tuple[str, Job | None]]:
        """The active list's jobs, if no replica swept it in the last ``lock`` seconds (SAQ's lock key)."""
        job_ids = cast("list[bytes]", await self._sweep_list(keys=[self._sweep, self._active], args=[lock]))
        if not job_ids:
            return []
        jobs = await self.redis.mget(job_ids)
        return [(job_id.decode(), self.deserialize(data)) for job_id, data in zip(job_ids, jobs, strict=True)]

    async def _again_if_queued(self, job_id: str, job: Job | None) -> Job | None:
        return await self._get_job_by_id(job_id) if job is not None and job.status == Status.QUEUED else job

    async def _swept(self, job_id: str, job: Job | None) -> bool:
        """Sweep one listed job if it is lost: its record gone, or not running (an ended one has left the list in
        the transaction that ended it), or its worker's heartbeat stopped; then queued again or given up. A job given
        up fails first (its record settled, or it stays listed for the next sweep: an aborted entry leaves the list)."""
        if job is None:
            owner = _job_of(job_id)
            if owner is not None and not await self._settled(*owner, "the queue lost it"):
                return False
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.lrem(self._active, 0, job_id)
                pipe.zrem(self._incomplete, job_id)
                await pipe.execute()
            logger.info("swept the missing job %s", job_id)
            return True
        if job.status in TERMINAL_STATUSES or (job.status == Status.ACTIVE and not job.stuck):
            return False
        logger.info("swept the job %s (%s)", job_id, job.status)
        lost = f"its runner was lost, and the queue gave it up after {job.attempts} runs"
        if not job.retryable and not await self._settled_job(job, lost):
            return False
        await self.abort(job, error=self.swept_error_message)
        with contextlib.suppress(TimeoutError):
            await job.refresh(1.0)  # a swept job's worker is gone: waiting for it longer is moot
        if job.retryable:
            await self.retry(job, error=self.swept_error_message)
        else:
            await self.finish(job, Status.ABORTED, error=self.swept_error_message)
        return True

    async def finish(
        self, job: Job, status: Status, *, result: Any = None, error: str | None = None, **kwargs: Any
    ) -> None:
        """SAQ's end of a job, failing its record first when SAQ ends it without its runner (its run raised on its last
        takeover, or it was aborted by another hand than a cancel's, which ended the record already): given up
        without an end, the record stayed ``running`` for ever. The sweep settles those it gives up before it
        aborts them (``_swept``). A record that cannot be settled now leaves the entry as it is: listed, and without a
        heartbeat, it is swept, and settled then."""
        given_up = status in _GIVEN_UP and error != self.swept_error_message
        if given_up and not await self._settled_job(job, _why_given_up(job, status)):
            return
        await super().finish(job, status, result=result, error=error, **kwargs)

    async def _settled_job(self, job: Job, why: str) -> bool:
        kwargs = job.kwargs or {}
        if job.function != _FUNCTION:
            return True
        return await self._settled(kwargs["tenant"], kwargs["job_id"], why)

    async def _settled(self, tenant: str, job_id: str, why: str) -> bool:
        """Fail the job's record, if it is still active, as the queue ended it without its runner; ``False`` when
        the store could not be asked (a later sweep tries again)."""
        try:
            await self._settle(tenant, job_id, _runner_lost(why))
        except Exception as exc:  # the store, or the tenants' store, out of reach
            extra = {"record": {"job_id": job_id, "tenant": tenant, "fault": fault(exc)}}
            logger.warning("a speech job the queue gave up could not be failed yet", extra=extra)
            return False
        return True

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

    async def stop(self) -> None:
        """Cancel the worker's loops before SAQ's stop: it gives them no grace here (a job goes back to the queue at
        once) and warned on every stop that they "did not finish within the shutdown grace period", which idle loops
        never do by themselves; its warning is kept for a task that will not end when cancelled."""
        self.event.set()
        loops = set(self.tasks)
        for loop in loops:
            loop.cancel()
        if loops:
            _, self.tasks = await asyncio.wait(loops, timeout=self._cancellation_hard_deadline_s)
        await super().stop()


class QueueDispatch:
    """Jobs in SAQ's queue on the shared Redis; this replica runs a worker unless ``jobs.run`` is off."""

    def __init__(
        self,
        redis: RedisClient,
        runner: JobRunner,
        settings: JobsSettings,
        *,
        engines_ready: Callable[[], bool] = lambda: True,
    ) -> None:
        """``engines_ready``: whether this replica's engines can speak now; its worker starts taking jobs once they
        can."""
        self._runner = runner
        self._settings = settings
        self._engines_ready = engines_ready
        self.queue: Queue = _Queue(redis, self, self._given_up)
        self._worker: _Worker | None = None
        self._tasks = BackgroundTasks("the speech jobs' worker")
        self._held: Counter[str] = Counter()
        """The jobs this replica runs, by tenant."""
        self._unsettled = 0
        """Jobs taken that do not run yet."""
        self._ran = asyncio.Event()

    def start(self) -> None:
        """Start taking jobs (when this replica runs them) once the engines are ready."""
        if self._settings.run:
            self._tasks.spawn(self._work_once_ready())

    async def _work_once_ready(self) -> None:
        """Wait until the engines can speak, then run the worker: a job taken earlier met engines still loading,
        the moment after a restart (its segments would wait for them, holding a place this replica cannot use)."""
        if not self._engines_ready():
            logger.info("the speech jobs' worker starts once the engines are ready")
            while not self._engines_ready():  # noqa: ASYNC110 - a readiness to poll, no event to wait for
                await asyncio.sleep(_READY_POLL_S)
        timers = cast("PartialTimersDict", {"abort": _ABORT_CHECK_S, "sweep": self._settings.sweep_s})
        self._worker = _Worker(
            self.queue,
            functions=[(_FUNCTION, self._speak_job)],
            concurrency=max(self._settings.max_in_progress, self._settings.concurrency),
            timers=timers,
            dequeue_timeout=_DEQUEUE_WAIT_S,
        )
        await self._worker.start()

    async def submit(self, tenant: str, job_id: str) -> None:
        job = Job(
            _FUNCTION,
            kwargs={"tenant": tenant, "job_id": job_id},
            key=_queue_key(tenant, job_id),
            timeout=0,  # a book takes hours: the heartbeat, not a timeout, tells a dead runner
            heartbeat=self._settings.heartbeat_s,
            retries=_TAKEOVERS,
            ttl=self._settings.ttl_s,
        )
        await self.queue.enqueue(job)

    async def cancel(self, tenant: str, job_id: str) -> None:
        job = await self.queue.job(_queue_key(tenant, job_id))
        if job is not None and job.status not in TERMINAL_STATUSES:
            await self.queue.abort(job, "cancelled")

    async def close(self) -> None:
        """Stop the worker: the jobs it runs go back to the queue, and another replica resumes them."""
        if self._worker is not None:
            await self._worker.stop()
        await self._tasks.close()

    def may_take(self) -> tuple[bool, list[str]]:
        return sum(self._held.values()) + self._unsettled < self._settings.concurrency, list(self._held)

    def taken(self) -> None:
        self._unsettled += 1

    async def settle(self) -> None:
        """Wait until the jobs taken run here (or ``_SETTLE_S``: a take that failed before its run never will)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_SETTLE_S):
                while self._unsettled:
                    self._ran.clear()
                    await self._ran.wait()
        self._unsettled = 0

    async def _speak_job(self, ctx: dict[str, Any], *, tenant: str, job_id: str) -> None:
        job: Job = ctx["job"]
        self._unsettled = max(0, self._unsettled - 1)
        self._held[tenant] += 1
        self._ran.set()
        beating = asyncio.create_task(self._beat(job))
        try:
            await self._runner.run(tenant, job_id)
        except Exception as exc:  # the run settles every failure it can: what is left, it could not (the store)
            await self._hand_over(job, tenant, job_id, exc)
        finally:
            beating.cancel()
            self._held[tenant] -= 1
            if not self._held[tenant]:
                del self._held[tenant]

    async def _hand_over(self, job: Job, tenant: str, job_id: str, exc: Exception) -> None:
        """A run that raised (its store out of reach) hands its job to the queue after a pause, to resume it from its
        last committed segment, as after its replica's death; on the last takeover the job fails instead: given up
        without an end, it stayed ``running`` for ever.

        Raises:
            _HandedOverError: the queue takes the job over (SAQ retries a job whose function raised), or, on the last
                takeover, the store is still out of reach: the queue fails the job, settling its record then or at a
                later sweep (``_Queue.finish``).
        """
        extra = {"record": {"job_id": job_id, "tenant": tenant, "fault": fault(exc), "taken_over": job.retryable}}
        logger.warning("a speech job's run could not reach its store", extra=extra)
        if job.retryable:
            await asyncio.sleep(_HAND_OVER_PAUSE_S)
            raise _HandedOverError(type(exc).__name__) from None
        error = f"The job could not go on: its store failed {job.attempts} times ({type(exc).__name__})."
        try:
            await self._runner.fail(tenant, job_id, error)
        except Exception as still:  # named by its type: SAQ logs and stores the text of what its function raises
            raise _HandedOverError(type(still).__name__) from None

    async def _given_up(self, tenant: str, job_id: str, error: str) -> None:
        """The queue ended the job without its runner: fail its record, if it is still active."""
        await self._runner.fail(tenant, job_id, error)

    async def _beat(self, job: Job) -> None:
        """Tell the queue the job's runner lives, three times per ``heartbeat_s``."""
        while True:
            await asyncio.sleep(self._settings.heartbeat_s / 3)
            try:
                await job.update()
            except Exception as exc:  # Redis out of reach: the next beat tries again
                logger.warning("a speech job's heartbeat failed: %r", exc)
