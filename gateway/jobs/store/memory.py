"""Jobs in this process's memory: :class:`MemoryJobStore`, for a single replica and for tests."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from gateway.jobs.records import ACTIVE, JobRecord, JobStatus, now_s
from gateway.jobs.store.base import (
    Refusal,
    SpokenSegment,
    ended_record,
)
from storage import Page

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["MemoryJobStore"]


class MemoryJobStore:
    """The jobs of one process (without ``redis_url``): lost when it stops; expired ones are dropped as they are met."""

    def __init__(self, ttl_s: int) -> None:
        self.ttl_s = ttl_s
        self._records: dict[str, dict[str, JobRecord]] = {}
        self._segments: dict[tuple[str, str], list[str]] = {}
        self._audio: dict[tuple[str, str], list[bytes]] = {}

    async def create(
        self, record: JobRecord, segments: list[str], *, quota_bytes: int, max_jobs: int
    ) -> Refusal | None:
        # No await from the check to the write: no other creation runs in between (one event loop, no lock needed).
        jobs = self._live(record.tenant)
        own = [job for job in jobs.values() if job.belongs_to(record.generation)]
        if len(own) >= max_jobs:
            return Refusal("too_many_jobs", len(own))
        now = now_s()
        held = sum(job.held_bytes(now) for job in own)
        if held + record.reserved_bytes > quota_bytes:
            return Refusal("storage_quota", held)
        jobs[record.id] = record
        self._segments[record.tenant, record.id] = segments
        self._audio[record.tenant, record.id] = []
        return None

    async def get(self, tenant: str, job_id: str) -> JobRecord | None:
        return self._live(tenant).get(job_id)

    async def page(self, tenant: str, *, after: str | None, limit: int) -> Page[JobRecord]:
        jobs = sorted((job for job in self._live(tenant).values() if after is None or job.id > after), key=_by_id)
        return Page.of(jobs[: limit + 1], limit)

    async def segments(self, tenant: str, job_id: str) -> list[str]:
        return self._segments.get((tenant, job_id), [])

    async def start(self, tenant: str, job_id: str) -> JobRecord | None:
        record = await self.get(tenant, job_id)
        if record is None or record.status not in ACTIVE:
            return None
        record = self._records[tenant][job_id] = replace(record, status="running")
        return record

    async def commit(self, tenant: str, job_id: str, index: int, spoken: SpokenSegment) -> bool:
        record = await self.get(tenant, job_id)
        if record is None or record.status != "running" or record.segments_done != index:
            return False
        self._audio[tenant, job_id].append(spoken.audio)
        self._records[tenant][job_id] = replace(
            record,
            segments_done=index + 1,
            characters_done=record.characters_done + spoken.characters,
            characters_charged=record.characters_charged + spoken.charged,
            audio_ms=record.audio_ms + spoken.audio_ms,
            stored_bytes=record.stored_bytes + len(spoken.audio),
        )
        return True

    async def sizes(self, tenant: str, job_id: str) -> list[int]:
        return [len(audio) for audio in self._audio.get((tenant, job_id), [])]

    async def chunk(self, tenant: str, job_id: str, index: int) -> bytes | None:
        audio = self._audio.get((tenant, job_id), [])
        return audio[index] if index < len(audio) else None

    async def finish(self, tenant: str, job_id: str, status: JobStatus, error: str | None = None) -> JobRecord | None:
        record = await self.get(tenant, job_id)
        if record is None or record.status not in ACTIVE:
            return None
        ended = self._records[tenant][job_id] = ended_record(record, status, error, self.ttl_s)
        self._segments.pop((tenant, job_id), None)
        if status != "completed":
            self._audio.pop((tenant, job_id), None)
        return ended

    async def delete(self, tenant: str, job_id: str) -> bool:
        return await self.delete_many(tenant, [job_id]) == 1

    async def delete_many(self, tenant: str, job_ids: Sequence[str]) -> int:
        jobs = self._records.get(tenant, {})
        for job_id in job_ids:
            self._segments.pop((tenant, job_id), None)
            self._audio.pop((tenant, job_id), None)
        return sum(jobs.pop(job_id, None) is not None for job_id in job_ids)

    def _live(self, tenant: str) -> dict[str, JobRecord]:
        """The tenant's jobs, those past both their TTLs dropped (their audio at the first TTL)."""
        jobs = self._records.setdefault(tenant, {})
        now = now_s()
        for job in list(jobs.values()):
            if job.expires_at is None:
                continue
            if now >= job.expires_at + self.ttl_s:
                del jobs[job.id]
            if now >= job.expires_at:
                self._audio.pop((tenant, job.id), None)
        return jobs


def _by_id(record: JobRecord) -> str:
    return record.id
