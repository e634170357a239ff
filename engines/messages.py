"""Messages between the server process and an engine worker process (pickled over a duplex pipe).

Every job carries an id so one worker can run several jobs at once (dynamic batching). A worker answers every
:class:`StartJob` with exactly one :class:`JobEnded` — also after a :class:`CancelJob` — so the server knows when
the worker's slot is really free, and every :class:`EncodeSample` with exactly one :class:`SampleEncoded`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engines.base import EngineInfo, SynthesisRequest
    from engines.timing import WordMark

__all__ = [
    "BatchStarted",
    "CancelJob",
    "EncodeSample",
    "JobChunk",
    "JobEnded",
    "Ping",
    "Pong",
    "SampleEncoded",
    "StartJob",
    "StopWorker",
    "WorkerLoadFailed",
    "WorkerReady",
]


# server -> worker
@dataclass(frozen=True, slots=True)
class StartJob:
    job_id: int
    request: SynthesisRequest


@dataclass(frozen=True, slots=True)
class CancelJob:
    job_id: int


@dataclass(frozen=True, slots=True)
class EncodeSample:
    """Make a speaker from a recording (``CloningEngine.speaker_from_sample``); answered by one
    :class:`SampleEncoded`. The worker runs it between synthesis steps, outside the jobs' slots."""

    request_id: int
    pcm: bytes
    """Mono signed 16-bit little-endian PCM."""
    sample_rate: int
    transcript: str


@dataclass(frozen=True, slots=True)
class Ping:
    nonce: int


@dataclass(frozen=True, slots=True)
class StopWorker:
    pass


# worker -> server
@dataclass(frozen=True, slots=True)
class WorkerReady:
    info: EngineInfo


@dataclass(frozen=True, slots=True)
class WorkerLoadFailed:
    reason: str


@dataclass(frozen=True, slots=True)
class Pong:
    nonce: int


@dataclass(frozen=True, slots=True)
class JobChunk:
    job_id: int
    pcm: bytes
    """Mono signed 16-bit little-endian PCM at the engine's sample rate (empty when only ``marks`` settled)."""
    marks: tuple[WordMark, ...] = ()
    """The words settled by now, whose audio lies in this chunk or before it (``engines/timing.py``)."""


@dataclass(frozen=True, slots=True)
class SampleEncoded:
    request_id: int
    speaker: str | None = None
    """The speaker string, or None when it failed."""
    error: str | None = None
    invalid: bool = False
    """The engine refused the sample or transcript (a 400 naming ``invalid_param``), not a failure."""
    invalid_param: str | None = None


@dataclass(frozen=True, slots=True)
class BatchStarted:
    """A batching worker started generating ``size`` jobs together (for the batch-size metric)."""

    size: int


@dataclass(frozen=True, slots=True)
class JobEnded:
    job_id: int
    error: str | None = None
    """None when the job finished or was cancelled; otherwise what went wrong."""
    invalid_param: str | None = None
    """Set when the engine rejected the request itself (a 400 naming this param), not a failure."""
    slow_consumer: bool = False
    """Set by the server when it dropped the job because its consumer fell too far behind."""
    invalid: bool = False
    marks: tuple[WordMark, ...] = ()
    """The words not yet sent with a chunk, once a job has finished (none after a failure or a cancellation)."""
