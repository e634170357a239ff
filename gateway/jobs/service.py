"""Speech jobs as their routes use them: create one (checked, admitted, stored, queued), read, list, cancel, delete.

A job is admitted as one request of its tenant (``requests_per_minute``) when it is created; its characters are
bounded by the tenant's job cap rather than by the per-minute character budget (which a book would exceed at once),
and its usage is recorded once, when it ends: all of it when it completes (``gateway/jobs/runner.py``), what it spoke
when it fails or is cancelled.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from gateway.jobs.followers import JobFollowers
from gateway.jobs.records import ACTIVE, SEGMENT_FORMATS, JobRecord, now_s, reservation_bytes
from gateway.schemas import SpeechJobObject, SpeechJobProgress, SpeechRequest
from gateway.speech.errors import (
    InputTooLongError,
    InvalidSpeechRequestError,
    JobQuotaError,
    OverLimitError,
    UnknownJobError,
)
from gateway.speech.segments import split_text
from gateway.text import is_ssml
from storage import MAX_PAGE, Page, sortable_id

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from auth import Principal, Tenant
    from gateway.jobs.dispatch import JobDispatch
    from gateway.jobs.followers import FollowerPlace
    from gateway.jobs.store import JobStore, Refusal
    from gateway.schemas import SpeechJobCreate
    from gateway.settings import JobsSettings
    from gateway.speech.service import SpeechService

__all__ = ["SpeechJobs", "shown"]

_NOT_IN_RECORD = frozenset({"input", "metadata", "stream_format"})


class SpeechJobs:
    """The jobs of every tenant of this gateway, whichever replica speaks them."""

    def __init__(self, store: JobStore, dispatch: JobDispatch, speech: SpeechService, settings: JobsSettings) -> None:
        self.store = store
        self.dispatch = dispatch
        self.settings = settings
        self.followers = JobFollowers(store, settings.poll_s, settings.max_followers_per_tenant)
        self._speech = speech

    async def close(self) -> None:
        """Stop the polls of followed jobs (their followers' streams end)."""
        await self.followers.close()

    async def create(self, principal: Principal, body: SpeechJobCreate) -> JobRecord:
        """Check, admit, store and queue a new job.

        Raises:
            SpeechError: a body the jobs do not take, a model or voice the tenant may not use, too many jobs or too
                much stored audio (:class:`~gateway.speech.errors.JobQuotaError`).
            RateLimitExceededError: over the tenant's requests per minute (429).
        """
        tenant = principal.tenant
        self._check(tenant, body)
        segments = split_text(body.input, self.settings.segment_chars)
        request = body.model_dump(mode="json", exclude=set(_NOT_IN_RECORD))
        await self._speech.check(principal, SpeechRequest.model_validate({**request, "input": segments[0]}))
        await self._speech.open_job(tenant)  # one request of the tenant's, whatever its length
        record = JobRecord(
            id=sortable_id("job_"),
            tenant=tenant.name,
            request=request,
            characters_total=len(body.input),
            segments_total=len(segments),
            created_at=int(now_s()),
            metadata=body.metadata,
            reserved_bytes=reservation_bytes(len(body.input), body.response_format, body.speed),
            generation=tenant.generation,
        )
        quota, max_jobs = self.quota_bytes(tenant), self.settings.max_jobs_per_tenant
        refusal = await self.store.create(record, segments, quota_bytes=quota, max_jobs=max_jobs)
        if refusal is not None:
            raise _refused(refusal, record.reserved_bytes, quota)
        await self.dispatch.submit(tenant.name, record.id)
        return record

    def max_input_chars(self, tenant: Tenant) -> int:
        return tenant.limits.job_input_characters or self.settings.max_input_chars

    def quota_bytes(self, tenant: Tenant) -> int:
        stored = tenant.limits.job_storage_bytes
        return self.settings.storage_quota_bytes if stored is None else stored

    def _check(self, tenant: Tenant, body: SpeechJobCreate) -> None:
        if body.stream_format != "audio":
            raise InvalidSpeechRequestError(
                "A job's audio is fetched from its content; follow its progress at its events.",
                kind="unsupported_value",
                param="stream_format",
            )
        if body.response_format not in SEGMENT_FORMATS:
            raise InvalidSpeechRequestError(
                f"Jobs are spoken in {', '.join(SEGMENT_FORMATS)}; not in {body.response_format}.",
                kind="unsupported_value",
                param="response_format",
            )
        if is_ssml(body.input):  # cut into segments by sentence, a document would be cut between its tags
            raise InvalidSpeechRequestError(
                "A job's input is plain text: SSML is read by /v1/audio/speech, not by jobs.",
                kind="unsupported_value",
                param="input",
            )
        cap = self.max_input_chars(tenant)
        if len(body.input) > cap:
            raise InputTooLongError(
                f"input holds {len(body.input)} characters; a job of your tenant may hold at most {cap}.", limit=cap
            )

    async def get(self, tenant: Tenant, job_id: str) -> JobRecord:
        """The tenant's job (another tenant's is not found either, nor a deleted tenant's of the same name).

        Raises:
            UnknownJobError: no such job.
        """
        record = await self.store.get(tenant.name, job_id)
        if record is None or not record.belongs_to(tenant.generation):
            raise UnknownJobError(job_id)
        return record

    def follow(self, tenant: str) -> FollowerPlace:
        """A place for one more follower of the tenant's jobs' events, to release when its stream ends.

        Raises:
            OverLimitError: the tenant has ``jobs.max_followers_per_tenant`` followers on this replica.
        """
        place = self.followers.admit(tenant)
        if place is None:
            cap = self.followers.max_per_tenant
            raise OverLimitError(
                f"Your tenant follows {cap} jobs' events at once, the most it may; close one, or poll the job.",
                kind="concurrency_limit_exceeded",
                retry_after_s=1,
            )
        return place

    async def page(self, tenant: Tenant, *, after: str | None, limit: int) -> Page[JobRecord]:
        """Up to ``limit`` of the tenant's jobs after ``after``, passing over those of a deleted tenant of the same
        name (left by a race with its deletion: rare, so a page seldom needs more than one read of the store)."""
        owned: list[JobRecord] = []
        async for records, more in self._owned_pages(tenant, after, limit):
            owned.extend(records)
            if len(owned) >= limit or not more:
                return Page(owned[:limit], has_more=len(owned) > limit or more)
        return Page(owned, has_more=False)

    async def _owned_pages(
        self, tenant: Tenant, after: str | None, limit: int
    ) -> AsyncIterator[tuple[list[JobRecord], bool]]:
        """The store's pages of the tenant's jobs after ``after``, each as its jobs of the tenant's generation (a
        deleted tenant's of the same name passed over) and whether more follow."""
        while True:
            page = await self.store.page(tenant.name, after=after, limit=limit)
            yield [record for record in page.data if record.belongs_to(tenant.generation)], page.has_more
            if not page.has_more:
                return
            after = page.data[-1].id

    async def cancel_or_delete(self, tenant: Tenant, job_id: str) -> JobRecord | None:
        """Cancel the job if it is queued or running (its engine work stops now; what it spoke is counted in the
        tenant's usage) and return it; else delete it and its audio and return ``None``. Of concurrent calls on an
        active job, one cancels it and every other that found it active answers it as it then is, deleting nothing
        (``docs/jobs.md``); what it spoke is counted once, even when a later call deletes it at once.

        Raises:
            UnknownJobError: no such job.
        """
        record = await self.get(tenant, job_id)
        if record.status in ACTIVE:
            cancelled = await self._cancel(tenant, job_id)
            if cancelled is None:  # ended meanwhile (a concurrent DELETE cancelled it): this one answers, deletes not
                return await self.get(tenant, job_id)
            return cancelled
        if not await self.store.delete(tenant.name, job_id):
            raise UnknownJobError(job_id)
        return None

    async def forget_tenant(self, tenant: Tenant) -> None:
        """The tenant was deleted: cancel its queued and running jobs wherever they run (what they spoke is counted
        in its usage, which the deletion retires) and delete all of its jobs and their audio, a page at a time, so
        that no step's work grows with its ``jobs.max_jobs_per_tenant``. A job of another generation of its name (a
        tenant created again meanwhile) is left alone."""
        async for owned, _ in self._owned_pages(tenant, None, MAX_PAGE):
            for record in owned:
                if record.status in ACTIVE:
                    await self._cancel(tenant, record.id)
            await self.store.delete_many(tenant.name, [record.id for record in owned])

    async def _cancel(self, tenant: Tenant, job_id: str) -> JobRecord | None:
        """End an active job as cancelled, stop its engine work wherever it runs, and count what it spoke in the
        tenant's usage; ``None`` when it was not active any more (whoever ended it counted it)."""
        cancelled = await self.store.finish(tenant.name, job_id, "cancelled")
        if cancelled is not None:
            await self.dispatch.cancel(tenant.name, job_id)
            self._speech.account_job(tenant, cancelled.charged_characters, cancelled.audio_ms / 1000)
        return cancelled


def shown(record: JobRecord) -> SpeechJobObject:
    """The job as the API shows it."""
    return SpeechJobObject(
        id=record.id,
        status=record.shown_status(now_s()),
        progress=SpeechJobProgress(
            characters_done=record.characters_done,
            characters_total=record.characters_total,
            audio_seconds=round(record.audio_ms / 1000, 3),
        ),
        model=record.request["model"],
        response_format=record.request["response_format"],
        created_at=record.created_at,
        completed_at=record.completed_at,
        expires_at=record.expires_at,
        error=record.error,
        metadata=record.metadata,
    )


def _refused(refusal: Refusal, reserved: int, quota_bytes: int) -> JobQuotaError:
    if refusal.reason == "too_many_jobs":
        message = f"Your tenant holds {refusal.held} jobs, the most it may; delete ended ones or let them expire."
    else:
        message = (
            f"This job needs about {reserved} bytes of stored audio, and your tenant's jobs hold {refusal.held} of its "
            f"quota of {quota_bytes}; delete finished jobs, wait for them to expire, or send a shorter input."
        )
    reason: Literal["too_many_jobs", "storage_quota"] = (
        "too_many_jobs" if refusal.reason == "too_many_jobs" else "storage_quota"
    )
    return JobQuotaError(message, reason=reason, held=refusal.held)
