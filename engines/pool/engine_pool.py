"""The pool itself: :class:`EnginePool` (see the package's docstring)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import multiprocessing
import socket
import time
from collections import Counter
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from engines.base import InvalidSynthesisRequestError, cannot_clone_error
from engines.errors import EngineNotReadyError, EngineOverloadedError, SynthesisFailedError
from engines.messages import (
    BatchStarted,
    CancelJob,
    EncodeSample,
    JobChunk,
    JobEnded,
    Ping,
    Pong,
    SampleEncoded,
    StartJob,
    StopWorker,
    WorkerLoadFailed,
    WorkerReady,
)
from engines.pipe import read_message
from engines.registry import check_speaker, ready_to_fork
from engines.samples import check_sample
from engines.scheduling import SlotScheduler, expected_speech_s
from engines.status import PoolStatus
from engines.template import TEMPLATES, TemplateUnavailableError
from engines.worker import run_worker
from lifecycle import BackgroundTasks, naming

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from engines.base import EngineInfo, SynthesisRequest
    from engines.breaker import BreakerSettings
    from engines.scheduling import Grant, TenantShare
    from engines.settings import LocalEngineSettings
    from engines.status import PoolState
    from engines.template import WorkerProcess, WorkerTemplates
from engines.pool.stream import Job, LowLaneGate, SynthesisStream
from engines.pool.workers import Lane, Worker, WorkerSlots, abandon, lower_cpu_priority

__all__ = ["EnginePool"]

logger = naming.logger("pool")

# A worker that cannot load (no weights yet) is retried, for weights may appear on a mounted volume, but rarely:
# each try imports the engine again.
_MAX_RESTART_BACKOFF_S = 300.0
# Samples waiting for one worker before the next gets a 503: each costs the worker's running jobs one encoder pass.
_MAX_SAMPLES_PER_WORKER = 4


class EnginePool:
    """Worker processes for one engine, with a bounded wait queue, cancellation and self-healing."""

    def __init__(
        self,
        name: str,
        settings: LocalEngineSettings,
        *,
        worker_logging: dict[str, Any] | None = None,
        templates: WorkerTemplates = TEMPLATES,
    ) -> None:
        """``templates``: where warm workers are forked from (``settings.warm_start``; ``engines/template.py``)."""
        self.name = name
        self.settings = settings
        self._worker_logging = worker_logging
        self._templates = templates
        self._context = multiprocessing.get_context("spawn")
        self._workers: list[Worker] = []
        self._slots: SlotScheduler[Worker] = SlotScheduler(name, settings, WorkerSlots(self._workers, "main"))
        self._low_slots: SlotScheduler[Worker] | None = (
            SlotScheduler(name, settings, WorkerSlots(self._workers, "low")) if settings.low_priority_workers else None
        )
        """The ``low`` class's own workers and queue (``low_priority_workers``), or ``None``: it shares the others'."""
        self._gate = LowLaneGate()
        self._job_ids = itertools.count(1)
        self._ping_nonces = itertools.count(1)
        self._restarts = 0
        self._batch_sizes: Counter[int] = Counter()
        self._failed_starts = 0
        self._unavailable_reason: str | None = None
        self._info: EngineInfo | None = None
        self._stopped = False
        self._watchdog: asyncio.Task[None] | None = None
        self._respawns = BackgroundTasks(f"engine {name}")

    # ----------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        """Start every worker in the background: each is forked (once its template has imported the engine's modules,
        the first time) or started, then loads and warms up (see :meth:`status`)."""
        main: list[Lane] = ["main"]
        low: list[Lane] = ["low"]
        for lane in main * self.settings.workers + low * self.settings.low_priority_workers:
            self._respawns.spawn(self._spawn(lane), name=f"spawn-{self.name}")
        self._watchdog = asyncio.create_task(self._watch(), name=f"watchdog-{self.name}")

    async def wait_ready(self, timeout_s: float) -> bool:
        """Wait until at least one worker is ready or the engine is known to be unavailable."""
        deadline = time.monotonic() + timeout_s
        while self.status().state == "starting" and time.monotonic() < deadline:  # noqa: ASYNC110 - rare, at start
            await asyncio.sleep(0.05)
        return self.status().state == "ready"

    async def stop(self, timeout_s: float = 5.0) -> None:
        """Stop every worker: politely first, then by force."""
        self._stopped = True
        if self._watchdog is not None:
            self._watchdog.cancel()
        self._respawns.cancel()
        self._fail_waiters()
        for worker in self._workers:
            worker.send(StopWorker())
        deadline = time.monotonic() + timeout_s
        while any(w.process.is_alive() for w in self._workers) and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.02)
        for worker in list(self._workers):
            if worker.process.is_alive():
                worker.kill("the pool is stopping")
            self._close(worker)

    # ----------------------------------------------------------------- status
    @property
    def breaker_settings(self) -> BreakerSettings:
        return self.settings.breaker

    @property
    def info(self) -> EngineInfo | None:
        """What the engine last reported about itself; None until a worker has loaded it."""
        return self._info

    def status(self) -> PoolStatus:
        ready = [w for w in self._workers if w.state == "ready"]
        queued_by_tenant: Counter[str] = Counter()
        for scheduler in self._schedulers():
            queued_by_tenant.update(scheduler.queued_by_tenant())
        return PoolStatus(
            engine=self.name,
            kind=self.settings.kind,
            state=self._state(ready),
            reason=None if ready else self._unavailable_reason,
            workers=self.settings.workers + self.settings.low_priority_workers,
            ready_workers=len(ready),
            busy_workers=sum(1 for w in ready if w.jobs),
            active_jobs=sum(len(w.jobs) for w in self._workers),
            queued=sum(len(scheduler) for scheduler in self._schedulers()),
            restarts=self._restarts,
            # The ``low`` workers last: the first pid is a worker that serves every request but the ``low`` class.
            pids=tuple(w.pid for w in sorted(self._workers, key=lambda w: w.lane == "low") if w.pid is not None),
            batch_sizes=dict(self._batch_sizes),
            info=self._info,
            queued_by_tenant=dict(queued_by_tenant),
        )

    def _schedulers(self) -> list[SlotScheduler[Worker]]:
        return [self._slots] if self._low_slots is None else [self._slots, self._low_slots]

    def _state(self, ready: list[Worker]) -> PoolState:
        if self._stopped:
            return "stopped"
        if ready:
            return "ready"
        return "unavailable" if self._unavailable_reason is not None else "starting"

    # ----------------------------------------------------------------- synthesis
    @asynccontextmanager
    async def open_stream(
        self,
        request: SynthesisRequest,
        *,
        tenant: str = "",
        share: TenantShare | None = None,
        continuing: bool = False,
    ) -> AsyncIterator[SynthesisStream]:
        """Run ``request`` for ``tenant`` on a worker; leaving the block before the end cancels the job in the worker.

        While every worker is busy the request waits in ``tenant``'s queue, taken out in turn with other tenants'
        by ``share`` (weight, priority class, cap on its waiting requests; the default share when ``None``) and by
        its cost, the seconds of speech its text should make (corrected by what it made once it ends);
        ``continuing``: see :meth:`~engines.backend.EngineBackend.open_stream`. With ``low_priority_workers``, a
        request of the ``low`` class runs on those, and while any other is in flight the ``low`` lane pauses
        (:class:`LowLaneGate`).
        """
        low = self._low_slots is not None and share is not None and share.priority == "low"
        in_flight = self._gate.in_flight() if self._low_slots is not None and not low else contextlib.nullcontext()
        with in_flight:
            async with self._open_job(request, tenant, share, continuing, low=low) as stream:
                yield stream

    @asynccontextmanager
    async def _open_job(
        self, request: SynthesisRequest, tenant: str, share: TenantShare | None, continuing: bool, *, low: bool
    ) -> AsyncIterator[SynthesisStream]:
        slots = self._low_slots if low and self._low_slots is not None else self._slots
        cost = expected_speech_s(request.text)
        grant = await self._acquire(slots, tenant, share, cost, continuing)
        while grant.holder.state != "ready":  # it died between being handed to us and now
            grant.abandon()
            grant = await self._acquire(slots, tenant, share, cost, continuing)
        worker = grant.holder
        job = Job(next(self._job_ids), self._max_buffered_bytes(worker), grant)
        worker.reserved -= 1  # the slot handed to the tenant is its job now
        grant.start()
        if not worker.jobs:
            worker.last_progress = time.monotonic()
        worker.jobs[job.id] = job
        assert worker.info is not None
        worker.send(StartJob(job.id, request))
        try:
            yield SynthesisStream(job, worker.info, self._gate if low else None)
        finally:
            if not job.ended and job.cancelled_at is None:
                job.cancelled_at = time.monotonic()
                worker.send(CancelJob(job.id))

    async def check_speaker(self, speaker: str) -> None:
        """See :meth:`~engines.backend.EngineBackend.check_speaker`: from the settings, in the server's process."""
        check_speaker(self.settings.kind, self.settings.options, speaker)

    async def speaker_from_sample(self, pcm: bytes, sample_rate: int, transcript: str) -> str:
        """Encode a voice sample on the ready worker with the fewest samples waiting; see
        :meth:`~engines.backend.EngineBackend.speaker_from_sample`.

        Outside the scheduler's slots: one encoder pass between the steps of the jobs under way costs them little,
        and a voice should not wait behind a queue of speech. Waiting longer than ``stall_timeout_s`` for the answer
        means the worker's main thread is stuck: the worker is replaced, as for a stalled job.
        """
        worker = self._sample_worker()
        check_sample(pcm, sample_rate, transcript)
        request_id = next(self._job_ids)
        answer: asyncio.Future[SampleEncoded] = asyncio.get_running_loop().create_future()
        worker.samples[request_id] = answer
        try:
            worker.send(EncodeSample(request_id, pcm, sample_rate, transcript))
            async with asyncio.timeout(self.settings.stall_timeout_s):
                encoded = await answer
        except TimeoutError:
            worker.kill(f"no answer to a voice sample for {self.settings.stall_timeout_s:g} s")
            raise SynthesisFailedError(f"engine {self.name!r} did not encode the sample in time") from None
        finally:
            worker.samples.pop(request_id, None)
        if encoded.invalid:
            raise InvalidSynthesisRequestError(encoded.error or "invalid sample", encoded.invalid_param)
        if encoded.speaker is None:
            raise SynthesisFailedError(encoded.error or "the engine made no speaker")
        return encoded.speaker

    def _sample_worker(self) -> Worker:
        """The ready worker to encode a sample on.

        Raises:
            EngineNotReadyError, EngineOverloadedError, InvalidSynthesisRequestError (the engine cannot clone).
        """
        ready = [w for w in self._workers if w.state == "ready"]
        if not ready or self._stopped:
            status = self.status()
            raise EngineNotReadyError(self.name, status.reason or status.state)
        if self._info is None or not self._info.clones_voices:
            raise cannot_clone_error(self.name)
        worker = min(ready, key=lambda w: (w.lane == "low", len(w.samples), w.load))  # a voice is not background work
        if len(worker.samples) >= _MAX_SAMPLES_PER_WORKER:
            raise EngineOverloadedError(self.name, 1)
        return worker

    def _max_buffered_bytes(self, worker: Worker) -> int:
        rate = worker.info.sample_rate if worker.info is not None else 24000
        return int(self.settings.max_buffered_audio_s * rate * 2)

    async def _acquire(
        self, slots: SlotScheduler[Worker], tenant: str, share: TenantShare | None, cost: float, continuing: bool
    ) -> Grant[Worker]:
        status = self.status()
        if status.state == "starting" and self._info is None:
            # Loading for the first time: say so at once (a 503 with Retry-After, or the alias's next engine). A pool
            # that has served before and is replacing a worker queues the request: the worker is back in a moment.
            raise EngineNotReadyError(self.name, "still loading: no worker is ready yet")
        if status.state not in {"ready", "starting"}:
            raise EngineNotReadyError(self.name, status.reason or status.state)
        return await slots.acquire(tenant, share, cost, continuing=continuing)

    def _fail_waiters(self) -> None:
        for scheduler in self._schedulers():
            scheduler.fail_waiters(self._unavailable_reason or "the pool stopped")

    def _hand_out(self) -> None:
        for scheduler in self._schedulers():
            scheduler.hand_out()

    # ----------------------------------------------------------------- worker processes
    async def _spawn(self, lane: Lane) -> None:
        parent_socket, child_socket = socket.socketpair()  # the pipe (engines/pipe.py); the child gets a duplicate
        # In a thread: a fork waits for the template's imports the first time. Cancelled meanwhile (the pool stops),
        # the thread still finishes with the socket; the worker it started is then ended.
        starting = asyncio.get_running_loop().run_in_executor(None, self._start_process, child_socket, lane)
        try:
            process = await asyncio.shield(starting)
        except asyncio.CancelledError:
            starting.add_done_callback(lambda started: abandon(started, parent_socket, child_socket))
            raise
        except BaseException:
            parent_socket.close()
            child_socket.close()
            raise
        child_socket.close()
        reader, writer = await asyncio.open_unix_connection(sock=parent_socket)
        worker = Worker(self, process, writer, lane)
        self._workers.append(worker)
        worker.reader_task = asyncio.create_task(self._read(worker, reader), name=f"worker-{process.pid}")
        if self._stopped:  # stopped while it started
            worker.kill("the pool is stopping")

    def _start_process(self, child_socket: socket.socket, lane: Lane) -> WorkerProcess:
        """A worker process running this pool's engine on ``child_socket``, at a lower CPU priority in the ``low``
        lane (blocking: called in a thread)."""
        process = self._fork_or_start(child_socket)
        if lane == "low" and process.pid is not None:
            lower_cpu_priority(process.pid)
        return process

    def _fork_or_start(self, child_socket: socket.socket) -> WorkerProcess:
        """A worker process running this pool's engine on ``child_socket``: forked from its kind's template, warm, or
        else started cold as a fresh interpreter."""
        settings = self.settings
        # Until a worker has loaded, ask first whether one could: an engine without its weights starts cold, fails
        # fast without torch, and costs no template.
        if settings.warm_start and (self._info is not None or ready_to_fork(settings.kind, settings.options)):
            try:
                return self._templates.of(settings.kind).fork(settings.options, child_socket, self._worker_logging)
            except TemplateUnavailableError as exc:
                logger.warning("engine %s: %s; starting its worker cold", self.name, exc)
        process = self._context.Process(
            target=run_worker,
            args=(settings.kind, settings.options, child_socket, self._worker_logging),
            name=f"tts-worker-{self.name}",
            daemon=True,
        )
        process.start()
        return process

    async def _read(self, worker: Worker, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                if worker.lane == "low":
                    await self._gate.wait()  # unread, the worker's pipe fills and it pauses for the other requests
                self._on_message(worker, await read_message(reader))
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            self._on_exit(worker)  # end of file: the worker process is gone

    def _on_message(self, worker: Worker, message: object) -> None:
        worker.last_seen = time.monotonic()
        if isinstance(message, JobChunk | JobEnded):
            worker.last_progress = worker.last_seen
        if isinstance(message, JobChunk):
            job = worker.jobs.get(message.job_id)
            if job is not None and not job.on_chunk(message.pcm, message.marks):
                job.cancelled_at = time.monotonic()
                worker.send(CancelJob(job.id))
        elif isinstance(message, JobEnded):
            self._on_job_ended(worker, message)
        elif isinstance(message, SampleEncoded):
            answer = worker.samples.get(message.request_id)
            if answer is not None and not answer.done():
                answer.set_result(message)
        elif isinstance(message, BatchStarted):
            self._batch_sizes[message.size] += 1
        elif isinstance(message, Pong):
            worker.ping_sent_at = None
        elif isinstance(message, WorkerReady):
            self._on_worker_ready(worker, message.info)
        elif isinstance(message, WorkerLoadFailed):
            # Retried with backoff (weights may appear on a mounted volume); say it loudly once per reason.
            log = logger.debug if message.reason == self._unavailable_reason else logger.error
            log("engine %s failed to load: %s", self.name, message.reason)
            self._unavailable_reason = message.reason

    def _on_job_ended(self, worker: Worker, ended: JobEnded) -> None:
        job = worker.jobs.pop(ended.job_id, None)
        if job is not None:
            job.on_end(ended, worker.sample_rate)
        self._hand_out()

    def _on_worker_ready(self, worker: Worker, info: EngineInfo) -> None:
        worker.state = "ready"
        worker.info = info
        self._info = info
        self._unavailable_reason = None
        self._failed_starts = 0
        logger.info("engine %s worker pid %s ready", self.name, worker.pid)
        self._hand_out()

    def _on_exit(self, worker: Worker) -> None:
        was_ready = worker.state == "ready"
        exitcode = self._close(worker)
        reason = worker.kill_reason or f"exit code {exitcode}"
        for job in worker.jobs.values():
            job.on_end(JobEnded(job.id, error=f"the engine worker died ({reason})"), worker.sample_rate)
        worker.jobs.clear()
        for answer in worker.samples.values():
            if not answer.done():
                answer.set_result(SampleEncoded(-1, error=f"the engine worker died ({reason})"))
        if self._stopped:
            return
        log = logger.warning if was_ready or worker.kill_reason else logger.debug  # load failures: logged above
        log("engine %s worker pid %s ended: %s", self.name, worker.pid, reason)
        self._restarts += 1
        if not was_ready:
            self._failed_starts += 1
            self._unavailable_reason = self._unavailable_reason or f"worker failed to start ({reason})"
        self._schedule_respawn(0.0 if was_ready else self._backoff_s(), worker.lane)
        if self.status().state == "unavailable":
            self._fail_waiters()

    def _close(self, worker: Worker) -> int | None:
        """Forget the worker, releasing what the pool holds of it; returns its exit code (None: not known)."""
        if worker.reader_task is not None and worker.reader_task is not asyncio.current_task():
            worker.reader_task.cancel()
        worker.writer.close()
        worker.process.join(timeout=1.0)
        exitcode = worker.process.exitcode
        with contextlib.suppress(ValueError):  # still running (a stopped pool's last resort failed): leave it
            worker.process.close()
        worker.state = "dead"
        if worker in self._workers:
            self._workers.remove(worker)
        return exitcode

    def _backoff_s(self) -> float:
        return min(_MAX_RESTART_BACKOFF_S, 0.5 * 2.0 ** max(0, self._failed_starts - 1))

    def _schedule_respawn(self, delay_s: float, lane: Lane) -> None:
        async def respawn() -> None:
            await asyncio.sleep(delay_s)
            if not self._stopped:
                await self._spawn(lane)

        self._respawns.spawn(respawn(), name=f"respawn-{self.name}")

    # ----------------------------------------------------------------- watchdog
    async def _watch(self) -> None:
        period = min(0.25, self.settings.stall_timeout_s / 4)
        while True:
            await asyncio.sleep(period)
            if self.settings.warm_start:
                self._templates.of(self.settings.kind).check()  # a dead template is replaced before it is needed
            now = time.monotonic()
            for worker in list(self._workers):
                self._check(worker, now)
            for scheduler in self._schedulers():
                scheduler.tick()  # a slot kept for a tenant whose share has lapsed goes to those waiting

    def _check(self, worker: Worker, now: float) -> None:
        settings = self.settings
        if worker.state == "starting":
            if now - worker.started_at > settings.start_timeout_s:
                worker.kill(f"not ready after {settings.start_timeout_s:g} s")
            return
        for job in worker.jobs.values():
            if job.cancelled_at is not None and now - job.cancelled_at > settings.cancel_timeout_s:
                worker.kill(f"job {job.id} still running {settings.cancel_timeout_s:g} s after cancellation")
        # Progress is per worker: with batching, a job may rightly wait while the worker speaks for others.
        if worker.jobs and now - worker.last_progress > settings.stall_timeout_s:
            worker.kill(f"no progress for {settings.stall_timeout_s:g} s on {len(worker.jobs)} job(s)")
        self._check_health(worker, now)

    def _check_health(self, worker: Worker, now: float) -> None:
        interval = self.settings.health_interval_s
        if worker.ping_sent_at is not None and now - worker.ping_sent_at > interval:
            worker.kill("no answer to a health ping")
        elif worker.ping_sent_at is None and now - worker.last_seen > interval:
            worker.ping_sent_at = now
            worker.send(Ping(next(self._ping_nonces)))
