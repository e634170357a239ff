"""A request's stream of PCM from a worker (:class:`SynthesisStream`), the job it reads, and the gate that pauses
the ``low`` lane while other requests are in flight."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING

from engines.base import InvalidSynthesisRequestError
from engines.errors import ConsumerTooSlowError, SynthesisFailedError
from engines.messages import (
    JobEnded,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

    from engines.base import EngineInfo
    from engines.pool.workers import Worker
    from engines.scheduling import Grant
    from engines.timing import WordMark

__all__ = ["MAX_JOINED_BYTES", "MAX_YIELD_S", "Job", "LowLaneGate", "SynthesisStream"]

MAX_JOINED_BYTES = 96_000  # 2 s of 24 kHz PCM: the largest piece a stream hands on at once
MAX_YIELD_S = 0.5
"""The longest the ``low`` lane pauses for the other requests at a time; after one such pause it runs for as long
before it pauses again, so that a steady stream of requests slows the jobs to at most half speed, never stops them."""


class Job:
    """Server-side state of one job: the PCM and word marks the worker sent and not yet consumed, and how it ended."""

    def __init__(self, job_id: int, max_buffered_bytes: int, grant: Grant[Worker] | None = None) -> None:
        self.id = job_id
        self.grant = grant
        self.produced_bytes = 0
        self.events: asyncio.Queue[bytes | tuple[WordMark, ...] | JobEnded] = asyncio.Queue()
        self.buffered_bytes = 0
        self.max_buffered_bytes = max_buffered_bytes
        self.cancelled_at: float | None = None
        self.ended = False

    def on_chunk(self, pcm: bytes, marks: tuple[WordMark, ...] = ()) -> bool:
        """Queue a chunk, then the marks that came with it; False when the consumer has fallen too far behind (it then
        gets an error)."""
        self.produced_bytes += len(pcm)
        if self.cancelled_at is not None:
            return True
        self.buffered_bytes += len(pcm)
        if self.buffered_bytes > self.max_buffered_bytes:
            ended = JobEnded(self.id, error="the client read audio too slowly; request dropped", slow_consumer=True)
            self.events.put_nowait(ended)
            return False
        if pcm:
            self.events.put_nowait(pcm)
        if marks:
            self.events.put_nowait(marks)
        return True

    def on_end(self, ended: JobEnded, sample_rate: int) -> None:
        """The job ended (done, failed or cancelled): its slot is free, and its tenant is charged what it made."""
        self.ended = True
        self.events.put_nowait(ended)
        if self.grant is not None:
            self.grant.finish(self.produced_bytes / (2 * sample_rate))


class SynthesisStream:
    """The PCM of one job as it arrives (an :class:`~engines.backend.PcmStream`), and its word marks as they come
    after their audio."""

    def __init__(self, job: Job, info: EngineInfo, gate: LowLaneGate | None = None) -> None:
        """``gate``: what a ``low`` lane's stream waits for before it hands on a piece."""
        self._job = job
        self._gate = gate
        self.info = info
        self.sample_rate = info.sample_rate
        self.marks: list[WordMark] = []
        self._ending: JobEnded | None = None

    def __aiter__(self) -> SynthesisStream:
        return self

    async def __anext__(self) -> bytes:
        if self._gate is not None:
            await self._gate.wait()
        while self._ending is None:
            item = await self._job.events.get()
            if isinstance(item, bytes):
                return self._with_queued(item)
            if isinstance(item, tuple):
                self.marks.extend(item)
                continue
            self._end(item)
        assert self._ending is not None
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
        while size < MAX_JOINED_BYTES and not events.empty():
            item = events.get_nowait()
            if isinstance(item, tuple):
                self.marks.extend(item)  # their audio is in the pieces before them: in what this call returns
                continue
            if not isinstance(item, bytes):
                self._end(item)  # the job ended behind these pieces: reported on the next call
                break
            pieces.append(item)
            size += len(item)
        self._job.buffered_bytes -= size
        return first if len(pieces) == 1 else b"".join(pieces)

    def _end(self, ending: JobEnded) -> None:
        self._ending = ending
        self.marks.extend(ending.marks)


class LowLaneGate:
    """While requests of the main lane are in flight (waiting for a worker or running), the ``low`` lane's work pauses:
    its workers' pipes are not read (a worker then blocks on its next send, within a few buffers: the CPU goes to the
    requests, as a preemption would give it) and its streams hand on no PCM (the gateway's own work for them, encoding
    and storing a job's audio, waits too). A pause lasts until the main lane is quiet, at most ``MAX_YIELD_S``."""

    def __init__(self) -> None:
        self._in_flight = 0
        self._quiet = asyncio.Event()
        self._quiet.set()
        self._free_until = 0.0

    @contextlib.contextmanager
    def in_flight(self) -> Iterator[None]:
        """A main-lane request, from asking for a worker until its stream closes."""
        self._in_flight += 1
        self._quiet.clear()
        try:
            yield
        finally:
            self._in_flight -= 1
            if not self._in_flight:
                self._quiet.set()

    async def wait(self) -> None:
        """Return once the main lane is quiet, or at most ``MAX_YIELD_S`` later (at once within the run that follows
        a pause that lasted that long)."""
        if self._quiet.is_set() or time.monotonic() < self._free_until:
            return
        try:
            async with asyncio.timeout(MAX_YIELD_S):
                await self._quiet.wait()
        except TimeoutError:
            self._free_until = time.monotonic() + MAX_YIELD_S
