"""Speaking one job: its segments in order, each through the one speech operation (:meth:`SpeechService.speak`), each
committed to the store before the next starts, one segment per turn at the process's speaking slots
(``gateway/jobs/turns.py``): between two of its segments, the jobs of other tenants speak theirs.

Whoever runs a job (a queue worker on any replica, or this process's tasks without Redis) calls :meth:`JobRunner.run`;
a job taken over after its replica died runs again from its first segment not committed. A commit refused means the
job was cancelled or deleted meanwhile (or another runner holds it): the run stops there.

A segment that fails is tried again, after a pause in which the job gives its turn up (``_SegmentTries``). An engine
that cannot take the segment now (still loading, restarting, overloaded, its breaker open) is waited for, with
backoff, for up to ``engine_wait_s``: a job handed back by a replica that stopped, and taken by one whose engines are
still loading, keeps its place and its progress. An engine that failed while speaking the segment gets
``segment_attempts`` tries in all. A job fails when either runs out, in bounded time, with the engine's error.

Whatever else a segment raises is settled here too, never left to the queue (which took it for a replica's death and
ran the job again at once, twenty times in 0.2 s, then left it ``running`` for good): a segment whose request is not
valid fails the job at once (it never will be), any other fault of the gateway's own is tried ``segment_attempts``
times like an engine's failure, and anything else the run raises fails the job, except the store out of reach, which
the queue hands over (``gateway/jobs/dispatch.py``). Neither the job's ``error`` nor a log line holds the fault's text,
which may quote the input (a pydantic error's ``input_value`` did): only its type, and where it was raised in a log.
Nor does a log line hold the message of an engine's failure, which may quote the text as well (ChatTTS's normalizer
raised ``ValueError: invalid literal for int() with base 10: '82.8'`` on "82.8-2", and its worker passes that on): it
names the failure by its type, and only the job's ``error``, its tenant's to read, says what the engine said.
"""

from __future__ import annotations

import asyncio
import random
import traceback
from typing import TYPE_CHECKING

from pydantic import ValidationError

from auth import ANONYMOUS, Principal, Tenant
from auth.settings import TenantLimits
from engines.base import InvalidSynthesisRequestError
from engines.errors import EngineNotReadyError, EngineOverloadedError, SynthesisFailedError
from gateway.jobs.records import SEGMENT_FORMATS, JobRecord
from gateway.jobs.store import SpokenSegment
from gateway.schemas import SpeechRequest
from gateway.speech.contract import Admission, job_record
from gateway.speech.errors import FailoverExhaustedError, ResponseTruncatedError, SpeechError
from lifecycle import naming
from storage import STORAGE_ERRORS

if TYPE_CHECKING:
    from auth import AuthStore
    from gateway.jobs.store import JobStore
    from gateway.jobs.turns import TenantTurns
    from gateway.speech.service import SpeechService

__all__ = ["JOBS_PATH", "JobRunner", "fault"]

logger = naming.logger("jobs")

JOBS_PATH = "/v1/audio/speech/jobs"


class _SegmentFaultError(Exception):
    """A segment's try raised something the speech service does not raise of itself (a fault of the gateway's own):
    tried again like an engine's failure; its message names the fault's type, never its text."""

    def __init__(self, exc: Exception) -> None:
        super().__init__(f"the gateway failed on it ({type(exc).__name__})")


# What makes one try of a segment fail without ending the job at once: the engine could not serve it then.
_RETRIED = (
    SynthesisFailedError,
    EngineNotReadyError,
    EngineOverloadedError,
    ResponseTruncatedError,
    FailoverExhaustedError,
    _SegmentFaultError,
)
ENGINE_WAIT_S = 300.0
"""How long one segment waits for an engine that cannot take it (not ready, overloaded) before the job fails: a
replica's engines load within a minute or two (ChatTTS on a CPU), and a worker that died is replaced as fast; one not
back within five minutes is broken (a model that does not load, a remote engine gone)."""
_FIRST_PAUSE_S = 0.5
"""The pause before a segment's second try; each later pause doubles, up to ``_MAX_PAUSE_S``."""
_MAX_PAUSE_S = 10.0


_COMMIT_GRACE_S = 5.0
"""How long a run that stops (its job failed, cancelled, or handed back) waits for the commit of the segment it spoke
last: a store's write takes milliseconds, and what was spoken is then kept (and counted) rather than lost."""


class _JobFailedError(Exception):
    """The job cannot go on: its message is the job's ``error``."""


def fault(exc: BaseException) -> str:
    """What a log may say of an unexpected ``exc``: its type and the line that raised it, not its message (which may
    quote the input: a pydantic error's ``input_value`` holds the head and tail of the text it refused)."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    return f"{type(exc).__module__}.{type(exc).__qualname__}{where}"


def _invalid(exc: ValidationError) -> str:
    """A segment's request refused by its model, as each error's place, code and message without the input."""
    errors = exc.errors(include_input=False, include_url=False, include_context=False)
    return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['type']}: {e['msg']}" for e in errors)


def _loggable(exc: Exception) -> str:
    """What a log may say of a segment's failed try: an engine's refusal as itself (its engine's name and state),
    anything else by its type alone (and that of the error it wraps), never its message, which may quote the text."""
    if (refusal := _cannot_take(exc)) is not None:
        return str(refusal)
    wrapped = f" ({type(exc.error).__name__})" if isinstance(exc, FailoverExhaustedError) else ""
    return type(exc).__name__ + wrapped


def _cannot_take(exc: Exception) -> EngineNotReadyError | EngineOverloadedError | None:
    """The engine's refusal of the segment (not ready, overloaded), as itself or as the error every engine of its
    model gave (``FailoverExhaustedError``); ``None`` for a failure while speaking it."""
    error = exc.error if isinstance(exc, FailoverExhaustedError) else exc
    return error if isinstance(error, EngineNotReadyError | EngineOverloadedError) else None


class _SegmentTries:
    """The failed tries of one segment, and the pause before its next: the wait for an engine that cannot take it is
    bounded by ``wait_s`` from its first refusal, failures while speaking it by ``attempts`` tries in all; the pauses
    double from ``_FIRST_PAUSE_S`` to ``_MAX_PAUSE_S``, each jittered, so that the jobs a replica took back at once
    do not knock on the engine together (and never shorter than an overloaded engine's ``retry_after_s``)."""

    def __init__(self, attempts: int, wait_s: float) -> None:
        self._attempts = attempts
        self._wait_s = wait_s
        self._failures = 0
        self._pause_s = _FIRST_PAUSE_S
        self._wait_ends: float | None = None

    def pause_after(self, exc: Exception) -> float:
        """The pause before the next try, after ``exc`` failed this one.

        Raises:
            _JobFailedError: no try is left.
        """
        now = asyncio.get_running_loop().time()
        pause = self._pause_s * random.uniform(0.5, 1.0)  # noqa: S311 - jitter, not a secret
        self._pause_s = min(_MAX_PAUSE_S, 2 * self._pause_s)
        refusal = _cannot_take(exc)
        if refusal is None:
            self._failures += 1
            if self._failures >= self._attempts:
                raise _JobFailedError(f"A segment could not be spoken: {exc}") from exc
            return pause
        if self._wait_ends is None:
            self._wait_ends = now + self._wait_s
        if now >= self._wait_ends:
            waited = f" (waited {self._wait_s:g} s for the engine)"
            raise _JobFailedError(f"A segment could not be spoken: {exc}{waited}") from exc
        if isinstance(refusal, EngineOverloadedError):
            pause = max(pause, refusal.retry_after_s)
        return min(pause, self._wait_ends - now)  # the last try at the end of the wait


async def _let_finish(commit: asyncio.Future[bool]) -> None:
    """Let the commit in flight of a run that stops finish, for up to ``_COMMIT_GRACE_S``: cancelled, the segment it
    carried was neither stored nor counted (a job that failed on its next segment showed 0 characters done where one
    had been spoken). Its error, if any, is the store's, which the run's ending meets again."""
    try:
        await asyncio.wait({commit}, timeout=_COMMIT_GRACE_S)
    finally:
        if not commit.done():
            commit.cancel()
        elif not commit.cancelled():
            commit.exception()  # retrieved, so that asyncio does not log it as lost


class JobRunner:
    """Speaks jobs of the store through the speech service, counting each in its tenant's usage once it completed."""

    def __init__(
        self,
        store: JobStore,
        speech: SpeechService,
        tenants: AuthStore,
        turns: TenantTurns,
        *,
        segment_attempts: int,
        engine_wait_s: float = ENGINE_WAIT_S,
    ) -> None:
        """``segment_attempts``: the tries of a segment its engine failed to speak; ``engine_wait_s``: how long a
        segment waits for an engine that cannot take it (not ready, overloaded)."""
        self.store = store
        self.turns = turns
        self._speech = speech
        self._tenants = tenants
        self._attempts = segment_attempts
        self._engine_wait_s = engine_wait_s

    async def run(self, tenant_name: str, job_id: str) -> None:
        """Speak the job from its first segment not committed to its end (or until it is cancelled or deleted), one
        segment per turn of its tenant's; it stays ``queued`` until its first turn. Whatever fails it, the job ends
        ``failed`` with its ``error``.

        Raises:
            STORAGE_ERRORS: the store is out of reach (the queue hands the job over, to resume it; nothing else can
                even mark it failed).
        """
        try:
            tenant = await self._tenant(tenant_name)
            if await self._speak_all(Principal(tenant, "job"), tenant_name, job_id):
                await self._complete(tenant, job_id)
        except _JobFailedError as exc:
            await self.fail(tenant_name, job_id, str(exc))
        except STORAGE_ERRORS:  # outside a segment's try (which settles its own faults), the stores' calls raise these
            raise
        except Exception as exc:  # a fault of the gateway's own: the job ends rather than run again as it failed
            await self.fail_for(tenant_name, job_id, exc)

    async def fail_for(self, tenant_name: str, job_id: str, exc: Exception) -> None:
        """End the job ``failed`` for a fault of the gateway's own, named by its type alone (as in the log)."""
        extra = {"record": {"job_id": job_id, "tenant": tenant_name, "fault": fault(exc)}}
        logger.error("a speech job's run failed", extra=extra)  # no traceback: its last line may quote the text
        await self.fail(tenant_name, job_id, f"The job could not go on: the gateway failed ({type(exc).__name__}).")

    async def fail(self, tenant_name: str, job_id: str, error: str) -> None:
        """End the job ``failed`` with ``error`` (the job's own reason, shown to its tenant), counting what it spoke
        in the usage of the tenant that made it (:meth:`_maker`); nothing when it is no longer active."""
        record = await self.store.finish(tenant_name, job_id, "failed", error)
        if record is None:
            return
        logger.warning("speech job failed", extra={"record": {"job_id": job_id, "tenant": tenant_name}})
        if (maker := await self._maker(record)) is not None:
            self._speech.account_job(maker, record.charged_characters, record.audio_ms / 1000)

    async def _maker(self, record: JobRecord) -> Tenant | None:
        """The tenant, of the generation that made the job, whose usage counts it. Not the tenant its name holds now
        when that is another generation (the one that made the job was deleted, and the name created again while the
        job ran): the job's own generation, whose usage the deletion retired, as it does with what its cancelled jobs
        spoke. ``None`` for a job from before jobs recorded a generation, whose tenant is gone: none to count it in."""
        if record.tenant == ANONYMOUS.name:
            return ANONYMOUS
        tenant = await self._tenants.get_tenant(record.tenant)
        if tenant is not None and record.belongs_to(tenant.generation):
            return tenant
        if not record.generation:
            return None
        return Tenant(record.tenant, TenantLimits(), None, generation=record.generation)  # no budget left to spend

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
        waits for the store; the commits still go in order, each awaited before the next is sent, and the last one
        before the run stops, however it stops (``_let_finish``). A segment that failed is tried again after a pause
        (``_SegmentTries``), its turn given up meanwhile: the jobs of other tenants, on other engines, go on.
        """
        record: JobRecord | None = None
        segments: list[str] = []
        index = 0
        tries = self._tries()
        committing: asyncio.Task[bool] | None = None
        try:
            while record is None or index < len(segments):
                try:
                    async with self.turns.turn(tenant):
                        if record is None:  # the first turn: the job runs from here
                            record = await self.store.start(tenant, job_id)
                            if record is None:
                                return False  # cancelled or deleted while it waited, or ended by a runner thought dead
                            if not record.belongs_to(principal.tenant.generation):  # a deleted tenant's, made late
                                await self.store.finish(tenant, job_id, "cancelled")
                                return False
                            segments, index = await self.store.segments(tenant, job_id), record.segments_done
                            if index >= len(segments):
                                break
                        spoken = await self._segment(principal, record, segments[index])
                except _RETRIED as exc:
                    await self._pause(tries, exc, job_id, index)
                    continue
                if committing is not None and not await committing:
                    return False
                committing = asyncio.ensure_future(self.store.commit(tenant, job_id, index, spoken))
                index, tries = index + 1, self._tries()
            return committing is None or await committing
        finally:
            if committing is not None:
                await _let_finish(committing)

    def _tries(self) -> _SegmentTries:
        return _SegmentTries(self._attempts, self._engine_wait_s)

    async def _pause(self, tries: _SegmentTries, exc: Exception, job_id: str, index: int) -> None:
        """Wait before the segment's next try (or fail the job: no try left)."""
        pause = tries.pause_after(exc)
        extra = {"record": {"job_id": job_id, "segment": index, "pause_s": round(pause, 2)}}
        logger.info("a speech job's segment is tried again after a pause: %s", _loggable(exc), extra=extra)
        await asyncio.sleep(pause)

    async def _segment(self, principal: Principal, record: JobRecord, text: str) -> SpokenSegment:
        """One try of one segment's audio in the job's stored format.

        Raises:
            _RETRIED: the engine could not speak it now, or the gateway failed on it (``_SegmentTries`` says whether
                to try again).
            _JobFailedError: the segment can never be spoken (a voice deleted, a model no longer allowed, a request
                that is not valid: a segment longer than a request may be, stored by a version that made them).
        """
        fields = {**record.request, "input": text, "response_format": SEGMENT_FORMATS[record.response_format]}
        try:
            request = SpeechRequest.model_validate(fields)
        except ValidationError as exc:
            raise _JobFailedError(f"A segment could not be spoken: its request is not valid: {_invalid(exc)}") from None
        try:
            audio, seconds, charged = await self._speak(principal, request, record.id)
        except _RETRIED:
            raise
        except (SpeechError, InvalidSynthesisRequestError) as exc:
            raise _JobFailedError(str(exc)) from exc
        except Exception as exc:
            extra = {"record": {"job_id": record.id, "fault": fault(exc)}}
            logger.warning("a speech job's segment failed in the gateway", extra=extra)
            raise _SegmentFaultError(exc) from None
        return SpokenSegment(audio, len(text), round(seconds * 1000), charged)

    async def _speak(self, principal: Principal, request: SpeechRequest, job_id: str) -> tuple[bytes, float, int]:
        """The segment's audio, its seconds, and what it was charged (what it made the engine say)."""
        record = job_record(job_id)
        async with await self._speech.speak(principal, request, record, admission=Admission.OF_JOB) as reply:
            audio = reply.whole if reply.whole is not None else b"".join([part async for part in reply.audio()])
            charged = len(request.input) if reply.characters is None else reply.characters
            return audio, reply.outcome.clock.seconds, charged

    async def _complete(self, tenant: Tenant, job_id: str) -> None:
        """End the job ``completed`` and count all of it in the usage of ``tenant``, the generation that ran it, once
        (a failure is counted by :meth:`fail`, a cancel by whoever cancels it)."""
        if (record := await self.store.finish(tenant.name, job_id, "completed")) is not None:
            self._speech.account_job(tenant, record.charged_characters, record.audio_ms / 1000)
