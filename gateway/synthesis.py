"""From a validated :class:`SpeechRequest` to encoded audio leaving as the engine speaks.

The order of a request: the tenant may use the model → the engine and voice resolve → the tenant's limits admit it
(429 otherwise) → a concurrent-stream lease is held until the response ends → the audio cache answers, or the
engine synthesizes once for every identical request in flight (single-flight) and a complete result is cached.

:meth:`SpeechService.speak` returns once the first encoded bytes exist, so that a request failing early gets a clean
HTTP error; after that the audio streams, and a failure can only end the stream.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import struct
import time
import weakref
from contextlib import AsyncExitStack
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import anyio
from litestar.status_codes import HTTP_400_BAD_REQUEST, HTTP_403_FORBIDDEN, HTTP_404_NOT_FOUND

from auth.limits import RateLimitExceededError
from engines.base import SynthesisRequest
from gateway.audio import open_encoder
from gateway.cache import cache_key
from gateway.errors import OpenAIError
from gateway.schemas import SpeechUsage

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, AsyncIterator

    from auth import Principal, Tenant
    from auth.limits import LimitState
    from engines.base import EngineInfo
    from engines.pool import EnginePool
    from gateway.observability import RequestRecord, SpeechMetrics
    from gateway.routing import ModelRouter
    from gateway.schemas import SpeechRequest
    from gateway.tenancy import Tenancy

__all__ = ["SpeechPlan", "SpeechReply", "SpeechService"]

logger = logging.getLogger("tts_gateway.speech")

_OUTPUT_FRAMES_PER_SECOND = 50  # usage counts output audio in 20 ms frames
_CACHE_HEADER = struct.Struct("<d")  # cached value: audio seconds, then the encoded audio
_HIT_CHUNK_BYTES = 32 * 1024


@dataclass
class _Outcome:
    """What a synthesis produced, shared by every request that joined it."""

    engine: str
    audio_seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class SpeechPlan:
    """A request with its engine, voice and the engine's view of it settled."""

    tenant: str
    request: SpeechRequest
    pool: EnginePool
    info: EngineInfo | None
    voice: _Voice
    synthesis: SynthesisRequest
    tempo: float
    """The time-stretch left for the encoder: requested speed over the speed the engine renders natively."""

    def for_text(self, text: str) -> SynthesisRequest:
        """The same voice and settings speaking other text (a segment of a realtime session)."""
        return replace(self.synthesis, text=text)


@dataclass(frozen=True, slots=True)
class _Voice:
    engine_voice: str
    speaker: str | None
    identity: str
    """What the voice sounds like, for the cache key: a built-in name or the hash of a custom speaker."""


@dataclass
class SpeechReply:
    """Audio on its way to one client; iterate :meth:`audio` or :meth:`sse_events` exactly once, or send
    :attr:`whole` (when it is there) and then :meth:`close`.

    Everything the request holds (its stream lease, its share of the synthesis, its usage record) is released when
    the iteration ends or the reply is closed — or, for a reply never iterated (the client left before the response
    started), when the reply is garbage-collected.
    """

    request: SpeechRequest
    headers: dict[str, str]
    outcome: _Outcome
    _first: bytes
    _rest: AsyncIterator[bytes]
    _finish: AsyncExitStack = field(repr=False)
    whole: bytes | None = None
    """All of the audio when it was complete before the reply started (a cache hit): it can go out in one body,
    followed by :meth:`close`, instead of through :meth:`audio`."""

    def __post_init__(self) -> None:
        self._abandoned = weakref.finalize(self, _close_abandoned, self._finish, asyncio.get_running_loop())

    async def audio(self) -> AsyncIterator[bytes]:
        """The encoded audio; leaving early (client gone) releases this request's share of the synthesis."""
        try:
            if self._first:
                yield self._first
            async for data in self._rest:
                yield data
        finally:
            await self.close()

    async def close(self) -> None:
        """Release what the request holds, for a reply sent as :attr:`whole` rather than iterated."""
        self._abandoned.detach()  # released here; nothing is left for the finalizer
        # Shielded: a client that left cancels this task through Litestar's anyio cancel scope, which cancels again
        # at every await; unshielded, the release stopped at its first real await (the usage metrics after a Redis
        # write) and AsyncExitStack re-raised the CancelledError from a frame that holds it: a reference cycle.
        with anyio.CancelScope(shield=True):
            await self._finish.aclose()

    async def sse_events(self) -> AsyncIterator[str]:
        """``speech.audio.delta`` events with base64 audio, then ``speech.audio.done`` with usage."""
        async for data in self.audio():
            yield json.dumps({"type": "speech.audio.delta", "audio": base64.b64encode(data).decode("ascii")})
        yield json.dumps({"type": "speech.audio.done", "usage": self.usage().model_dump()})

    def usage(self) -> SpeechUsage:
        output = round(self.outcome.audio_seconds * _OUTPUT_FRAMES_PER_SECOND)
        characters = len(self.request.input)
        return SpeechUsage(input_tokens=characters, output_tokens=output, total_tokens=characters + output)


class SpeechService:
    """Admits, routes, caches and streams speech requests."""

    def __init__(self, router: ModelRouter, tenancy: Tenancy, metrics: SpeechMetrics) -> None:
        self.router = router
        self.tenancy = tenancy
        self.metrics = metrics
        self._outcomes: dict[str, _Outcome] = {}

    async def speak(self, principal: Principal, request: SpeechRequest, record: RequestRecord) -> SpeechReply:
        """Start serving ``request``; returns once the first audio bytes exist.

        Raises:
            OpenAIError: a model the tenant may not use (403), unknown model (404) or voice (400).
            RateLimitExceededError: over one of the tenant's limits (429).
            EngineNotReadyError, EngineOverloadedError, SynthesisFailedError: the engine cannot serve it now.
        """
        _describe(record, principal.tenant, request)
        plan = await self.plan(principal, request)
        finish = AsyncExitStack()
        try:
            limit_state = await self.admit(principal.tenant, len(request.input))
            await self.hold_stream(principal.tenant, finish)
            reply = await self._start(plan, finish, record)
        except BaseException:
            await finish.aclose()
            raise
        reply.headers.update(limit_state.headers())
        return reply

    async def plan(self, principal: Principal, request: SpeechRequest) -> SpeechPlan:
        """Check that the tenant may use the model, and settle the engine and the voice.

        Raises:
            OpenAIError: a model the tenant may not use (403), unknown model (404) or voice (400, 404).
        """
        tenant = principal.tenant
        if not tenant.allows_model(request.model):
            raise OpenAIError(HTTP_403_FORBIDDEN, f"Your tenant may not use the model `{request.model}`.",
                              param="model", code="model_not_allowed")
        pool = self.router.resolve(request.model)
        info = pool.info
        voice = await self._resolve_voice(tenant, request, pool.name, info)
        synthesis, tempo = _engine_request(request, info, voice)
        return SpeechPlan(tenant.name, request, pool, info, voice, synthesis, tempo)

    async def admit(self, tenant: Tenant, characters: int, *, count_request: bool = True) -> LimitState:
        """Count a request (or, with ``count_request=False``, only its characters) against the tenant's limits.

        Raises:
            RateLimitExceededError: over a limit (recorded as a rejection).
        """
        try:
            return await self.tenancy.limiter.admit(tenant.name, tenant.limits, characters,
                                                    count_request=count_request)
        except RateLimitExceededError as exc:
            await self._reject(tenant, exc)
            raise

    async def hold_stream(self, tenant: Tenant, finish: AsyncExitStack) -> None:
        """Take one of the tenant's concurrent streams until ``finish`` closes.

        Raises:
            RateLimitExceededError: the tenant's streams are all in use (recorded as a rejection).
        """
        limiter = self.tenancy.limiter
        try:
            await finish.enter_async_context(limiter.stream_lease(tenant.name, tenant.limits))
        except RateLimitExceededError as exc:
            await self._reject(tenant, exc)
            raise

    async def _reject(self, tenant: Tenant, exc: RateLimitExceededError) -> None:
        await self.tenancy.usage.record_rejection(tenant.name, exc.reason)
        self.metrics.rejections.labels(tenant.name, exc.reason).inc()

    async def _start(self, plan: SpeechPlan, finish: AsyncExitStack, record: RequestRecord) -> SpeechReply:
        request, pool = plan.request, plan.pool
        scope = "" if self.tenancy.cache_shared else plan.tenant
        key = _key(request, pool.name, plan.info, plan.voice, scope)
        cached = await self.tenancy.cache.get(key) if self.tenancy.cache_enabled else None
        if cached is not None:
            self.metrics.cache.labels("hit").inc()
            reply = self._hit(request, pool.name, cached, finish)
        else:
            self.metrics.cache.labels("miss").inc()
            reply = await self._miss(key, plan, finish)
        # Usage counts requests that were served (a stream cut short included), not ones that failed to start.
        finish.push_async_callback(self._account_reply, request, reply.outcome, record, cached is not None)
        record.engine, record.cache = reply.outcome.engine, reply.headers["x-cache"]
        record.ttfb_ms = round((time.perf_counter() - record.started) * 1000, 2)
        self.metrics.ttfb.labels(reply.outcome.engine).observe(record.ttfb_ms / 1000)
        return reply

    def _hit(self, request: SpeechRequest, engine: str, cached: bytes, finish: AsyncExitStack) -> SpeechReply:
        outcome = _Outcome(engine, _CACHE_HEADER.unpack_from(cached)[0])
        audio = memoryview(cached)[_CACHE_HEADER.size:]
        headers = {"x-engine": engine, "x-cache": "hit"}
        slices = _slices(audio)  # for server-sent events, which need the audio in pieces; raw audio goes out whole
        finish.push_async_callback(slices.aclose)
        return SpeechReply(request, headers, outcome, b"", slices, finish, whole=bytes(audio))

    async def _miss(self, key: str, plan: SpeechPlan, finish: AsyncExitStack) -> SpeechReply:
        outcome = self._outcomes.setdefault(key, _Outcome(plan.pool.name))
        chunks = self.tenancy.flights.stream(
            key, lambda: self._produce(key, plan, outcome),
            on_complete=lambda audio: self._store(key, outcome, audio),
        )
        finish.push_async_callback(chunks.aclose)  # our share of a single flight ends with this response
        first = await anext(chunks, b"")
        headers = {"x-engine": outcome.engine, "x-cache": "miss"}
        return SpeechReply(plan.request, headers, outcome, first, chunks, finish)

    async def _produce(self, key: str, plan: SpeechPlan, outcome: _Outcome) -> AsyncIterator[bytes]:
        started = time.perf_counter()
        pool, tempo = plan.pool, plan.tempo
        try:
            async with pool.open_stream(plan.synthesis) as pcm:
                encoder = open_encoder(plan.request.response_format, pcm.sample_rate, tempo)
                per_second = pcm.sample_rate * 2 * tempo
                async for chunk in pcm:
                    outcome.audio_seconds += len(chunk) / per_second
                    if data := encoder.encode(chunk):
                        yield data
                if data := encoder.finish():
                    yield data
        finally:
            self._outcomes.pop(key, None)
        self.observe(pool.name, time.perf_counter() - started, outcome.audio_seconds)

    async def _store(self, key: str, outcome: _Outcome, audio: bytes) -> None:
        if self.tenancy.cache_enabled:
            await self.tenancy.cache.set(key, _CACHE_HEADER.pack(outcome.audio_seconds) + audio)

    def observe(self, engine: str, wall_seconds: float, audio_seconds: float) -> None:
        """Record one synthesis in the metrics."""
        self.metrics.synthesis.labels(engine).observe(wall_seconds)
        self.metrics.audio_seconds.labels(engine).inc(audio_seconds)
        if audio_seconds > 0:
            self.metrics.rtf.labels(engine).observe(wall_seconds / audio_seconds)

    async def _account_reply(
        self, request: SpeechRequest, outcome: _Outcome, record: RequestRecord, hit: bool,
    ) -> None:
        record.audio_seconds = round(outcome.audio_seconds, 3)
        await self.account(record.tenant or "anonymous", len(request.input), outcome.audio_seconds, cache_hit=hit)

    async def account(self, tenant: str, characters: int, audio_seconds: float, *, cache_hit: bool) -> None:
        """Record one served request (or realtime segment) in the tenant's usage and the metrics."""
        await self.tenancy.usage.record_request(tenant, characters=characters, audio_seconds=audio_seconds,
                                                cache_hit=cache_hit)
        self.metrics.tenant_requests.labels(tenant).inc()
        self.metrics.tenant_characters.labels(tenant).inc(characters)
        self.metrics.tenant_audio.labels(tenant).inc(audio_seconds)

    async def _resolve_voice(
        self, tenant: Tenant, request: SpeechRequest, engine: str, info: EngineInfo | None,
    ) -> _Voice:
        voices = self.tenancy.voices
        if isinstance(request.voice, str):
            if info is not None and info.offers_voice(request.voice):
                return _Voice(request.voice, None, request.voice)  # built-in: no store round trip
            custom = await voices.find_by_name(tenant.name, request.voice)
            if custom is None:
                return _Voice(request.voice, None, request.voice)
        else:
            custom = await voices.get(tenant.name, request.voice.id)
            if custom is None:
                raise OpenAIError(HTTP_404_NOT_FOUND, f"Custom voice '{request.voice.id}' was not found.",
                                  param="voice", code="voice_not_found")
        if custom.model != engine:
            message = f"Custom voice '{custom.id}' belongs to model '{custom.model}', not to '{engine}'."
            raise OpenAIError(HTTP_400_BAD_REQUEST, message, param="voice", code="invalid_value")
        return _Voice(custom.id, custom.speaker, custom.speaker_sha256)


def _describe(record: RequestRecord, tenant: Tenant, request: SpeechRequest) -> None:
    record.tenant = tenant.name
    record.model = request.model
    record.format = request.response_format
    record.characters = len(request.input)


def _engine_request(
    request: SpeechRequest, info: EngineInfo | None, voice: _Voice,
) -> tuple[SynthesisRequest, float]:
    """The engine's view of the request, and the time-stretch left for the encoder to apply."""
    speed = native = request.speed
    if info is not None:
        low, high = info.speed_range
        native = min(max(speed, low), high)
        if voice.speaker is None and not info.offers_voice(voice.engine_voice):
            known = sorted({v.id for v in info.voices})
            raise OpenAIError(HTTP_400_BAD_REQUEST, f"Voice '{voice.engine_voice}' is not available for model "
                              f"'{request.model}'. Voices: {', '.join(known)}.", param="voice",
                              code="invalid_value")
    synthesis = SynthesisRequest(text=request.input, voice=voice.engine_voice, speed=native,
                                 instructions=request.instructions, speaker=voice.speaker)
    return synthesis, speed / native


def _key(request: SpeechRequest, engine: str, info: EngineInfo | None, voice: _Voice, tenant_scope: str) -> str:
    details = info.details if info is not None else {}
    params: dict[str, object] = {k: v for k, v in details.items() if k != "weights"}
    params["tenant_scope"] = tenant_scope  # empty when tenants share the cache
    return cache_key(engine=engine, weights_id=details.get("weights", ""), text=request.input,
                     voice_id=voice.identity, response_format=request.response_format, speed=request.speed,
                     instructions=request.instructions, params=params)


async def _slices(audio: memoryview) -> AsyncGenerator[bytes, None]:
    for start in range(0, len(audio), _HIT_CHUNK_BYTES):
        yield bytes(audio[start:start + _HIT_CHUNK_BYTES])


def _close_abandoned(finish: AsyncExitStack, loop: asyncio.AbstractEventLoop) -> None:
    # Closing an exit stack twice is harmless: after a normal end this finds nothing left to release.
    if not loop.is_closed():
        loop.call_soon_threadsafe(lambda: loop.create_task(finish.aclose()))
