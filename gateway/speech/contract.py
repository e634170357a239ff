"""The speech operation's contract (:meth:`SpeechService.speak`): how a request is admitted and counted.

Every transport speaks through one operation; what differs between their requests is said here, as a value, not as
flags: an HTTP request is admitted on its own, a WebSocket session's part within its session, a speech job's
segment as a part of its job.
"""

from __future__ import annotations

import enum

__all__ = ["Admission"]


class Admission(enum.Enum):
    """How one request of :meth:`SpeechService.speak` is admitted and counted in usage."""

    PER_REQUEST = "per_request"
    """A request of its own (the HTTP routes): its input is capped by the tenant's input cap, it counts as one of the
    tenant's requests with its characters, holds one of its concurrent streams until its reply is released, and is
    counted in usage."""
    IN_SESSION = "in_session"
    """A part of a WebSocket session (:meth:`SpeechService.open_session`), which counted as the tenant's request and
    holds its concurrent stream: only its characters count against the limits; usage counts the part."""
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
