"""From a validated :class:`SpeechRequest` to encoded audio leaving as the engine speaks.

The order of a request: the plan (the tenant may use the model; the engine and voice resolve) → admission (the
tenant's limits admit it, 429 otherwise; a concurrent-stream lease is held until the response ends) → the audio
cache answers, or the engine synthesizes once for every identical request in flight (single-flight) and a complete
result is cached.

:meth:`SpeechService.speak` returns once the first encoded bytes exist, so that a request failing early gets a clean
HTTP error; after that the audio streams, and a failure can only end the stream.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import functools
import json
import logging
import struct
import time
import weakref
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio
from litestar.status_codes import HTTP_400_BAD_REQUEST

from engines.base import InvalidSynthesisRequestError
from engines.errors import EngineNotReadyError, EngineOverloadedError, SynthesisFailedError
from engines.scheduling import TenantShare
from engines.timing import word_spans
from gateway.audio import open_encoder, output_sample_rate
from gateway.http.errors import OpenAIError, ResponseTruncatedError
from gateway.observability.tracing import span
from gateway.schemas import MAX_INPUT_CHARS, EngineNodeSpeechRequest
from gateway.settings import SpeechSettings
from gateway.speech.alignment import (
    Alignment,
    CharacterCursor,
    OnCallerText,
    SpeechChunk,
    WordTime,
    pack_words,
    unpack_words,
)
from gateway.speech.cache import cache_key
from gateway.speech.contract import Admission, SpeechRecord
from gateway.speech.delivery import AudioClock, encode_timed, speech_usage
from gateway.speech.failover import Failover
from gateway.speech.segments import SegmentedStream, script_segments, split_text
from gateway.text import Markup, read_script
from lifecycle import BackgroundTasks

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
    from contextlib import AbstractAsyncContextManager

    from auth import Principal, Tenant
    from auth.limits import LimitState
    from auth.usage import UsageLedger
    from engines.backend import EngineBackend, PcmStream
    from engines.base import SynthesisRequest
    from engines.scheduling import Priority
    from engines.timing import TimestampsKind
    from gateway.observability.metrics import SpeechMetrics
    from gateway.schemas import SpeechRequest, SpeechUsage
    from gateway.speech.admission import AdmissionControl
    from gateway.speech.cache import AudioCache
    from gateway.speech.failover import SpokenStream
    from gateway.speech.plan import Planner, SpeechPlan
    from gateway.speech.singleflight import SingleFlight
    from gateway.text import Script

__all__ = ["SpeechReply", "SpeechService", "tenant_share"]

logger = logging.getLogger("tts_gateway.speech")

# What can end a stream after its first bytes: the engine failed, its stream was cut, or a later segment could not
# start. Anything else (a bug) keeps its traceback.
_ENGINE_ERRORS = (SynthesisFailedError, EngineNotReadyError, EngineOverloadedError, InvalidSynthesisRequestError)
# A cached value: its format (1), the audio seconds, flags (bit 0: the words were placed exactly), the words
# (``alignment.pack_words``), then the encoded audio. Format 0 (the audio seconds, then the audio) lived under cache
# keys of version 1: it is never read, so an older replica sharing the Redis never plays this header as audio either.
_CACHE_HEADER = struct.Struct("<BdB")
_CACHE_FORMAT = 1
_EXACT = 1
_HIT_CHUNK_BYTES = 32 * 1024


@dataclass
class _Outcome:
    """What a synthesis produced, shared by every request that joined it."""

    engine: str
    """The engine that spoke (set once the failover settled on one)."""
    cache_key: str
    """Where the complete audio is cached: the key of the engine that spoke, which is not the planned one's when the
    request failed over to another engine of its alias."""
    clock: AudioClock = field(default_factory=AudioClock)
    retries: int = 0
    """Tries repeated before the first audio (the ``x-retries`` header)."""
    timestamps: TimestampsKind = "estimated"
    """How the engine that spoke placed its words."""
    words: list[WordTime] = field(default_factory=list)
    """The words' times as produced (stored with the audio in the cache)."""


@dataclass
class SpeechReply:
    """Audio on its way to one client: iterate :meth:`audio`, :meth:`timed` or :meth:`sse_events` once, or send
    :attr:`whole` (when it is there).

    Whoever called :meth:`SpeechService.speak` owns the reply and releases it, with :meth:`close` or ``async with``:
    the HTTP endpoint after its response, a realtime session when the segment or response ends. Release frees what
    the request holds (its stream lease, its share of the synthesis) and records its usage, on every ending (the HTTP
    routes' responses release it in a ``finally``: ``gateway/http/released.py``). Only a reply its owner lost is
    released when it is garbage-collected.
    """

    request: SpeechRequest
    engine: str
    cache_hit: bool
    outcome: _Outcome
    _first: SpeechChunk
    _rest: AsyncIterator[SpeechChunk]
    _finish: AsyncExitStack = field(repr=False)
    whole: bytes | None = None
    """All of the audio when it was complete before the reply started (a cache hit): it can go out in one body,
    followed by :meth:`close`, instead of through :meth:`audio`."""
    limits: LimitState | None = None
    """The tenant's standing after this request was admitted."""
    characters: int | None = None
    """What the request was charged (what it makes the engine say: ``SpeechPlan.characters``); ``None``: its
    input's length."""
    on_cut: Callable[[Exception], None] | None = field(default=None, repr=False)
    """Told when the audio ends short after its first bytes (logged and counted there)."""
    tasks: BackgroundTasks = field(kw_only=True, repr=False)
    """Where the release of a reply never iterated runs (its finalizer cannot await)."""
    alignment: Alignment = field(kw_only=True)
    """The words of ``request.input`` with their times in this reply's audio (``gateway/speech/alignment.py``):
    complete from the start for a cache hit (with :attr:`whole`), else growing as :meth:`timed` goes, complete once it
    has ended."""

    def __post_init__(self) -> None:
        loop = asyncio.get_running_loop()
        self._abandoned = weakref.finalize(self, self.tasks.spawn_threadsafe, loop, self._finish.aclose)

    async def __aenter__(self) -> SpeechReply:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def timed(self) -> AsyncIterator[SpeechChunk]:
        """The encoded audio (raw 24 kHz PCM for a ``pcm`` request) in pieces, each with the words that became known
        with it (a piece may hold words only); :attr:`alignment` grows with them.

        Raises:
            ResponseTruncatedError: the engine failed after the first bytes; the audio ends short.
        """
        alignment = self.alignment
        growing = alignment.audio_s is None  # a cache hit's is complete already
        try:
            if self._first.audio or self._first.words:
                if growing:
                    alignment.words.extend(self._first.words)
                yield self._first
            async for chunk in self._rest:
                if growing:
                    alignment.words.extend(chunk.words)
                yield chunk
        except _ENGINE_ERRORS as exc:  # after the first bytes: the response can only end short
            if self.on_cut is not None:
                self.on_cut(exc)
            raise ResponseTruncatedError(str(exc)) from exc
        alignment.audio_s = self.outcome.clock.seconds

    async def audio(self) -> AsyncIterator[bytes]:
        """The encoded audio (raw 24 kHz PCM for a ``pcm`` request).

        Raises:
            ResponseTruncatedError: the engine failed after the first bytes; the audio ends short.
        """
        async for chunk in self.timed():
            if chunk.audio:
                yield chunk.audio

    async def close(self) -> None:
        """Release what the request holds; the owner calls it once, however the reply ended (twice is harmless)."""
        self._abandoned.detach()  # released here; nothing is left for the finalizer
        # Shielded: a client that left cancels this task through Litestar's anyio cancel scope, which cancels again
        # at every await; unshielded, the release stopped at its first real await (the usage metrics after a Redis
        # write) and AsyncExitStack re-raised the CancelledError from a frame that holds it: a reference cycle.
        with anyio.CancelScope(shield=True):
            await self._finish.aclose()

    async def sse_events(self, *, timestamps: bool = False) -> AsyncIterator[str]:
        """``speech.audio.delta`` events with base64 audio, then ``speech.audio.done`` with usage: OpenAI's stream,
        every event of OpenAI's schema. With ``timestamps`` (asked for: the request's ``word_timestamps``, or a
        front's request to an engine node), this gateway's extension ``speech.audio.timestamps`` between them too: the
        words and characters as they become known. Never unasked: a client that dispatches strictly on OpenAI's event
        types would break on a type it does not know."""
        cursor = CharacterCursor(self.alignment.text)
        async for chunk in self.timed():
            if chunk.audio:
                yield json.dumps({"type": "speech.audio.delta", "audio": base64.b64encode(chunk.audio).decode("ascii")})
            if timestamps and chunk.words and (event := _timestamps_event(chunk.words, cursor, self.alignment)):
                yield event
        if timestamps and (event := _timestamps_event((), cursor, self.alignment)):  # what follows the last word
            yield event
        yield json.dumps({"type": "speech.audio.done", "usage": self.usage().model_dump()})

    def usage(self) -> SpeechUsage:
        characters = len(self.request.input) if self.characters is None else self.characters
        return speech_usage(characters, self.outcome.clock.seconds)

    @property
    def retries(self) -> int:
        """Tries the synthesis repeated before its first audio (0 for a cache hit)."""
        return self.outcome.retries


def _timestamps_event(words: tuple[WordTime, ...], cursor: CharacterCursor, alignment: Alignment) -> str | None:
    """``speech.audio.timestamps``: ``words`` and the characters up to the end of the last of them (to the end of the
    text once the audio has ended); ``None`` when there is nothing new."""
    characters = cursor.advance(alignment.words, alignment.audio_s)
    if not words and characters is None:
        return None
    text = alignment.text
    event: dict[str, object] = {
        "type": "speech.audio.timestamps",
        "kind": alignment.kind,
        "words": [
            {
                "word": text[w.char_start : w.char_end],
                "start": round(w.start_s, 3),
                "end": round(w.end_s, 3),
                "char_start": w.char_start,
                "char_end": w.char_end,
            }
            for w in words
        ],
        "char_start": characters.first if characters is not None else len(text),
        "alignment": (
            characters.rest_api()
            if characters is not None
            else {"characters": [], "character_start_times_seconds": [], "character_end_times_seconds": []}
        ),
    }
    return json.dumps(event)


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
        self._outcomes: dict[str, _Outcome] = {}
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

        Raises:
            OpenAIError: an input over the tenant's cap (400), a model the tenant may not use (403), unknown model
                (404) or voice (400), a pronunciation dictionary the tenant does not have (404) or a phoneme-only rule
                that matched (400).
            MarkupError: markup that cannot be read, or a script its pronunciations leave silent (400).
            RateLimitExceededError: over one of the tenant's limits (429).
            LimitsUnavailableError: the limits' storage is unreachable and they fail closed.
            EngineNotReadyError, EngineOverloadedError, SynthesisFailedError: the engine cannot serve it now.
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
            OpenAIError: as :meth:`speak`'s plan would (a model the tenant may not use, an unknown model or voice).
        """
        await self.planner.plan(principal, request)

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
            reply = await self._miss(key, plan, finish, tenant, self._share(tenant, admission))
        # Usage counts requests that were served (a stream cut short included), not ones that failed to start; a
        # job's segments count once, with the job (``gateway/jobs/runner.py``).
        if admission.counted_here:
            finish.callback(self._account_reply, plan.characters, reply.outcome, record, tenant, reply.cache_hit)
        reply.characters = plan.characters
        reply.on_cut = functools.partial(self._cut, reply, record)
        record.engine, record.cache = reply.engine, "hit" if reply.cache_hit else "miss"
        record.ttfb_ms = round((time.perf_counter() - record.started) * 1000, 2)
        self._metrics.ttfb.labels(reply.engine).observe(record.ttfb_ms / 1000)
        self.planner.router.record_answer(request.model, reply.engine)  # cache hits and joined flights count too
        return reply

    def _cache_key(self, plan: SpeechPlan, tenant: Tenant) -> str:
        scope = "" if self.cache.shared_across_tenants else _tenant_scope(tenant)
        return _key(plan, scope)

    def _hit(
        self, request: SpeechRequest, text: str, engine: str, cached: bytes, finish: AsyncExitStack
    ) -> SpeechReply | None:
        """The reply of a cached value; ``None`` when it cannot be read or its words do not fit ``text``, what the
        request says (a text that reads the same but is cut into other words): then the request is served as a
        miss."""
        try:
            version, seconds, flags = _CACHE_HEADER.unpack_from(cached)
            if version != _CACHE_FORMAT:
                return None
            stored, size = unpack_words(memoryview(cached)[_CACHE_HEADER.size :])
        except struct.error:
            return None
        words = _fitted(text, stored)
        if words is None:
            return None
        outcome = _Outcome(engine, "", AudioClock(seconds), timestamps="exact" if flags & _EXACT else "estimated")
        alignment = Alignment(text, outcome.timestamps, words, audio_s=seconds)
        audio = memoryview(cached)[_CACHE_HEADER.size + size :]
        slices = _slices(audio, tuple(words))  # for server-sent events, which need the audio in pieces
        finish.push_async_callback(slices.aclose)
        return SpeechReply(
            request, engine, True, outcome, SpeechChunk(b""), slices, finish, whole=bytes(audio),
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
            raise OpenAIError(HTTP_400_BAD_REQUEST, message, param="input", code="invalid_value")

    def _share(self, tenant: Tenant, admission: Admission) -> TenantShare:
        """The tenant's share of a busy engine; a job's segments wait in the jobs' class (``jobs.priority``)."""
        share = tenant_share(tenant)
        if admission is Admission.OF_JOB and self.job_priority is not None:
            return dataclasses.replace(share, priority=self.job_priority)
        return share

    async def _miss(
        self, key: str, plan: SpeechPlan, finish: AsyncExitStack, tenant: Tenant, share: TenantShare
    ) -> SpeechReply:
        outcome = self._outcomes.setdefault(key, _Outcome(plan.pool.name, key))
        chunks = self.flights.stream(
            key,
            lambda: self._produce(key, plan, outcome, tenant, share),
            on_complete=lambda produced: self._store(outcome, produced),
        )
        finish.push_async_callback(chunks.aclose)  # our share of a single flight ends with this response
        with span("speech.first_audio"):
            first = await anext(chunks, SpeechChunk(b""))
        return SpeechReply(
            plan.request, outcome.engine, False, outcome, first, chunks, finish, tasks=self.background,
            alignment=Alignment(plan.text, outcome.timestamps),
        )  # fmt: skip

    async def _produce(
        self, key: str, plan: SpeechPlan, outcome: _Outcome, tenant: Tenant, share: TenantShare
    ) -> AsyncIterator[SpeechChunk]:
        started = time.perf_counter()
        try:
            async with self._failover_stream(plan, tenant, share) as pcm:
                self._settle(outcome, pcm, tenant)  # before the first bytes go: x-engine and x-retries say it
                tempo = pcm.plan.tempo
                encoder = open_encoder(plan.request.response_format, pcm.sample_rate, tempo, plan.request.sample_rate)
                caller = OnCallerText(plan.respelled, plan.text) if plan.respelled.replacements else None
                async for chunk in encode_timed(pcm, tempo, encoder, outcome.clock):
                    if caller is not None:
                        chunk = SpeechChunk(chunk.audio, caller.words(chunk.words))  # noqa: PLW2901 - moved words
                    outcome.words.extend(chunk.words)
                    yield chunk
                last = caller.finish() if caller is not None else ()
                outcome.words.extend(last)
                if (data := encoder.finish()) or last:
                    yield SpeechChunk(data, last)
        finally:
            self._outcomes.pop(key, None)
        self._observe(outcome.engine, time.perf_counter() - started, outcome.clock.seconds)

    def _settle(self, outcome: _Outcome, spoken: SpokenStream, tenant: Tenant) -> None:
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
            SegmentedStream(segments, open_job, offsets) if segments is not None
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

    async def _store(self, outcome: _Outcome, produced: Sequence[SpeechChunk]) -> None:
        flags = _EXACT if outcome.timestamps == "exact" else 0
        header = _CACHE_HEADER.pack(_CACHE_FORMAT, outcome.clock.seconds, flags) + pack_words(outcome.words)
        await self.cache.set(outcome.cache_key, header + b"".join(chunk.audio for chunk in produced))

    def _observe(self, engine: str, wall_seconds: float, audio_seconds: float) -> None:
        """Record one synthesis in the metrics."""
        self._metrics.synthesis.labels(engine).observe(wall_seconds)
        self._metrics.audio_seconds.labels(engine).inc(audio_seconds)
        if audio_seconds > 0:
            self._metrics.rtf.labels(engine).observe(wall_seconds / audio_seconds)

    def _account_reply(
        self, characters: int, outcome: _Outcome, record: SpeechRecord, tenant: Tenant, hit: bool
    ) -> None:
        record.audio_seconds = round(outcome.clock.seconds, 3)
        self._account(
            tenant,
            characters,
            outcome.clock.seconds,
            cache_hit=hit,
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


def _tenant_scope(tenant: Tenant) -> str:
    # The generation changes when a tenant is deleted and created again: the new tenant never hits the old one's
    # audio (the cache cannot be enumerated to delete it). Tenants stored before generations keep their old scope.
    return f"{tenant.name}#{tenant.generation}" if tenant.generation else tenant.name


def _key(plan: SpeechPlan, tenant_scope: str) -> str:
    request, info = plan.request, plan.info
    details = info.details if info is not None else {}
    params: dict[str, object] = {k: v for k, v in details.items() if k != "weights"}
    params["tenant_scope"] = tenant_scope  # empty when tenants share the cache
    if plan.voices:  # what the script's other voices sound like
        params["voices"] = {name: voice.identity for name, voice in sorted(plan.voices.items())}
    if request.control_tokens:  # "[laugh]" read as a laugh, not as the word
        params["control_tokens"] = True
    if plan.pronunciation:  # a new version of a dictionary is new audio (absent otherwise: keys stay as they were)
        params["pronunciation"] = [list(version) for version in plan.pronunciation]
    if request.seed is not None:  # another seed is other audio; unseeded requests keep their keys
        params["seed"] = request.seed
    if request.language_code is not None:  # another language is other audio; absent, keys stay as they were
        params["language"] = request.language_code.lower().replace("_", "-")
    if not request.normalize_text:  # "3" read as written, not as "three"
        params["normalize_text"] = False
    rate = output_sample_rate(request.response_format, request.sample_rate)
    if rate != output_sample_rate(request.response_format):  # the format's own rate, asked for or not, is one entry
        params["sample_rate"] = rate
    return cache_key(
        engine=plan.pool.name,
        weights_id=details.get("weights", ""),
        text=plan.script.cache_text() if plan.script is not None else request.input,
        voice_id=plan.voice.identity,
        response_format=request.response_format,
        speed=request.speed,
        instructions=request.instructions,
        params=params,
    )


async def _slices(audio: memoryview, words: tuple[WordTime, ...]) -> AsyncGenerator[SpeechChunk, None]:
    """A cached reply in pieces, every word with the first: the client has all of the audio at once anyway."""
    for start in range(0, len(audio), _HIT_CHUNK_BYTES):
        yield SpeechChunk(bytes(audio[start : start + _HIT_CHUNK_BYTES]), words if start == 0 else ())
    if not audio and words:
        yield SpeechChunk(b"", words)


def _fitted(text: str, stored: list[WordTime]) -> list[WordTime] | None:
    """The stored words on ``text``'s characters: as stored when ``text`` has the same words in the same places, moved
    onto its words when it has as many (the key's text was normalised: whitespace, NFC), else ``None``."""
    spans = word_spans(text)
    if [(w.char_start, w.char_end) for w in stored] == spans:
        return stored
    if len(spans) != len(stored):
        return None
    return [WordTime(start, end, w.start_s, w.end_s) for (start, end), w in zip(spans, stored, strict=True)]
