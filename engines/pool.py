"""A pool of engine worker processes, driven from the server's event loop.

Each worker is a process holding one engine (``engines.worker``). The pool hands jobs to workers with free slots,
keeps bounded per-tenant queues of waiting requests, served fairly across tenants (``engines.scheduler``; beyond
the bounds: :class:`EngineOverloadedError`), streams PCM back as the worker produces it, cancels jobs whose
consumer went away, and replaces workers that die, hang or stop answering.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import multiprocessing
import pickle
import socket
import struct
import time
from collections import Counter
from contextlib import asynccontextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any, Literal

from engines.base import InvalidSynthesisRequestError
from engines.errors import ConsumerTooSlowError, EngineNotReadyError, EngineOverloadedError, SynthesisFailedError
from engines.messages import (
    BatchStarted,
    CancelJob,
    JobChunk,
    JobEnded,
    Ping,
    Pong,
    StartJob,
    StopWorker,
    WorkerLoadFailed,
    WorkerReady,
)
from engines.scheduler import DEFAULT_SHARE, QueueFullError, TenantScheduler, TenantShare
from engines.status import PoolStatus
from engines.worker import run_worker

# The worker side speaks multiprocessing's Connection framing; the server reads and writes the same frames with
# asyncio streams, because Connection.recv() cannot run on the non-blocking socket an event loop needs.
_FRAME_SIZE = struct.Struct("!i")
_LONG_FRAME_SIZE = struct.Struct("!Q")

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable
    from multiprocessing.process import BaseProcess

    from engines.base import EngineInfo, SynthesisRequest
    from engines.breaker import BreakerSettings
    from engines.settings import LocalEngineSettings
    from engines.status import PoolState

__all__ = ["EnginePool", "SynthesisStream"]

logger = logging.getLogger("tts_gateway.pool")

# A worker that cannot load (no weights yet) is retried, for weights may appear on a mounted volume, but rarely:
# each try imports the engine again.
_MAX_RESTART_BACKOFF_S = 300.0
_MAX_JOINED_BYTES = 96_000  # 2 s of 24 kHz PCM: the largest piece a stream hands on at once


class _Job:
    """Server-side state of one job: the PCM the worker sent and not yet consumed, and how it ended."""

    def __init__(self, job_id: int, max_buffered_bytes: int, tenant: str = "") -> None:
        self.id = job_id
        self.tenant = tenant
        self.events: asyncio.Queue[bytes | JobEnded] = asyncio.Queue()
        self.buffered_bytes = 0
        self.max_buffered_bytes = max_buffered_bytes
        self.cancelled_at: float | None = None
        self.ended = False

    def on_chunk(self, pcm: bytes) -> bool:
        """Queue a chunk; False when the consumer has fallen too far behind (it then gets an error)."""
        if self.cancelled_at is not None:
            return True
        self.buffered_bytes += len(pcm)
        if self.buffered_bytes > self.max_buffered_bytes:
            ended = JobEnded(self.id, error="the client read audio too slowly; request dropped", slow_consumer=True)
            self.events.put_nowait(ended)
            return False
        self.events.put_nowait(pcm)
        return True

    def on_end(self, ended: JobEnded) -> None:
        self.ended = True
        self.events.put_nowait(ended)


class SynthesisStream:
    """The PCM of one job as it arrives (an :class:`~engines.backend.PcmStream`)."""

    def __init__(self, job: _Job, info: EngineInfo) -> None:
        self._job = job
        self.info = info
        self.sample_rate = info.sample_rate
        self._ending: JobEnded | None = None

    def __aiter__(self) -> SynthesisStream:
        return self

    async def __anext__(self) -> bytes:
        if self._ending is None:
            item = await self._job.events.get()
            if isinstance(item, bytes):
                return self._with_queued(item)
            self._ending = item
        if self._ending.error is None:
            raise StopAsyncIteration
        if self._ending.invalid:
            raise InvalidSynthesisRequestError(self._ending.error, self._ending.invalid_param)
        if self._ending.slow_consumer:
            raise ConsumerTooSlowError(self._ending.error)
        raise SynthesisFailedError(self._ending.error)

    def _with_queued(self, first: bytes) -> bytes:
        """``first`` joined with the PCM already queued behind it.

        When the engine runs ahead of its consumer, fewer and larger pieces save a round of encoding, fan-out and
        HTTP writing per piece; nothing waits for more, so the first audio is never delayed.
        """
        pieces, size = [first], len(first)
        events = self._job.events
        while size < _MAX_JOINED_BYTES and not events.empty():
            item = events.get_nowait()
            if not isinstance(item, bytes):
                self._ending = item  # the job ended behind these pieces: reported on the next call
                break
            pieces.append(item)
            size += len(item)
        self._job.buffered_bytes -= size
        return first if len(pieces) == 1 else b"".join(pieces)


@dataclass(slots=True)
class _Presence:
    """A tenant that asked for this engine lately, for the slots kept for it (``reserved_slots``)."""

    seen: float
    """When it last asked (monotonic)."""
    weight: float
    gap: float | None = None
    """Its usual time between requests (smoothed); ``None`` until it has asked twice."""

    def asked(self, now: float, weight: float) -> None:
        gap = now - self.seen
        self.gap = gap if self.gap is None else (self.gap + gap) / 2
        self.seen, self.weight = now, weight

    def expected_until(self, window_s: float) -> float:
        """Until when it is expected back: twice its usual gap after its last request, at most ``window_s``."""
        return self.seen + (min(window_s, 2 * self.gap) if self.gap is not None else 0.0)


@dataclass(frozen=True, slots=True)
class _Claim:
    """Whose request waits, with which share, and what it costs the engine (input characters)."""

    tenant: str
    share: TenantShare
    cost: float


class _Worker:
    """The server's handle on one worker process."""

    def __init__(self, pool: EnginePool, process: BaseProcess, writer: asyncio.StreamWriter) -> None:
        self.pool = pool
        self.process = process
        self.writer = writer
        self.reader_task: asyncio.Task[None] | None = None
        self.state: Literal["starting", "ready", "dead"] = "starting"
        self.info: EngineInfo | None = None
        self.jobs: dict[int, _Job] = {}
        self.reserved = 0
        self.started_at = time.monotonic()
        self.ping_sent_at: float | None = None
        self.last_seen = time.monotonic()
        self.last_progress = time.monotonic()
        """When the worker last produced audio or finished a job, or last went from idle to busy."""
        self.kill_reason: str | None = None

    @property
    def load(self) -> int:
        return len(self.jobs) + self.reserved

    @property
    def capacity(self) -> int:
        return self.info.max_batch if self.info is not None else 0

    def has_free_slot(self) -> bool:
        return self.state == "ready" and self.load < self.capacity

    def send(self, message: object) -> None:
        if self.writer.is_closing():
            self.kill("its pipe broke")
            return
        data = pickle.dumps(message)
        self.writer.write(_FRAME_SIZE.pack(len(data)) + data)

    def kill(self, reason: str) -> None:
        """Kill the process; its pipe then reaches EOF and the pool cleans up and replaces it."""
        if self.kill_reason is None:
            self.kill_reason = reason
            logger.warning("killing %s worker pid %s: %s", self.pool.name, self.process.pid, reason)
        with contextlib.suppress(Exception):
            self.process.kill()


class EnginePool:
    """Worker processes for one engine, with a bounded wait queue, cancellation and self-healing."""

    def __init__(
        self,
        name: str,
        settings: LocalEngineSettings,
        *,
        worker_logging: dict[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.settings = settings
        self._worker_logging = worker_logging
        self._recent_tenants: dict[str, _Presence] = {}
        """Each tenant that asked this engine within ``reservation_window_s`` (or holds or waits for a slot)."""
        self._pending: Counter[str] = Counter()
        """Slots handed to a tenant whose job has not started yet (its task has not resumed)."""
        self._waiting_tenants: dict[asyncio.Future[_Worker], str] = {}
        self._granted_to: dict[asyncio.Future[_Worker], str] = {}
        self._context = multiprocessing.get_context("spawn")
        self._workers: list[_Worker] = []
        self._waiters: TenantScheduler[asyncio.Future[_Worker]] = TenantScheduler(
            settings.queue_size, settings.scheduling
        )
        self._job_ids = itertools.count(1)
        self._ping_nonces = itertools.count(1)
        self._restarts = 0
        self._batch_sizes: Counter[int] = Counter()
        self._failed_starts = 0
        self._unavailable_reason: str | None = None
        self._info: EngineInfo | None = None
        self._stopped = False
        self._watchdog: asyncio.Task[None] | None = None
        self._respawns: set[asyncio.Task[None]] = set()

    # ----------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        """Start every worker; they load and warm up in the background (see :meth:`status`)."""
        for _ in range(self.settings.workers):
            await self._spawn()
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
        for task in list(self._respawns):
            task.cancel()
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
        return PoolStatus(
            engine=self.name,
            kind=self.settings.kind,
            state=self._state(ready),
            reason=None if ready else self._unavailable_reason,
            workers=self.settings.workers,
            ready_workers=len(ready),
            busy_workers=sum(1 for w in ready if w.jobs),
            active_jobs=sum(len(w.jobs) for w in self._workers),
            queued=len(self._waiters),
            restarts=self._restarts,
            pids=tuple(w.process.pid for w in self._workers if w.process.pid is not None),
            batch_sizes=dict(self._batch_sizes),
            info=self._info,
            queued_by_tenant=self._waiters.queued_by_tenant(),
        )

    def _state(self, ready: list[_Worker]) -> PoolState:
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
    ) -> AsyncIterator[SynthesisStream]:
        """Run ``request`` for ``tenant`` on a worker; leaving the block before the end cancels the job in the worker.

        While every worker is busy the request waits in ``tenant``'s queue, taken out in turn with other tenants'
        by ``share`` (weight, priority class, cap on its waiting requests; :data:`DEFAULT_SHARE` when ``None``).
        """
        claim = _Claim(tenant, share or DEFAULT_SHARE, float(max(1, len(request.text))))
        worker = await self._acquire(claim)
        while worker.state != "ready":  # it died between being handed to us and now
            self._unpend(claim.tenant)
            worker = await self._acquire(claim)
        job = _Job(next(self._job_ids), self._max_buffered_bytes(worker), claim.tenant)
        worker.reserved -= 1
        self._unpend(claim.tenant)  # the slot handed to the tenant is its job now
        if not worker.jobs:
            worker.last_progress = time.monotonic()
        worker.jobs[job.id] = job
        assert worker.info is not None
        worker.send(StartJob(job.id, request))
        try:
            yield SynthesisStream(job, worker.info)
        finally:
            if not job.ended and job.cancelled_at is None:
                job.cancelled_at = time.monotonic()
                worker.send(CancelJob(job.id))

    def _max_buffered_bytes(self, worker: _Worker) -> int:
        rate = worker.info.sample_rate if worker.info is not None else 24000
        return int(self.settings.max_buffered_audio_s * rate * 2)

    async def _acquire(self, claim: _Claim) -> _Worker:
        if self._reserves_slots():
            self._note_asking(claim)
        status = self.status()
        if status.state == "starting" and self._info is None:
            # Loading for the first time: say so at once (a 503 with Retry-After, or the alias's next engine). A pool
            # that has served before and is replacing a worker queues the request: the worker is back in a moment.
            raise EngineNotReadyError(self.name, "still loading: no worker is ready yet")
        if status.state not in {"ready", "starting"}:
            raise EngineNotReadyError(self.name, status.reason or status.state)
        worker = self._free_worker()
        if worker is not None and not self._waiters and self._may_take_free_slot(claim.tenant):
            self._waiters.charge(claim.tenant, claim.share, claim.cost)
            worker.reserved += 1
            self._pending[claim.tenant] += 1
            return worker
        waiter: asyncio.Future[_Worker] = asyncio.get_running_loop().create_future()
        try:
            self._waiters.push(waiter, claim.tenant, claim.share, claim.cost)
        except QueueFullError:  # the whole queue, or this tenant's part of it (the other tenants may still queue)
            raise EngineOverloadedError(self.name, self._retry_after_s()) from None
        self._waiting_tenants[waiter] = claim.tenant
        self._hand_out_slots()  # a reserved slot may be free for this tenant, though others wait for the rest
        return await self._wait_in_queue(waiter)

    async def _wait_in_queue(self, waiter: asyncio.Future[_Worker]) -> _Worker:
        taken = False
        try:
            worker = await asyncio.wait_for(asyncio.shield(waiter), self.settings.queue_timeout_s)
            taken = True
            self._granted_to.pop(waiter, None)  # its slot is counted in _pending until the job starts
            return worker
        except TimeoutError:
            raise EngineOverloadedError(self.name, self._retry_after_s()) from None
        finally:
            if not taken:
                self._abandon(waiter)

    def _abandon(self, waiter: asyncio.Future[_Worker]) -> None:
        self._waiters.remove(waiter)
        tenant = self._waiting_tenants.pop(waiter, None)
        if not waiter.done():
            waiter.cancel()
        elif not waiter.cancelled() and waiter.exception() is None:
            self._unpend(self._granted_to.pop(waiter, tenant or ""))
            self._release(waiter.result())  # we were handed a slot at the moment we gave up: pass it on

    def _free_worker(self) -> _Worker | None:
        candidates = [w for w in self._workers if w.has_free_slot()]
        return min(candidates, key=lambda w: w.load) if candidates else None

    def _release(self, worker: _Worker) -> None:
        worker.reserved -= 1
        self._hand_out_slots()

    def _reserves_slots(self) -> bool:
        return bool(self.settings.reserved_slots) and self.settings.scheduling == "fair"

    def _may_take_free_slot(self, tenant: str) -> bool:
        rule = self._slot_rule()
        return rule is None or rule(tenant)

    def _slot_rule(self) -> Callable[[str], bool] | None:
        """Who may take a free slot now; ``None``: anyone (nothing is reserved, the usual case, costs nothing).

        Every tenant holding or waiting for a slot, or expected back soon (within twice its usual time between
        requests, at most ``reservation_window_s``), has a fair share of the slots (by weight, at least one). A tenant
        below its share may always take a free slot; one at or above it may take one only while more are free than
        the tenants not here lack of their shares (at most ``reserved_slots``, and never every slot); tenants that
        are waiting get free slots in the scheduler's order. So a tenant that comes back while another floods the
        engine finds a slot free instead of waiting for a running job to end (no job is preempted), and a tenant
        alone, tenants that all use their shares, or one that asked once and left, cost the others nothing.
        """
        if not self._reserves_slots():
            return None
        total = self._total_slots()
        if total < 2 or len(self._recent_tenants) < 2:
            return None
        holding = self._holding()
        shares = self._shares(holding)
        if len(shares) < 2:
            return None
        weights = sum(shares.values())
        fair = {tenant: max(1, int(total * weight / weights)) for tenant, weight in shares.items()}
        # Slots are kept only for tenants not waiting now: those waiting compete for the free slot in fair order.
        absent = [tenant for tenant in shares if not self._waiters.queued(tenant)]
        lacking = sum(max(0, fair[tenant] - holding[tenant]) for tenant in absent)
        kept = min(self.settings.reserved_slots, total - 1, lacking)  # one at its share or above lacks nothing itself
        free = self._free_slots()

        def eligible(tenant: str) -> bool:
            return holding[tenant] < fair.get(tenant, 1) or free > kept

        return eligible

    def _note_asking(self, claim: _Claim) -> None:
        now = time.monotonic()
        if (presence := self._recent_tenants.get(claim.tenant)) is not None:
            presence.asked(now, claim.share.weight)
        else:
            self._recent_tenants[claim.tenant] = _Presence(now, claim.share.weight)

    def _shares(self, holding: Counter[str]) -> dict[str, float]:
        """The weight of each tenant with a share now: those holding or waiting for a slot, and those not here that
        are expected back (within twice their usual time between requests, at most ``reservation_window_s``)."""
        now, window = time.monotonic(), self.settings.reservation_window_s
        shares = {}
        for tenant, presence in list(self._recent_tenants.items()):
            here = holding[tenant] > 0 or self._waiters.queued(tenant) > 0
            if here or now <= presence.expected_until(window):
                shares[tenant] = presence.weight
            elif now - presence.seen > window:
                del self._recent_tenants[tenant]  # gone quiet: its history goes too
        return shares

    def _holding(self) -> Counter[str]:
        """Slots each tenant holds: its running jobs and the slots handed to it that have not started yet."""
        holding = Counter(job.tenant for worker in self._workers for job in worker.jobs.values())
        holding.update(self._pending)
        return holding

    def _total_slots(self) -> int:
        return sum(w.capacity for w in self._workers if w.state == "ready")

    def _free_slots(self) -> int:
        return sum(w.capacity - w.load for w in self._workers if w.state == "ready")

    def _unpend(self, tenant: str) -> None:
        self._pending[tenant] -= 1
        if self._pending[tenant] <= 0:
            del self._pending[tenant]

    def _hand_out_slots(self) -> None:
        # One slot per turn, so a batching worker's batch fills in the scheduler's order too.
        while (worker := self._free_worker()) is not None:
            if (waiter := self._waiters.pop(self._slot_rule())) is None:
                return
            tenant = self._waiting_tenants.pop(waiter, "")
            if not waiter.done():
                worker.reserved += 1
                # Counted as the tenant's until its job starts: the next slot of this loop must not see it idle.
                self._pending[tenant] += 1
                self._granted_to[waiter] = tenant
                waiter.set_result(worker)

    def _retry_after_s(self) -> int:
        return 1

    def _fail_waiters(self) -> None:
        reason = self._unavailable_reason or "the pool stopped"
        for waiter in self._waiters.clear():
            self._waiting_tenants.pop(waiter, None)
            if not waiter.done():
                waiter.set_exception(EngineNotReadyError(self.name, reason))

    # ----------------------------------------------------------------- worker processes
    async def _spawn(self) -> None:
        parent_socket, child_socket = socket.socketpair()
        child_conn = Connection(child_socket.detach())
        process = self._context.Process(
            target=run_worker,
            args=(self.settings.kind, self.settings.options, child_conn, self._worker_logging),
            name=f"tts-worker-{self.name}",
            daemon=True,
        )
        process.start()
        child_conn.close()
        reader, writer = await asyncio.open_unix_connection(sock=parent_socket)
        worker = _Worker(self, process, writer)
        self._workers.append(worker)
        worker.reader_task = asyncio.create_task(self._read(worker, reader), name=f"worker-{process.pid}")

    async def _read(self, worker: _Worker, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                self._on_message(worker, await _read_frame(reader))
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            self._on_exit(worker)  # end of file: the worker process is gone

    def _on_message(self, worker: _Worker, message: object) -> None:
        worker.last_seen = time.monotonic()
        if isinstance(message, JobChunk | JobEnded):
            worker.last_progress = worker.last_seen
        if isinstance(message, JobChunk):
            job = worker.jobs.get(message.job_id)
            if job is not None and not job.on_chunk(message.pcm):
                job.cancelled_at = time.monotonic()
                worker.send(CancelJob(job.id))
        elif isinstance(message, JobEnded):
            self._on_job_ended(worker, message)
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

    def _on_job_ended(self, worker: _Worker, ended: JobEnded) -> None:
        job = worker.jobs.pop(ended.job_id, None)
        if job is not None:
            job.on_end(ended)
        self._hand_out_slots()

    def _on_worker_ready(self, worker: _Worker, info: EngineInfo) -> None:
        worker.state = "ready"
        worker.info = info
        self._info = info
        self._unavailable_reason = None
        self._failed_starts = 0
        logger.info("engine %s worker pid %s ready", self.name, worker.process.pid)
        self._hand_out_slots()

    def _on_exit(self, worker: _Worker) -> None:
        was_ready = worker.state == "ready"
        self._close(worker)
        reason = worker.kill_reason or f"exit code {worker.process.exitcode}"
        for job in worker.jobs.values():
            job.on_end(JobEnded(job.id, error=f"the engine worker died ({reason})"))
        worker.jobs.clear()
        if self._stopped:
            return
        log = logger.warning if was_ready or worker.kill_reason else logger.debug  # load failures: logged above
        log("engine %s worker pid %s ended: %s", self.name, worker.process.pid, reason)
        self._restarts += 1
        if not was_ready:
            self._failed_starts += 1
            self._unavailable_reason = self._unavailable_reason or f"worker failed to start ({reason})"
        self._schedule_respawn(0.0 if was_ready else self._backoff_s())
        if self.status().state == "unavailable":
            self._fail_waiters()

    def _close(self, worker: _Worker) -> None:
        if worker.reader_task is not None and worker.reader_task is not asyncio.current_task():
            worker.reader_task.cancel()
        worker.writer.close()
        worker.process.join(timeout=1.0)
        worker.state = "dead"
        if worker in self._workers:
            self._workers.remove(worker)

    def _backoff_s(self) -> float:
        return min(_MAX_RESTART_BACKOFF_S, 0.5 * 2.0 ** max(0, self._failed_starts - 1))

    def _schedule_respawn(self, delay_s: float) -> None:
        async def respawn() -> None:
            await asyncio.sleep(delay_s)
            if not self._stopped:
                await self._spawn()

        task = asyncio.create_task(respawn())
        self._respawns.add(task)
        task.add_done_callback(self._respawns.discard)

    # ----------------------------------------------------------------- watchdog
    async def _watch(self) -> None:
        period = min(0.25, self.settings.stall_timeout_s / 4)
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            for worker in list(self._workers):
                self._check(worker, now)
            if self._waiters and self._reserves_slots():
                self._hand_out_slots()  # a slot kept for a tenant whose share has lapsed goes to those waiting

    def _check(self, worker: _Worker, now: float) -> None:
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

    def _check_health(self, worker: _Worker, now: float) -> None:
        interval = self.settings.health_interval_s
        if worker.ping_sent_at is not None and now - worker.ping_sent_at > interval:
            worker.kill("no answer to a health ping")
        elif worker.ping_sent_at is None and now - worker.last_seen > interval:
            worker.ping_sent_at = now
            worker.send(Ping(next(self._ping_nonces)))


async def _read_frame(reader: asyncio.StreamReader) -> object:
    (size,) = _FRAME_SIZE.unpack(await reader.readexactly(_FRAME_SIZE.size))
    if size == -1:  # multiprocessing's marker for a frame over 2 GiB
        (size,) = _LONG_FRAME_SIZE.unpack(await reader.readexactly(_LONG_FRAME_SIZE.size))
    return pickle.loads(await reader.readexactly(size))  # noqa: S301 - our own worker process, as multiprocessing does
