"""One worker process as the pool sees it (:class:`Worker`), the workers' slots for the scheduler, and what starts
and ends their processes."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypeAlias

from engines.pipe import frame
from lifecycle import naming

if TYPE_CHECKING:
    import asyncio
    import socket

    from engines.base import EngineInfo
    from engines.messages import (
        SampleEncoded,
    )
    from engines.pool.stream import Job
    from engines.template import WorkerProcess
if TYPE_CHECKING:
    from engines.pool.engine_pool import EnginePool

__all__ = ["LOW_NICENESS", "Lane", "Worker", "WorkerSlots", "abandon", "lower_cpu_priority"]

logger = naming.logger("pool")

Lane: TypeAlias = Literal["main", "low"]
"""Which requests a worker serves: ``low``, only the ``low`` priority class (``low_priority_workers``); ``main``, the
others (and every class when the pool has no ``low`` workers)."""
LOW_NICENESS = 10
"""How much lower the CPU priority of a ``low`` worker is (nice): Linux's scheduler then gives a runnable worker of
the default priority about nine tenths of a contended core against it, and it all of an idle one."""


class Worker:
    """The server's handle on one worker process."""

    def __init__(self, pool: EnginePool, process: WorkerProcess, writer: asyncio.StreamWriter, lane: Lane) -> None:
        self.pool = pool
        self.process = process
        self.lane = lane
        self.pid = process.pid
        """Kept: a closed ``multiprocessing`` process no longer says its pid."""
        self.writer = writer
        self.reader_task: asyncio.Task[None] | None = None
        self.state: Literal["starting", "ready", "dead"] = "starting"
        self.info: EngineInfo | None = None
        self.jobs: dict[int, Job] = {}
        self.samples: dict[int, asyncio.Future[SampleEncoded]] = {}
        """Samples sent to encode, by request id, each waiting for its answer."""
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

    @property
    def sample_rate(self) -> int:
        return self.info.sample_rate if self.info is not None else 24000

    def has_free_slot(self) -> bool:
        return self.state == "ready" and self.load < self.capacity

    def send(self, message: object) -> None:
        if self.writer.is_closing():
            self.kill("its pipe broke")
            return
        self.writer.write(frame(message))

    def kill(self, reason: str) -> None:
        """Kill the process; its pipe then reaches EOF and the pool cleans up and replaces it."""
        if self.kill_reason is None:
            self.kill_reason = reason
            logger.warning("killing %s worker pid %s: %s", self.pool.name, self.pid, reason)
        with contextlib.suppress(Exception):
            self.process.kill()


class WorkerSlots:
    """The pool's workers of one lane as a scheduler's slot source: a slot is a place in a ready worker's batch."""

    def __init__(self, workers: list[Worker], lane: Lane) -> None:
        self._all = workers
        self._lane = lane

    @property
    def _workers(self) -> list[Worker]:
        return [w for w in self._all if w.lane == self._lane]

    def free_slot(self) -> Worker | None:
        candidates = [w for w in self._workers if w.has_free_slot()]
        return min(candidates, key=lambda w: w.load) if candidates else None

    def take(self, holder: Worker) -> None:
        holder.reserved += 1

    def give_back(self, holder: Worker) -> None:
        holder.reserved -= 1

    def total_slots(self) -> int:
        return sum(w.capacity for w in self._workers if w.state == "ready")

    def free_slots(self) -> int:
        return sum(w.capacity - w.load for w in self._workers if w.state == "ready")


def lower_cpu_priority(pid: int) -> None:
    """Lower the CPU priority of every thread of process ``pid`` by ``LOW_NICENESS``.

    Linux's niceness is per thread (``setpriority`` on a pid sets its main thread's only); the threads the worker starts
    later (espeak's synthesis thread) inherit it from the main thread that starts them.
    """
    try:
        threads = [int(task.name) for task in Path(f"/proc/{pid}/task").iterdir()]
    except OSError:  # not Linux: the process's priority is the process's
        threads = [pid]
    for tid in threads:
        with contextlib.suppress(OSError):  # the thread ended meanwhile
            niceness = os.getpriority(os.PRIO_PROCESS, tid)
            os.setpriority(os.PRIO_PROCESS, tid, min(19, niceness + LOW_NICENESS))


def abandon(started: asyncio.Future[WorkerProcess], parent_socket: socket.socket, child_socket: socket.socket) -> None:
    """End a worker whose start was cancelled (its pool stopped meanwhile)."""
    parent_socket.close()
    child_socket.close()
    if not started.cancelled() and started.exception() is None:
        process = started.result()
        process.kill()
        process.join(timeout=1.0)
