"""The speech operation's contract (:meth:`SpeechService.speak`): how a request is admitted and counted, and the
record of what it did.

Every transport speaks through one operation; what differs between their requests is said here, as a value, not as
flags: an HTTP request is admitted on its own, a WebSocket session's part within its session, a speech job's
segment as a part of its job. The record is the transport's own: an HTTP request's is its access log line
(``gateway/http/request_record.py`` extends it), a session's part or a job's segment gets one from
:func:`session_record` or :func:`job_record`.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

__all__ = ["Admission", "SpeechRecord", "job_record", "session_record"]


class Admission(enum.Enum):
    """How one request of :meth:`SpeechService.speak` is admitted and counted in usage."""

    PER_REQUEST = "per_request"
    """A request of its own (the HTTP routes): its input is capped by the tenant's input cap, it counts as one of the
    tenant's requests with its characters, holds one of its concurrent streams until its reply is released, and is
    counted in usage."""
    IN_SESSION = "in_session"
    """A part of a WebSocket session (:meth:`SpeechService.open_session`), which counted as the tenant's request and
    holds its concurrent stream: only its characters count against the limits; usage counts the part. Parts spoken
    side by side hold one more of the tenant's streams each (``gateway/sessions/streams.py``)."""
    OF_JOB = "of_job"
    """A segment of a speech job (``gateway/jobs/``), admitted and counted in usage once for the whole job
    (:meth:`SpeechService.open_job`, :meth:`SpeechService.account_job`): neither happens here, and its engine jobs
    wait in the jobs' priority class."""

    @property
    def own_request(self) -> bool:
        """Whether the request is one of the tenant's requests of its own: its input capped, a stream held."""
        return self is Admission.PER_REQUEST

    @property
    def admitted_here(self) -> bool:
        """Whether the limits admit it here (a job's segments were admitted with their job)."""
        return self is not Admission.OF_JOB

    @property
    def counted_here(self) -> bool:
        """Whether usage counts it here (a job's segments count once, with their job)."""
        return self is not Admission.OF_JOB


@dataclass(slots=True, kw_only=True)
class SpeechRecord:
    """What one request of the speech operation did, whatever carried it: filled in by :meth:`SpeechService.speak`
    (its tenant, what it was charged, the engine that spoke, its audio), read by whoever logs it."""

    request_id: str
    """The request's id; a session's part is ``<session>/<part>`` or its response's id, a job's segment its job's."""
    transport: str
    """What carried it: ``http``, ``websocket`` or ``job``."""
    trace_id: str | None = None
    """The W3C trace the request belongs to (its caller's ``traceparent``, or one made for it)."""
    started: float = field(default_factory=time.perf_counter, repr=False)
    tenant: str | None = None
    model: str | None = None
    engine: str | None = None
    format: str | None = None
    characters: int | None = None
    audio_seconds: float | None = None
    ttfb_ms: float | None = None
    cache: str | None = None
    api_key_id: str | None = None
    """The id of the API key the caller presented (``None``: a JSON Web Token, an open gateway): usage by key."""


def session_record(part_id: str) -> SpeechRecord:
    """The record of a WebSocket session's part (a segment, a response, a context): not logged, the session has one
    line of its own; a part cut short is named by ``part_id`` in its warning."""
    return SpeechRecord(request_id=part_id, transport="websocket")


def job_record(job_id: str) -> SpeechRecord:
    """The record of a speech job's segment: not logged, the job is its own record (``gateway/jobs/``)."""
    return SpeechRecord(request_id=job_id, transport="job")
