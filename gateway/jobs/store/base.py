"""The job store's contract (:class:`JobStore`) and what it hands back."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

from gateway.jobs.records import JobRecord, JobStatus, now_s

if TYPE_CHECKING:
    from collections.abc import Sequence

    from storage import Page

__all__ = ["JobStore", "Refusal", "SpokenSegment", "ended_record"]


@dataclass(frozen=True, slots=True)
class SpokenSegment:
    """One segment's stored audio, and what it adds to the job's progress."""

    audio: bytes
    characters: int
    audio_ms: int
    charged: int = 0
    """What the segment was charged (what it made the engine say); the job's usage is their sum."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a new job was not stored: the tenant holds ``max_jobs`` jobs, or its stored audio reached its quota."""

    reason: str
    """``too_many_jobs`` or ``storage_quota``."""
    held: int


class JobStore(Protocol):
    """The jobs of every tenant; each method is scoped to one tenant (another tenant's job is "not there")."""

    ttl_s: int

    async def create(
        self, record: JobRecord, segments: list[str], *, quota_bytes: int, max_jobs: int
    ) -> Refusal | None:
        """Store a new job, unless the tenant holds ``max_jobs`` jobs or the job's reservation
        (``record.reserved_bytes``) does not fit in ``quota_bytes`` beside what the tenant's jobs hold
        (:meth:`JobRecord.held_bytes`). The check and the write are one atomic step: of creations at the same
        instant, never more are stored than fit. What a job holds is read from its record, so it is given back
        when the job is cancelled, fails, is deleted or its audio expires, with nothing to release by hand."""
        ...

    async def get(self, tenant: str, job_id: str) -> JobRecord | None: ...

    async def page(self, tenant: str, *, after: str | None, limit: int) -> Page[JobRecord]:
        """Up to ``limit`` of the tenant's jobs whose id sorts after ``after``, oldest first."""
        ...

    async def segments(self, tenant: str, job_id: str) -> list[str]:
        """The texts of the job's segments, in order (empty once it ended)."""
        ...

    async def start(self, tenant: str, job_id: str) -> JobRecord | None:
        """Mark a queued (or resumed) job running; ``None`` when it is gone or over."""
        ...

    async def commit(self, tenant: str, job_id: str, index: int, spoken: SpokenSegment) -> bool:
        """Add segment ``index``'s audio, if the job runs and ``index`` is its next segment; ``False`` otherwise."""
        ...

    async def sizes(self, tenant: str, job_id: str) -> list[int]:
        """The stored bytes of each committed segment, in order."""
        ...

    async def chunk(self, tenant: str, job_id: str, index: int) -> bytes | None:
        """Segment ``index``'s audio; ``None`` when it is not (or no longer) there."""
        ...

    async def finish(self, tenant: str, job_id: str, status: JobStatus, error: str | None = None) -> JobRecord | None:
        """End an active job as ``status`` (completed, failed, cancelled) and return it as it ended, read in the same
        step (a concurrent delete cannot take what it spoke from whoever counts it); ``None`` when it was not active.
        A job that did not complete gives its stored audio up."""
        ...

    async def delete(self, tenant: str, job_id: str) -> bool:
        """Forget the job and its audio; ``False`` when there was none."""
        ...

    async def delete_many(self, tenant: str, job_ids: Sequence[str]) -> int:
        """Forget these jobs and their audio together (in Redis, two round trips whatever their number: a page of a
        deleted tenant's jobs); how many there were. A runner of one of them commits nothing more: it finds no job."""
        ...


def ended_record(record: JobRecord, status: JobStatus, error: str | None, ttl_s: int) -> JobRecord:
    now = now_s()
    kept = status == "completed"
    return replace(
        record,
        status=status,
        error=error,
        completed_at=int(now),
        expires_at=int(now) + ttl_s,
        stored_bytes=record.stored_bytes if kept else 0,
        characters_done=record.characters_total if kept else record.characters_done,
    )
