"""The engine worker process: loads one engine, warms it up, then runs jobs sent by the server.

The main thread runs the engine (ChatTTS's per-token Python loop must not share the GIL with a busy thread); a
reader thread, asleep on the pipe almost all the time, takes control messages so that cancellation and health
pings are answered while a synthesis is running.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import TYPE_CHECKING

import numpy as np

from engines.base import EngineUnavailableError, InvalidSynthesisRequestError, SynthesisRequest
from engines.messages import (
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
from engines.registry import create_engine

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from engines.base import Engine, EngineInfo

__all__ = ["run_worker"]

logger = logging.getLogger("tts_gateway.worker")

WARM_UP_TEXT = "Hello."


class _JobCancel:
    """A cancel flag per job, set from the reader thread."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def set(self) -> None:
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()


class _Outbox:
    """Serialises sends: the main thread sends audio while the reader thread answers pings."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._lock = threading.Lock()

    def send(self, message: object) -> None:
        with self._lock:
            self._conn.send(message)


def run_worker(kind: str, options: dict[str, object], conn: Connection) -> None:
    """Entry point of a worker process (``multiprocessing`` target)."""
    outbox = _Outbox(conn)
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
    _serve(engine, conn, outbox)


def _warm_up(engine: Engine, info: EngineInfo) -> None:
    # One short synthesis so that lazy initialisation is paid before the first client request.
    voice = info.voices[0].id if info.voices else ""
    for _ in engine.synthesize(SynthesisRequest(text=WARM_UP_TEXT, voice=voice), _JobCancel()):
        pass


def _serve(engine: Engine, conn: Connection, outbox: _Outbox) -> None:
    jobs: queue.Queue[StartJob | None] = queue.Queue()
    cancels: dict[int, _JobCancel] = {}
    reader = threading.Thread(target=_read_control, args=(conn, outbox, jobs, cancels), daemon=True)
    reader.start()
    while (job := jobs.get()) is not None:
        outbox.send(_run_job(engine, job, cancels[job.job_id], outbox))
        cancels.pop(job.job_id, None)


def _read_control(
    conn: Connection, outbox: _Outbox, jobs: queue.Queue[StartJob | None], cancels: dict[int, _JobCancel]
) -> None:
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            message = StopWorker()  # the server is gone: stop whatever runs and exit
        if isinstance(message, StartJob):
            cancels[message.job_id] = _JobCancel()
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


def _run_job(engine: Engine, job: StartJob, cancel: _JobCancel, outbox: _Outbox) -> JobEnded:
    chunks = engine.synthesize(job.request, cancel)
    try:
        for chunk in chunks:
            if cancel.is_set():
                break
            if chunk.size:
                outbox.send(JobChunk(job.job_id, np.asarray(chunk, dtype="<i2").tobytes()))
    except InvalidSynthesisRequestError as exc:
        return JobEnded(job.job_id, error=str(exc), invalid=True, invalid_param=exc.param)
    except Exception as exc:
        logger.exception("job %d failed", job.job_id)
        return JobEnded(job.job_id, error=f"{type(exc).__name__}: {exc}")
    finally:
        chunks.close()  # stops the engine's work at once when we leave early
    return JobEnded(job.job_id)
