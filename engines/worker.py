"""The engine worker process: loads one engine, warms it up, then runs jobs sent by the server.

The main thread runs the engine (ChatTTS's per-token Python loop must not share the GIL with a busy thread); a
reader thread, asleep on the pipe almost all the time, takes control messages so that cancellation and health
pings are answered while a synthesis is running. Samples to encode (``EncodeSample``) reach the main thread with the
jobs; it answers them between the steps of whatever it runs (each chunk of a job, each step of a batch), so that a
voice is made in about one step's time even while the worker is busy.
"""

from __future__ import annotations

import logging
import logging.config
import queue
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any

import numpy as np

from engines.base import (
    BatchingEngine,
    CancelFlag,
    EngineUnavailableError,
    InvalidSynthesisRequestError,
    SynthesisRequest,
)
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
from engines.pipe import WorkerPipe
from engines.registry import create_engine
from engines.samples import speaker_from_sample
from engines.timing import JobTiming, MarkedSynthesis
from lifecycle import naming
from lifecycle.signals import leave_stopping_to_the_server

if TYPE_CHECKING:
    import socket

    from pydantic import BaseModel

    from engines.base import CancelToken, Engine, EngineInfo

__all__ = ["run_worker"]

logger = naming.logger("worker")

WARM_UP_TEXT = "Hello."


class _Inbox:
    """What the reader thread hands the main thread: jobs, samples to encode, and ``None`` to stop.

    Only the main thread takes from it. Samples are answered whenever it looks, jobs wait their turn: the jobs met
    while looking for samples are set aside, in their order.
    """

    def __init__(self, engine: Engine, info: EngineInfo, outbox: _Outbox) -> None:
        self._queue: queue.Queue[StartJob | EncodeSample | None] = queue.Queue()
        self._jobs: deque[StartJob | None] = deque()
        self._engine = engine
        self.info = info
        self._outbox = outbox

    def put(self, message: StartJob | EncodeSample | None) -> None:
        """Called by the reader thread."""
        self._queue.put(message)

    def get(self, timeout: float | None = None) -> StartJob | None:
        """The next job (``None``: stop), waiting up to ``timeout`` (``queue.Empty`` after it); answers the samples
        that arrive meanwhile."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._jobs:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            self._sort(self._queue.get(timeout=left))
        return self._jobs.popleft()

    def get_nowait(self) -> StartJob | None:
        """The next job without waiting (``queue.Empty`` when there is none); answers the samples waiting."""
        self.serve_samples()
        if not self._jobs:
            raise queue.Empty
        return self._jobs.popleft()

    def serve_samples(self) -> None:
        """Answer every sample that has arrived; the jobs among them are set aside for :meth:`get`."""
        while True:
            try:
                message = self._queue.get_nowait()
            except queue.Empty:
                return
            self._sort(message)

    def _sort(self, message: StartJob | EncodeSample | None) -> None:
        if isinstance(message, EncodeSample):
            self._outbox.send(_encode_sample(self._engine, self.info, message))
        else:
            self._jobs.append(message)


class _Outbox:
    """Serialises sends: the main thread sends audio while the reader thread answers pings."""

    def __init__(self, pipe: WorkerPipe) -> None:
        self._pipe = pipe
        self._lock = threading.Lock()

    def send(self, message: object) -> None:
        with self._lock:
            self._pipe.send(message)


def run_worker(
    kind: str, options: BaseModel, pipe_socket: socket.socket, logging_config: dict[str, Any] | None = None
) -> None:
    """Entry point of a worker process (``multiprocessing`` target); ``pipe_socket`` is its end of the pipe to the
    server (``engines.pipe``).

    ``logging_config`` (a :func:`logging.config.dictConfig` mapping from the server) is applied first, so that a
    failing job's traceback is one line in the server's format rather than plain text on stderr.
    """
    leave_stopping_to_the_server()  # a signal to the whole process group must not cut the streams the server drains
    if logging_config is not None:
        logging.config.dictConfig(logging_config)
        logging.captureWarnings(True)
    pipe = WorkerPipe(pipe_socket)
    outbox = _Outbox(pipe)
    try:
        engine = create_engine(kind, options)
        info = engine.load()
        _warm_up(engine, info)
    except EngineUnavailableError as exc:
        outbox.send(WorkerLoadFailed(str(exc)))
        return
    except Exception as exc:
        logger.exception("engine %s failed to load", kind)
        outbox.send(WorkerLoadFailed(f"{type(exc).__name__}: {exc}"))
        return
    outbox.send(WorkerReady(info))
    _serve(engine, info, pipe, outbox)


def _warm_up(engine: Engine, info: EngineInfo) -> None:
    # One short synthesis so that lazy initialisation is paid before the first client request.
    voice = info.voices[0].id if info.voices else ""
    for _ in engine.synthesize(SynthesisRequest(text=WARM_UP_TEXT, voice=voice), CancelFlag()):
        pass


def _serve(engine: Engine, info: EngineInfo, pipe: WorkerPipe, outbox: _Outbox) -> None:
    jobs = _Inbox(engine, info, outbox)
    cancels: dict[int, CancelFlag] = {}
    reader = threading.Thread(target=_read_control, args=(pipe, outbox, jobs, cancels), daemon=True)
    reader.start()
    if isinstance(engine, BatchingEngine) and info.max_batch > 1:
        _serve_batches(engine, info.max_batch, jobs, cancels, outbox)
        return
    while (job := jobs.get()) is not None:
        outbox.send(_run_job(engine, info.sample_rate, job, cancels[job.job_id], outbox, jobs))
        cancels.pop(job.job_id, None)


def _serve_batches(
    engine: BatchingEngine,
    max_batch: int,
    jobs: _Inbox,
    cancels: dict[int, CancelFlag],
    outbox: _Outbox,
) -> None:
    stopping = False
    while not stopping:
        batch, stopping = _collect_batch(jobs, max_batch, engine.batch_window_ms / 1000)
        if batch:
            outbox.send(BatchStarted(len(batch)))
            running = _RunningBatch(batch, jobs, cancels, engine_rate=jobs.info.sample_rate)
            for ended in _run_batch(engine, running, outbox):
                outbox.send(ended)
            for job in running.jobs:
                cancels.pop(job.job_id, None)
            stopping = stopping or running.stopping


def _collect_batch(jobs: _Inbox, max_batch: int, window_s: float) -> tuple[list[StartJob], bool]:
    """The jobs that queued up while the worker was busy, plus those arriving within the window; and whether to stop.

    The window starts with the first job, so a lone request on an idle worker waits at most ``window_s``.
    """
    first = jobs.get()
    if first is None:
        return [], True
    batch = [first]
    deadline = time.monotonic() + window_s
    while len(batch) < max_batch:
        try:
            job = jobs.get(timeout=max(0.0, deadline - time.monotonic())) if window_s > 0 else jobs.get_nowait()
        except queue.Empty:
            break
        if job is None:
            return batch, True
        batch.append(job)
    return batch, False


class _RunningBatch:
    """The jobs of the batch the engine is running, by their index in it: those it started with, then those it took
    in while running (its :data:`engines.base.JobSource`)."""

    def __init__(self, first: list[StartJob], jobs: _Inbox, cancels: dict[int, CancelFlag], *, engine_rate: int):
        self.jobs = list(first)
        self._rate = engine_rate
        self._timings: dict[int, JobTiming] = {}
        self.stopping = False
        """The server asked the worker to stop: take no more jobs, end after this batch."""
        self._queue = jobs
        self._cancels = cancels

    def cancel(self, index: int) -> CancelFlag:
        return self._cancels[self.jobs[index].job_id]

    def timing(self, index: int) -> JobTiming:
        """Where the words of job ``index`` fall in its audio: estimated (a batching engine places none)."""
        if (timing := self._timings.get(index)) is None:
            timing = self._timings[index] = JobTiming(self.jobs[index].request.text, self._rate)
        return timing

    def take(self, limit: int) -> list[tuple[SynthesisRequest, CancelToken]]:
        """Up to ``limit`` jobs that arrived since, without waiting; they join the batch. The engine calls this between
        every two steps (``limit`` 0 when full): the samples that arrived are answered here."""
        self._queue.serve_samples()
        taken: list[tuple[SynthesisRequest, CancelToken]] = []
        while len(taken) < limit and not self.stopping:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is None:
                self.stopping = True
                break
            self.jobs.append(job)
            taken.append((job.request, self.cancel(len(self.jobs) - 1)))
        return taken


def _run_batch(engine: BatchingEngine, running: _RunningBatch, outbox: _Outbox) -> list[JobEnded]:
    """Stream a batch's chunks to the server as they come; return a :class:`JobEnded` for every job not yet ended."""
    ended: set[int] = set()
    first = list(running.jobs)
    items = engine.synthesize_batch([job.request for job in first], [running.cancel(i) for i in range(len(first))],
                                    running.take)  # fmt: skip
    try:
        for index, item in items:
            if index in ended:
                continue
            job_id = running.jobs[index].job_id
            if item is None:
                cancelled = running.cancel(index).is_set()
                outbox.send(JobEnded(job_id, marks=() if cancelled else running.timing(index).finish()))
            elif isinstance(item, InvalidSynthesisRequestError):
                outbox.send(JobEnded(job_id, error=str(item), invalid=True, invalid_param=item.param))
            else:
                if item.size and not running.cancel(index).is_set():
                    running.timing(index).add_audio(item)
                    outbox.send(JobChunk(job_id, np.asarray(item, dtype="<i2").tobytes()))
                continue
            ended.add(index)
    except Exception as exc:
        open_jobs = [job.job_id for index, job in enumerate(running.jobs) if index not in ended]
        logger.exception("batch of jobs %s failed", open_jobs)
        return [JobEnded(job_id, error=f"{type(exc).__name__}: {exc}") for job_id in open_jobs]
    finally:
        items.close()
    return [JobEnded(job.job_id) for index, job in enumerate(running.jobs) if index not in ended]


def _read_control(pipe: WorkerPipe, outbox: _Outbox, jobs: _Inbox, cancels: dict[int, CancelFlag]) -> None:
    while True:
        try:
            message = pipe.recv()
        except (EOFError, OSError):
            message = StopWorker()  # the server is gone: stop whatever runs and exit
        if isinstance(message, StartJob):
            cancels[message.job_id] = CancelFlag()
            jobs.put(message)
        elif isinstance(message, EncodeSample):
            jobs.put(message)
        elif isinstance(message, CancelJob):
            if (cancel := cancels.get(message.job_id)) is not None:
                cancel.set()
        elif isinstance(message, Ping):
            outbox.send(Pong(message.nonce))
        elif isinstance(message, StopWorker):
            for cancel in list(cancels.values()):
                cancel.set()
            jobs.put(None)
            return


def _run_job(  # noqa: PLR0917 - the worker's parts
    engine: Engine, sample_rate: int, job: StartJob, cancel: CancelFlag, outbox: _Outbox, inbox: _Inbox
) -> JobEnded:
    synthesis = MarkedSynthesis(engine, job.request, cancel, sample_rate)
    chunks = synthesis.chunks()
    try:
        for chunk, marks in chunks:
            if cancel.is_set():
                break
            if chunk.size or marks:  # the marks of its words travel with the audio, in the same message
                outbox.send(JobChunk(job.job_id, np.asarray(chunk, dtype="<i2").tobytes(), marks))
            inbox.serve_samples()
    except InvalidSynthesisRequestError as exc:
        return JobEnded(job.job_id, error=str(exc), invalid=True, invalid_param=exc.param)
    except Exception as exc:
        logger.exception("job %d failed", job.job_id)
        return JobEnded(job.job_id, error=f"{type(exc).__name__}: {exc}")
    finally:
        chunks.close()  # stops the engine's work at once when we leave early
    return JobEnded(job.job_id, marks=() if cancel.is_set() else synthesis.finish())


def _encode_sample(engine: Engine, info: EngineInfo, message: EncodeSample) -> SampleEncoded:
    try:
        speaker = speaker_from_sample(engine, info, message.pcm, message.sample_rate, message.transcript)
    except InvalidSynthesisRequestError as exc:
        return SampleEncoded(message.request_id, error=str(exc), invalid=True, invalid_param=exc.param)
    except Exception as exc:
        logger.exception("encoding sample %d failed", message.request_id)
        return SampleEncoded(message.request_id, error=f"{type(exc).__name__}: {exc}")
    return SampleEncoded(message.request_id, speaker=speaker)
