"""``/v1/audio/speech/jobs``: long inputs spoken in the background (``docs/jobs.md``, ``gateway/jobs/``)."""

from __future__ import annotations

import contextlib
import json
from typing import TYPE_CHECKING, Annotated, Any

from litestar import Controller, Request, Response, Router, delete, get, post
from litestar.params import FromPath, JSONBody, Parameter
from litestar.response import ServerSentEvent, Stream
from litestar.response.sse import ServerSentEventMessage
from litestar.status_codes import (
    HTTP_200_OK,
    HTTP_202_ACCEPTED,
    HTTP_206_PARTIAL_CONTENT,
    HTTP_409_CONFLICT,
    HTTP_410_GONE,
    HTTP_416_REQUESTED_RANGE_NOT_SATISFIABLE,
)

from gateway.audio.formats import CONTENT_TYPES
from gateway.http.auth.dependencies import Caller
from gateway.http.errors import OpenAIError, error_responses
from gateway.http.json_body import require_json
from gateway.jobs.content import (
    RangeNotSatisfiableError,
    complete_file,
    file_header,
    follow,
    range_under_way,
    requested_range,
)
from gateway.jobs.records import ACTIVE, TERMINAL, JobRecord, now_s
from gateway.jobs.service import shown
from gateway.schemas import (
    SpeechJobCreate,
    SpeechJobDeleted,
    SpeechJobList,
    SpeechJobObject,
)
from gateway.state import gateway_state

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, AsyncIterator

    from gateway.jobs.followers import FollowerPlace
    from gateway.jobs.service import SpeechJobs
    from gateway.settings import JobsSettings

__all__ = ["SpeechJobsController", "jobs_router"]

_JOB_ID = Annotated[str, Parameter(max_length=128)]


def jobs_router(settings: JobsSettings) -> Router:
    """The routes, taking bodies as long as the longest ``input`` a job may have (JSON may spell a character in up to
    six bytes) rather than the server's ``max_body_bytes``."""
    return Router(
        path="/",
        route_handlers=[SpeechJobsController],
        request_max_body_size=settings.max_input_chars * 6 + 64 * 1024,
    )


def _jobs(request: Request[Any, Any, Any]) -> SpeechJobs:
    jobs = gateway_state(request.app).jobs
    assert jobs is not None  # the routes exist only where jobs are enabled
    return jobs


class SpeechJobsController(Controller):
    path = "/v1/audio/speech/jobs"
    tags = ["Audio"]  # noqa: RUF012 - Litestar's declared type

    @post(
        status_code=HTTP_202_ACCEPTED,
        operation_id="createSpeechJob",
        before_request=require_json,
        summary="Speak a long input in the background (up to 500,000 characters unless configured otherwise).",
        description="Counts as one request against your tenant's `requests_per_minute`; formats mp3, aac, wav, pcm.",
        responses=error_responses(400, 401, 403, 404, 413, 415, 429, 503),
    )
    async def create_job(
        self, request: Request[Any, Any, Any], data: JSONBody[SpeechJobCreate], principal: Caller
    ) -> SpeechJobObject:
        return shown(await _jobs(request).create(principal, data))

    @get(
        operation_id="listSpeechJobs",
        summary="Your speech jobs, oldest first, a page at a time.",
        responses=error_responses(400, 401, 503),
    )
    async def list_jobs(
        self,
        request: Request[Any, Any, Any],
        principal: Caller,
        after: Annotated[str | None, Parameter(description="Start after this job id.", max_length=128)] = None,
        limit: Annotated[int, Parameter(description="Jobs per page.", ge=1, le=100)] = 20,
    ) -> SpeechJobList:
        page = await _jobs(request).page(principal.tenant, after=after, limit=limit)
        return SpeechJobList.of_records(page, shown)

    @get(
        "/{job_id:str}",
        operation_id="retrieveSpeechJob",
        summary="One of your speech jobs: its status and progress.",
        responses=error_responses(401, 404, 503),
    )
    async def retrieve_job(
        self, request: Request[Any, Any, Any], job_id: FromPath[_JOB_ID], principal: Caller
    ) -> SpeechJobObject:
        return shown(await _jobs(request).get(principal.tenant, job_id))

    @delete(
        "/{job_id:str}",
        status_code=HTTP_200_OK,
        operation_id="deleteSpeechJob",
        summary="Cancel a queued or running job (its engine work stops at once), or delete an ended one and its audio.",
        responses=error_responses(401, 404, 503),
    )
    async def delete_job(
        self, request: Request[Any, Any, Any], job_id: FromPath[_JOB_ID], principal: Caller
    ) -> SpeechJobObject | SpeechJobDeleted:
        cancelled = await _jobs(request).cancel_or_delete(principal.tenant, job_id)
        return shown(cancelled) if cancelled is not None else SpeechJobDeleted(id=job_id)

    @get(
        "/{job_id:str}/content",
        operation_id="retrieveSpeechJobContent",
        summary="The job's audio as one file; while it runs, what is done streams and the response follows it.",
        description="A single `Range` is honoured (206): of a completed job's file, within its length; of a job "
        "under way, from its first byte to its last as they are committed (the length `*`, as RFC 8673 has it).",
        responses=error_responses(401, 404, 409, 410, 416, 503),
    )
    async def job_content(
        self, request: Request[Any, Any, Any], job_id: FromPath[_JOB_ID], principal: Caller
    ) -> Response[Any]:
        jobs = _jobs(request)
        record = await jobs.get(principal.tenant, job_id)
        _check_content(record)
        media_type = CONTENT_TYPES[record.response_format]
        if record.status in ACTIVE:
            return await _file_under_way(jobs, record, request.headers.get("range"), media_type)
        return await _complete_file(jobs, record, request.headers.get("range"), media_type)

    @get(
        "/{job_id:str}/events",
        operation_id="retrieveSpeechJobEvents",
        summary="The job's progress as server-sent events, to its end.",
        description="`audio.speech.job.progress` events with the job object whenever it advanced, then one "
        "`audio.speech.job.completed`, `.failed`, `.cancelled` or `.expired`. A tenant may follow "
        "`jobs.max_followers_per_tenant` streams at once per replica (one more: 429).",
        responses=error_responses(401, 404, 429, 503),
    )
    async def job_events(
        self, request: Request[Any, Any, Any], job_id: FromPath[_JOB_ID], principal: Caller
    ) -> ServerSentEvent:
        jobs = _jobs(request)
        record = await jobs.get(principal.tenant, job_id)
        place = jobs.follow(principal.tenant.name)
        return ServerSentEvent(_events(jobs, record, place))


def _check_content(record: JobRecord) -> None:
    status = record.shown_status(now_s())
    if status == "expired":
        raise OpenAIError(HTTP_410_GONE, f"The audio of job '{record.id}' has expired.", code="job_expired")
    if status in TERMINAL and status != "completed":
        raise OpenAIError(
            HTTP_409_CONFLICT, f"Job '{record.id}' {status}: it has no audio.", param="job_id", code=f"job_{status}"
        )


async def _file_under_way(
    jobs: SpeechJobs, record: JobRecord, range_header: str | None, media_type: str
) -> Response[Any]:
    """The file so far, following the job: a range of it answered at once (``206`` with its length) when it lies
    within what is committed, else as its bytes are committed, with no length (the job may end before its last)."""
    headers = {"accept-ranges": "bytes", "x-job-status": record.status}
    try:
        wanted = range_under_way(range_header)
    except RangeNotSatisfiableError:
        raise _unsatisfiable("The range starts past the end of any file.", "*") from None
    body = follow(jobs.store, record, jobs.settings.poll_s, wanted, readings=jobs.followers.readings)
    if wanted is None:
        return Stream(body, media_type=media_type, headers=headers)
    headers["content-range"] = f"bytes {wanted.first}-{wanted.last}/*"
    sizes = await jobs.store.sizes(record.tenant, record.id)
    if wanted.last < len(file_header(record.response_format, None)) + sum(sizes[: record.segments_done]):
        headers["content-length"] = str(wanted.length)
    return Stream(body, media_type=media_type, headers=headers, status_code=HTTP_206_PARTIAL_CONTENT)


async def _complete_file(
    jobs: SpeechJobs, record: JobRecord, range_header: str | None, media_type: str
) -> Response[Any]:
    sizes = await jobs.store.sizes(record.tenant, record.id)
    total = len(file_header(record.response_format, 0)) + sum(sizes)
    try:
        wanted = requested_range(range_header, total)
    except RangeNotSatisfiableError:
        raise _unsatisfiable(f"The range lies beyond the {total} bytes of the job's audio.", str(total)) from None
    headers = {"accept-ranges": "bytes", "x-job-status": record.status}
    body = complete_file(jobs.store, record, sizes, wanted)
    if wanted is None:
        return Stream(body, media_type=media_type, headers={**headers, "content-length": str(total)})
    headers |= {"content-length": str(wanted.length), "content-range": f"bytes {wanted.first}-{wanted.last}/{total}"}
    return Stream(body, media_type=media_type, headers=headers, status_code=HTTP_206_PARTIAL_CONTENT)


def _unsatisfiable(message: str, length: str) -> OpenAIError:
    """416, with the file's length (``*`` while it grows, RFC 8673)."""
    return OpenAIError(
        HTTP_416_REQUESTED_RANGE_NOT_SATISFIABLE,
        message,
        param="range",
        code="range_not_satisfiable",
        headers={"content-range": f"bytes */{length}"},
    )


async def _events(jobs: SpeechJobs, record: JobRecord, place: FollowerPlace) -> AsyncIterator[ServerSentEventMessage]:
    """The job whenever it changed, as the job's one poll on this replica reads it, until it ended (or vanished); the
    follower's place is given back however the stream ends."""
    try:
        last: str | None = None
        async with contextlib.aclosing(_readings(jobs, record)) as readings:
            async for reading in readings:
                if reading is None:
                    return
                job = shown(reading)
                ended = job.status not in ACTIVE
                data = job.model_dump_json()
                if data != last or ended:
                    kind = job.status if ended else "progress"
                    body = {"type": f"audio.speech.job.{kind}", "job": json.loads(data)}
                    yield ServerSentEventMessage(data=json.dumps(body))
                    last = data
                if ended:
                    return
    finally:
        place.release()


async def _readings(jobs: SpeechJobs, record: JobRecord) -> AsyncGenerator[JobRecord | None]:
    """The record the request read, then each reading of the job's one poll (shared by its followers here), but for
    a reading taken before the request's own (a poll that joined late): progress never goes back."""
    yield record
    if record.status in ACTIVE:
        async with contextlib.aclosing(jobs.followers.readings(record)) as readings:
            async for reading in readings:
                if reading is None or reading.status not in ACTIVE or reading.segments_done >= record.segments_done:
                    yield reading
