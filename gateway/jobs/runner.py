"""Speaking one job: its segments in order, each through the one speech operation (:meth:`SpeechService.speak`), each
committed to the store before the next starts, one segment per turn at the process's speaking slots
(``gateway/jobs/turns.py``): between two of its segments, the jobs of other tenants speak theirs.

Whoever runs a job (a queue worker on any replica, or this process's tasks without Redis) calls :meth:`JobRunner.run`;
a job taken over after its replica died runs again from its first segment not committed. A commit refused means the
job was cancelled or deleted meanwhile (or another runner holds it): the run stops there.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from auth import ANONYMOUS, Principal
from engines.base import InvalidSynthesisRequestError
from engines.errors import EngineNotReadyError, EngineOverloadedError, SynthesisFailedError
from gateway.jobs.records import SEGMENT_FORMATS, JobRecord, JobStatus
from gateway.jobs.store import SpokenSegment
from gateway.schemas import SpeechRequest
from gateway.speech.contract import Admission, job_record
from gateway.speech.errors import FailoverExhaustedError, ResponseTruncatedError, SpeechError
from lifecycle import naming

if TYPE_CHECKING:
    from auth import AuthStore, Tenant
    from gateway.jobs.store import JobStore
    from gateway.jobs.turns import TenantTurns
    from gateway.speech.service import SpeechService

__all__ = ["JOBS_PATH", "JobRunner"]

logger = naming.logger("jobs")

JOBS_PATH = "/v1/audio/speech/jobs"
# What makes one try of a segment fail without ending the job at once: the engine could not serve it then.
_RETRIED = (
    SynthesisFailedError,
    EngineNotReadyError,
    EngineOverloadedError,
    ResponseTruncatedError,
    FailoverExhaustedError,
)


class _JobFailedError(Exception):
    """The job cannot go on: its message is the job's ``error``."""


class JobRunner:
    """Speaks jobs of the store through the speech service, counting each in its tenant's usage once it completed."""

    def __init__(
        self, store: JobStore, speech: SpeechService, tenants: AuthStore, turns: TenantTurns, *, segment_attempts: int
    ) -> None:
        self.store = store
        self.turns = turns
        self._speech = speech
        self._tenants = tenants
        self._attempts = segment_attempts

    async def run(self, tenant_name: str, job_id: str) -> None:
        """Speak the job from its first segment not committed to its end (or until it is cancelled or deleted), one
        segment per turn of its tenant's; it stays ``queued`` until its first turn."""
        tenant: Tenant | None = None
        try:
            tenant = await self._tenant(tenant_name)
            if await self._speak_all(Principal(tenant, "job"), tenant_name, job_id):
                await self._end(tenant, job_id, "completed")
        except _JobFailedError as exc:
            logger.warning("speech job failed", extra={"record": {"job_id": job_id, "tenant": tenant_name}})
            if tenant is None:
                await self.store.finish(tenant_name, job_id, "failed", str(exc))
            else:
                await self._end(tenant, job_id, "failed", str(exc))

    async def _tenant(self, name: str) -> Tenant:
        if name == ANONYMOUS.name:
            return ANONYMOUS
        tenant = await self._tenants.get_tenant(name)
        if tenant is None:
            raise _JobFailedError("The job's tenant no longer exists.")
        return tenant

    async def _speak_all(self, principal: Principal, tenant: str, job_id: str) -> bool:
        """Every segment not committed yet, one per turn; ``False`` when the job is gone or over, or a commit was
        refused (the job is no longer this run's).

        A segment's commit overlaps the wait for the next turn and the next segment's synthesis, so the engine never
        waits for the store; the commits still go in order, each awaited before the next is sent.
        """
        record: JobRecord | None = None
        segments: list[str] = []
        index = 0
        committing: asyncio.Task[bool] | None = None
        try:
            while record is None or index < len(segments):
                async with self.turns.turn(tenant):
                    if record is None:  # the first turn: the job runs from here
                        record = await self.store.start(tenant, job_id)
                        if record is None:
                            return False  # cancelled or deleted while it waited, or ended by a runner thought dead
                        segments, index = await self.store.segments(tenant, job_id), record.segments_done
                        if index >= len(segments):
                            break
                    spoken = await self._segment(principal, record, segments[index])
                if committing is not None and not await committing:
                    return False
                committing = asyncio.ensure_future(self.store.commit(tenant, job_id, index, spoken))
                index += 1
            return committing is None or await committing
        finally:
            if committing is not None and not committing.done():
                committing.cancel()

    async def _segment(self, principal: Principal, record: JobRecord, text: str) -> SpokenSegment:
        """One segment's audio in the job's stored format; tried up to ``segment_attempts`` times."""
        request = SpeechRequest.model_validate(
            {**record.request, "input": text, "response_format": SEGMENT_FORMATS[record.response_format]}
        )
        for attempt in range(1, self._attempts + 1):
            try:
                audio, seconds, charged = await self._speak(principal, request, record.id)
            except _RETRIED as exc:
                if attempt == self._attempts:
                    raise _JobFailedError(f"A segment could not be spoken: {exc}") from exc
            except (SpeechError, InvalidSynthesisRequestError) as exc:  # a voice deleted, a model no longer allowed
                raise _JobFailedError(str(exc)) from exc
            else:
                return SpokenSegment(audio, len(text), round(seconds * 1000), charged)
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _speak(self, principal: Principal, request: SpeechRequest, job_id: str) -> tuple[bytes, float, int]:
        """The segment's audio, its seconds, and what it was charged (what it made the engine say)."""
        record = job_record(job_id)
        async with await self._speech.speak(principal, request, record, admission=Admission.OF_JOB) as reply:
            audio = reply.whole if reply.whole is not None else b"".join([part async for part in reply.audio()])
            charged = len(request.input) if reply.characters is None else reply.characters
            return audio, reply.outcome.clock.seconds, charged

    async def _end(self, tenant: Tenant, job_id: str, status: JobStatus, error: str | None = None) -> None:
        """End the job and count it in the tenant's usage, once: all of it when it completed, what it spoke when it
        failed (a cancel is counted by whoever cancels it)."""
        if (record := await self.store.finish(tenant.name, job_id, status, error)) is not None:
            self._speech.account_job(tenant, record.charged_characters, record.audio_ms / 1000)
