"""From a validated :class:`SpeechRequest` to encoded audio leaving as the engine speaks.

The order of a request: the plan (the tenant may use the model; the engine and voice resolve) → admission (the
tenant's limits admit it, 429 otherwise; a concurrent-stream lease is held until the response ends) → the audio
cache answers, or the engine synthesizes once for every identical request in flight (single-flight) and a complete
result is cached.

:meth:`SpeechService.speak` returns once the first encoded bytes exist, so that a request failing early gets a clean
HTTP error; after that the audio streams, and a failure can only end the stream.

Beside it: the reply (``reply.py``), the cache's key and record (``cache_record.py``), and the operation's contract,
how a request is admitted and its record (``contract.py``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING

from engines.scheduling import TenantShare
from gateway.audio import open_encoder, whole_file
from gateway.observability.tracing import span
from gateway.schemas import MAX_INPUT_CHARS, EngineNodeSpeechRequest
from gateway.settings import SpeechSettings
from gateway.speech.alignment import (
    Alignment,
    OnCallerText,
    SpeechChunk,
)
from gateway.speech.background import encode_in_background
from gateway.speech.cache_record import fitted_words, hit_chunks, pack_record, plan_key, tenant_scope, unpack_record
from gateway.speech.contract import Admission, SpeechRecord
from gateway.speech.delivery import AudioClock, encode_timed
from gateway.speech.errors import InputTooLongError
from gateway.speech.failover import Failover
from gateway.speech.reply import Outcome, SpeechReply
from gateway.speech.segments import SegmentedStream, script_segments, split_text
from gateway.text import Markup, read_script
from lifecycle import BackgroundTasks

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Sequence
    from contextlib import AbstractAsyncContextManager

    from auth import Principal, Tenant
    from auth.usage import UsageLedger
    from engines.backend import EngineBackend, PcmStream
    from engines.base import SynthesisRequest
    from engines.scheduling import Priority
    from gateway.audio import AudioFormat
    from gateway.observability.metrics import SpeechMetrics
    from gateway.schemas import SpeechRequest
    from gateway.speech.admission import AdmissionControl
    from gateway.speech.cache import AudioCache
    from gateway.speech.failover import SpokenStream
    from gateway.speech.plan import Planner, SpeechPlan
    from gateway.speech.singleflight import SingleFlight
    from gateway.text import Script

__all__ = ["SpeechService", "tenant_share"]

logger = logging.getLogger("chattts_gateway.speech")


class SpeechService:
    """Plans, admits, caches and streams speech requests."""

    def __init__(  # noqa: PLR0917 - the parts it orchestrates
        self,
        planner: Planner,
        admission: AdmissionControl,
        cache: AudioCache,
        flights: SingleFlight,
        usage: UsageLedger,
        metrics: SpeechMetrics,
        *,
        max_segment_chars: int = SpeechSettings().max_segment_chars,
        max_input_chars: int = SpeechSettings().max_input_chars,
        job_priority: Priority | None = "low",
    ) -> None:
        self.planner = planner
        self._admission = admission
        self.cache = cache
        self.flights = flights
        self._metrics = metrics
        self._usage = usage
        self._outcomes: dict[str, Outcome] = {}
        self.failover = Failover(planner.router, metrics.retries)
        self.max_segment_chars = max_segment_chars
        """A longer text is spoken in segments, a job each (``speech.max_segment_chars``)."""
        self.max_input_chars = max_input_chars
        """The most any tenant's input cap may allow (``speech.max_input_chars``)."""
        self.job_priority = job_priority
        """The engines' priority class of a speech job's segments (``jobs.priority``; ``None``: the tenant's own)."""
        self.background = BackgroundTasks("the speech service")
        """The releases of replies abandoned before they were sent (closing an exit stack twice is harmless: after a
        normal end the finalizer finds nothing left to release)."""

    async def speak(
        self,
        principal: Principal,
        request: SpeechRequest,
        record: SpeechRecord,
        *,
        admission: Admission = Admission.PER_REQUEST,
        markup: Markup = Markup.PLAIN,
        script: Script | None = None,
        dictionaries: Sequence[tuple[str, str | None]] | None = None,
        stream: AbstractAsyncContextManager[None] | None = None,
    ) -> SpeechReply:
        """Start serving ``request`` for ``principal``: the one way every transport speaks (the HTTP endpoint, each
        realtime session's segments and responses). Returns once the first audio bytes exist; the caller owns the
        reply and closes it.

        Args:
            admission: How the request is admitted and counted (``gateway/speech/contract.py``): on its own, as a
                part of a WebSocket session (:meth:`open_session`), or as a segment of a speech job.
            markup: The markup the API honours in ``request.input`` (``gateway/text``): SSML on OpenAI's speech route,
                break tags on ElevenLabs' routes; a plain text costs one prefix check.
            script: What the request says, read already (a dialogue's turns, each in its voice): instead of
                ``request.input``, which then only counts its characters.
            dictionaries: The pronunciation dictionaries the request names (``(id, version id or None)`` each);
                ``None``: the tenant's defaults. Timestamps name the caller's characters all the same.
            stream: The stream a session's part holds while it speaks (``gateway/sessions/streams.py``): entered
                before its admission, released with the reply.

        Raises:
            SpeechError: an input over the tenant's cap, a model the tenant may not use, an unknown model or voice, a
                pronunciation dictionary the tenant does not have or a phoneme-only rule that matched.
            MarkupError: markup that cannot be read, or a script its pronunciations leave silent (400).
            RateLimitExceededError: over one of the tenant's limits (429).
            LimitsUnavailableError: the limits' storage is unreachable and they fail closed.
            FailoverExhaustedError, EngineOverloadedError: the engines cannot serve it now.
        """
        _describe(record, principal.tenant, request)
        record.api_key_id = _key_id(principal)
        if admission.own_request:  # a session's parts and a job's segments are capped by their own rules
            self._check_input(principal.tenant, request)
        script = self._script(request, markup, script)
        with span("speech.plan"):
            plan = await self.planner.plan(principal, request, script, dictionaries=dictionaries)
        record.characters = plan.characters  # charged what it makes the engine say (gateway/speech/plan.py)
        tenant = principal.tenant
        key = self._cache_key(plan, tenant)
        finish = AsyncExitStack()
        try:
            if stream is not None:
                await finish.enter_async_context(stream)
            if not admission.admitted_here:
                limits, cached = None, await self.cache.get(key)
            else:
                # Admission (limits and stream lease: one script) and the cache lookup travel together: one round
                # trip to Redis before the first byte of a cache hit. A refused request's lookup is simply not used.
                own = admission.own_request
                admitted = self._admission.admit(
                    tenant, plan.characters, count_request=own, hold_stream=finish if own else None
                )
                with span("speech.admission"):
                    limits, cached = await asyncio.gather(admitted, self.cache.get(key))
            reply = await self._start(plan, key, cached, finish, record, tenant, admission)
        except BaseException:
            await finish.aclose()
            raise
        reply.limits = limits
        return reply

    @staticmethod
    def _script(request: SpeechRequest, markup: Markup, script: Script | None) -> Script | None:
        """What ``request`` says: ``script``, else its input read under ``markup`` (``None``: plain text, as
        written). An engine node's request is a segment its front has read. The tenant's pronunciation dictionaries
        apply in the planner, span by span."""
        if script is not None or isinstance(request, EngineNodeSpeechRequest):
            return script
        read = read_script(request.input, markup)
        return None if read.simple and read.text == request.input else read

    async def check(self, principal: Principal, request: SpeechRequest) -> None:
        """Check that ``request`` would be served as it is planned now (a realtime session's new settings), without
        speaking it.

        Raises:
            SpeechError: as :meth:`speak`'s plan would (a model the tenant may not use, an unknown model or voice).
        """
        await self.planner.plan(principal, request)

    def model_voice(self, model: str) -> str | None:
        """A voice the model's engine lists, to check the model with (``None``: it lists none yet).

        Raises:
            UnknownModelError: an unknown model.
        """
        pool = self.planner.router.resolve(model)
        return pool.info.voices[0].id if pool.info is not None and pool.info.voices else None

    async def open_session(self, tenant: Tenant, held: AsyncExitStack) -> None:
        """Admit a WebSocket session: one of the tenant's open sessions (across replicas), counted as one request,
        holding one of its concurrent streams until ``held`` closes; its parts then :meth:`speak`
        :attr:`Admission.IN_SESSION`.

        Raises:
            RateLimitExceededError: over the tenant's sessions, requests or streams (recorded as a rejection).
            LimitsUnavailableError: the limits' storage is unreachable and they fail closed.
        """
        await self._admission.hold_session(tenant, held)
        await self._admission.admit(tenant, 0, hold_stream=held)

    def stream_leases(self, tenant: Tenant) -> Callable[[], AbstractAsyncContextManager[None]] | None:
        """How a session's further lane holds one more of the tenant's streams while it speaks
        (:meth:`AdmissionControl.stream_leases <gateway.speech.admission.AdmissionControl.stream_leases>`)."""
        return self._admission.stream_leases(tenant)

    async def open_job(self, tenant: Tenant) -> None:
        """Admit a speech job: one request of the tenant's, whatever its length (its characters count in the month
        once it ends, :meth:`account_job`); its segments then :meth:`speak` :attr:`Admission.OF_JOB`.

        Raises:
            RateLimitExceededError: over the tenant's requests (recorded as a rejection).
            LimitsUnavailableError: the limits' storage is unreachable and they fail closed.
        """
        await self._admission.admit(tenant, 0)

    async def _start(  # noqa: PLR0917 - one request's parts, settled by speak
        self,
        plan: SpeechPlan,
        key: str,
        cached: bytes | None,
        finish: AsyncExitStack,
        record: SpeechRecord,
        tenant: Tenant,
        admission: Admission,
    ) -> SpeechReply:
        request, pool = plan.request, plan.pool
        reply = self._hit(request, plan.text, pool.name, cached, finish) if cached is not None else None
        if reply is not None:
            self._metrics.cache.labels("hit").inc()
        else:
            self._metrics.cache.labels("miss").inc()
            reply = await self._miss(
                key, plan, finish, tenant, self._share(tenant, admission), of_job=admission is Admission.OF_JOB
            )
        # Usage counts requests that were served (a stream cut short included), not ones that failed to start; a
        # job's segments count once, with the job (``gateway/jobs/runner.py``).
        if admission.counted_here:
            finish.callback(self._account_reply, plan.characters, reply, record, tenant)
        reply.characters = plan.characters
        reply.on_cut = functools.partial(self._cut, reply, record)
        record.engine, record.cache = reply.engine, "hit" if reply.cache_hit else "miss"
        record.ttfb_ms = round((time.perf_counter() - record.started) * 1000, 2)
        self._metrics.ttfb.labels(reply.engine).observe(record.ttfb_ms / 1000)
        self.planner.router.record_answer(request.model, reply.engine)  # cache hits and joined flights count too
        return reply

    def _cache_key(self, plan: SpeechPlan, tenant: Tenant) -> str:
        scope = "" if self.cache.shared_across_tenants else tenant_scope(tenant)
        return plan_key(plan, scope)

    def _hit(
        self, request: SpeechRequest, text: str, engine: str, cached: bytes, finish: AsyncExitStack
    ) -> SpeechReply | None:
        """The reply of a cached value; ``None`` when it cannot be read or its words do not fit ``text``, what the
        request says (a text that reads the same but is cut into other words): then the request is served as a
        miss."""
        record = unpack_record(cached)
        if record is None or (words := fitted_words(text, record.words)) is None:
            return None
        outcome = Outcome(engine, "", AudioClock(record.seconds), timestamps=record.timestamps)
        alignment = Alignment(text, outcome.timestamps, words, audio_s=record.seconds)
        slices = hit_chunks(
            record.audio, tuple(words), record.seconds
        )  # for server-sent events, which need the audio in pieces
        finish.push_async_callback(slices.aclose)
        return SpeechReply(
            request, engine, True, outcome, SpeechChunk(b""), slices, finish, whole=bytes(record.audio),
            tasks=self.background, alignment=alignment,
        )  # fmt: skip

    def input_cap(self, tenant: Tenant) -> int:
        """The longest input of one of ``tenant``'s requests: OpenAI's 4096, or what the tenant is allowed, within
        ``speech.max_input_chars``."""
        return min(tenant.limits.speech_input_characters or MAX_INPUT_CHARS, self.max_input_chars)

    def _check_input(self, tenant: Tenant, request: SpeechRequest) -> None:
        cap = self.input_cap(tenant)
        if len(request.input) > cap:  # worded as the body's own validation words it
            message = f"Invalid value for 'input': String should have at most {cap} characters"
            raise InputTooLongError(message, limit=cap, kind="invalid_value")

    def _share(self, tenant: Tenant, admission: Admission) -> TenantShare:
        """The tenant's share of a busy engine; a job's segments wait in the jobs' class (``jobs.priority``)."""
        share = tenant_share(tenant)
        if admission is Admission.OF_JOB and self.job_priority is not None:
            return dataclasses.replace(share, priority=self.job_priority)
        return share

    async def _miss(
        self, key: str, plan: SpeechPlan, finish: AsyncExitStack, tenant: Tenant, share: TenantShare, *, of_job: bool
    ) -> SpeechReply:
        outcome = self._outcomes.setdefault(key, Outcome(plan.pool.name, key))
        chunks = self.flights.stream(
            key,
            lambda: self._produce(key, plan, outcome, tenant, share, of_job=of_job),
            on_complete=lambda produced: self._store(outcome, plan.request.response_format, produced),
        )
        finish.push_async_callback(chunks.aclose)  # our share of a single flight ends with this response
        with span("speech.first_audio"):
            first = await anext(chunks, SpeechChunk(b""))
        return SpeechReply(
            plan.request, outcome.engine, False, outcome, first, chunks, finish, tasks=self.background,
            alignment=Alignment(plan.text, outcome.timestamps),
        )  # fmt: skip

    async def _produce(
        self, key: str, plan: SpeechPlan, outcome: Outcome, tenant: Tenant, share: TenantShare, *, of_job: bool
    ) -> AsyncIterator[SpeechChunk]:
        started = time.perf_counter()
        try:
            async with self._failover_stream(plan, tenant, share) as pcm:
                self._settle(outcome, pcm, tenant)  # before the first bytes go: x-engine and x-retries say it
                tempo = pcm.plan.tempo
                encoder = open_encoder(plan.request.response_format, pcm.sample_rate, tempo, plan.request.sample_rate)
                caller = OnCallerText(plan.respelled, plan.text) if plan.respelled.replacements else None
                # A job's segment is encoded off the event loop, at a lower CPU priority (issue #47: encoding a flood of
                # jobs' MP3 on the loop made another tenant's first byte 15x slower).
                offload = encode_in_background if of_job else None
                async for chunk in encode_timed(pcm, tempo, encoder, outcome.clock, offload):
                    if caller is not None:
                        chunk = dataclasses.replace(chunk, words=caller.words(chunk.words))  # noqa: PLW2901 - moved words
                    outcome.words.extend(chunk.words)
                    yield chunk
                last = caller.finish() if caller is not None else ()
                outcome.words.extend(last)
                if (data := encoder.finish()) or last:
                    yield SpeechChunk(data, last, outcome.clock.seconds)
        finally:
            self._outcomes.pop(key, None)
        self._observe(outcome.engine, time.perf_counter() - started, outcome.clock.seconds)

    def _settle(self, outcome: Outcome, spoken: SpokenStream, tenant: Tenant) -> None:
        """Name the engine that spoke, and cache its audio under that engine's key (another engine's audio must not
        answer later requests planned for the first)."""
        outcome.retries = spoken.retries
        outcome.timestamps = spoken.info.timestamps
        if spoken.plan.pool.name != outcome.engine:
            outcome.engine = spoken.plan.pool.name
            outcome.cache_key = self._cache_key(spoken.plan, tenant)

    def _failover_stream(
        self, plan: SpeechPlan, tenant: Tenant, share: TenantShare
    ) -> AbstractAsyncContextManager[SpokenStream]:
        """The stream of the first engine of ``plan``'s model that produces audio for it, tried through
        :meth:`_engine_stream` (``gateway/speech/failover.py``)."""
        continuing = _continues_a_stream(plan.request)
        return self.failover.open_stream(
            plan, lambda tried: self._engine_stream(tried, tenant, share, continuing=continuing)
        )

    @asynccontextmanager
    async def _engine_stream(
        self,
        plan: SpeechPlan,
        tenant: Tenant,
        share: TenantShare,
        *,
        continuing: bool = False,
    ) -> AsyncIterator[PcmStream]:
        """``pool.open_stream`` for ``tenant``, waiting for a busy engine with the tenant's share of it; a text longer
        than :attr:`max_segment_chars`, or a script of several parts, as one stream of segments, a job each
        (``gateway/speech/segments.py``). ``continuing``: the whole request continues a stream under way (an engine
        node's later segment)."""
        pool, synthesis = plan.pool, plan.synthesis
        if plan.jobs:
            segments, offsets = script_segments(plan.jobs, synthesis.text, self.max_segment_chars)
        else:
            texts = split_text(synthesis.text, self.max_segment_chars)
            if len(texts) == 1:  # the common case: one job, nothing in between
                async with self._job_stream(pool, synthesis, tenant, share, continuing=continuing) as pcm:
                    yield pcm
                return
            segments = None

        whole_continues = continuing

        def open_job(segment: SynthesisRequest, *, continuing: bool = False) -> AbstractAsyncContextManager[PcmStream]:
            return self._job_stream(pool, segment, tenant, share, continuing=continuing or whole_continues)

        stream = (
            SegmentedStream(segments, open_job, offsets, pool) if segments is not None
            else SegmentedStream.of(synthesis, texts, open_job)
        )  # fmt: skip
        async with stream:
            yield stream

    @asynccontextmanager
    async def _job_stream(
        self,
        pool: EngineBackend,
        synthesis: SynthesisRequest,
        tenant: Tenant,
        share: TenantShare,
        *,
        continuing: bool = False,
    ) -> AsyncIterator[PcmStream]:
        """One engine job (``continuing``: a later segment of a stream under way); how long it waited for a worker
        (also when it then got a 503) goes in the metrics."""
        async with AsyncExitStack() as stack:
            stack.enter_context(span("speech.segment", current=False))  # it yields: its span is never current
            started = time.perf_counter()
            try:
                with span("speech.queue_wait"):
                    pcm = await stack.enter_async_context(
                        pool.open_stream(synthesis, tenant=tenant.name, share=share, continuing=continuing)
                    )
            finally:
                self._metrics.queue_wait.labels(pool.name, tenant.name).observe(time.perf_counter() - started)
            yield pcm

    def _cut(self, reply: SpeechReply, record: SpeechRecord, cause: Exception) -> None:
        """One line and a count for a response that ended short, with its cause (not a traceback: it is the engine's
        failure, which the engine's own logs describe)."""
        self._metrics.truncations.labels(reply.outcome.engine).inc()
        logger.warning(
            "response truncated",
            extra={
                "record": {
                    "request_id": record.request_id,
                    "engine": reply.outcome.engine,
                    "tenant": record.tenant,
                    "audio_seconds": round(reply.outcome.clock.seconds, 3),
                    "cause": str(cause),
                }
            },
        )

    async def _store(self, outcome: Outcome, fmt: AudioFormat, produced: Sequence[SpeechChunk]) -> None:
        # A hit goes out complete, so its header may say the length that the stream could not (FLAC's samples).
        audio = whole_file(fmt, b"".join(chunk.audio for chunk in produced))
        record = pack_record(outcome.clock.seconds, outcome.timestamps, outcome.words, [audio])
        await self.cache.set(outcome.cache_key, record)

    def _observe(self, engine: str, wall_seconds: float, audio_seconds: float) -> None:
        """Record one synthesis in the metrics."""
        self._metrics.synthesis.labels(engine).observe(wall_seconds)
        self._metrics.audio_seconds.labels(engine).inc(audio_seconds)
        if audio_seconds > 0:
            self._metrics.rtf.labels(engine).observe(wall_seconds / audio_seconds)

    def _account_reply(self, characters: int, reply: SpeechReply, record: SpeechRecord, tenant: Tenant) -> None:
        heard = reply.heard_seconds  # not what its synthesis made: that runs ahead of a listener who stops
        record.audio_seconds = round(heard, 3)
        self._account(
            tenant,
            characters,
            heard,
            cache_hit=reply.cache_hit,
            model=record.model,
            api_key_id=record.api_key_id,
        )

    def account_job(self, tenant: Tenant, characters: int, audio_seconds: float) -> None:
        """Record a completed speech job in the tenant's usage and the metrics: once, as one request with all of its
        characters and audio (its segments, spoken :attr:`Admission.OF_JOB`, were not counted)."""
        self._account(tenant, characters, audio_seconds, cache_hit=False)
        self._admission.spend_job_characters(tenant, characters)  # the monthly budget: not counted at admission

    def _account(
        self,
        tenant: Tenant,
        characters: int,
        audio_seconds: float,
        *,
        cache_hit: bool,
        model: str | None = None,
        api_key_id: str | None = None,
    ) -> None:
        """Record one served request (or a session's segment or response) in the tenant's usage (written in the
        background, off the response's path), by model and API key for the Usage API, and the metrics."""
        self._usage.record_request(
            tenant,
            characters=characters,
            audio_seconds=audio_seconds,
            cache_hit=cache_hit,
            model=model,
            api_key_id=api_key_id,
        )
        self._admission.spend_audio(tenant, audio_seconds)  # the monthly budget of audio seconds
        self._metrics.tenant_requests.labels(tenant.name).inc()
        self._metrics.tenant_characters.labels(tenant.name).inc(characters)
        self._metrics.tenant_audio.labels(tenant.name).inc(audio_seconds)


def _continues_a_stream(request: SpeechRequest) -> bool:
    """Whether the request is a front gateway's later segment of a stream under way (an engine node's request)."""
    return isinstance(request, EngineNodeSpeechRequest) and request.continuing


def tenant_share(tenant: Tenant) -> TenantShare:
    """The tenant's share of a busy engine, as the engine pool takes it (engines know nothing of tenants' settings)."""
    scheduling = tenant.scheduling
    return TenantShare(weight=scheduling.weight, priority=scheduling.priority, max_queued=scheduling.max_queued)


def _describe(record: SpeechRecord, tenant: Tenant, request: SpeechRequest) -> None:
    record.tenant = tenant.name
    record.model = request.model
    record.format = request.response_format
    record.characters = len(request.input)


def _key_id(principal: Principal) -> str | None:
    """The id of the API key that authenticated ``principal`` (its credential ``key:<id>``); ``None`` for another."""
    kind, _, key_id = principal.credential.partition(":")
    return key_id if kind == "key" and key_id else None
