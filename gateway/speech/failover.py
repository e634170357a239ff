"""Retry before the first audio: a request whose engine fails before it produced any audio is tried again.

A try that fails before its first PCM chunk (the worker died, the engine failed, a remote endpoint refused, timed out
or answered 5xx, the engine is not ready or its breaker is open) is repeated on the same engine, which hands it to
another worker or endpoint, up to ``failover.same_engine_attempts`` tries; then on the next engine of the alias,
re-planned for that engine (its voices and native speeds differ). An alias without ``fallback`` routes to its first
engine only, so its retries stay there and it never answers with another engine's voice. Overload moves on to the
next engine only where the alias allows it (``spill_on_overload``); a request the engine rejects as invalid is never
retried, and neither is anything once the first chunk has arrived: the client would hear audio twice. Every try
starts within ``failover.deadline_s`` of the first.

Each local engine's circuit breaker (:class:`~gateway.speech.routing.ModelRouter` keeps them) is asked before every
try and told how it went: a failed job counts against the engine (before or after the first chunk), a first chunk
counts for it.
"""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, TypeAlias

from engines.errors import ConsumerTooSlowError, EngineNotReadyError, EngineOverloadedError, SynthesisFailedError
from gateway.speech.errors import FailoverExhaustedError
from lifecycle import naming

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterator, Sequence
    from contextlib import AbstractAsyncContextManager

    from prometheus_client import Counter

    from engines.backend import EngineBackend, PcmStream
    from engines.base import EngineInfo
    from engines.breaker import CircuitBreaker
    from engines.timing import WordMark
    from gateway.speech.plan import SpeechPlan
    from gateway.speech.routing import ModelRouter

__all__ = [
    "Failover",
    "FirstAudioTimeoutError",
    "OpenEngineStream",
    "RetryReason",
    "SpokenStream",
    "retry_reason",
]

logger = naming.logger("failover")

RetryReason: TypeAlias = Literal["died", "refused", "timeout", "overloaded", "not_ready", "failed"]
"""Why a try was given up, as the ``reason`` label of ``tts_engine_retries_total`` names it."""

OpenEngineStream: TypeAlias = "Callable[[SpeechPlan], AbstractAsyncContextManager[PcmStream]]"
"""How one try opens its stream on the engine it is planned for (the speech service's ``engine_stream``, with the
tenant's share): the plan's text, or each part of its script."""

_RETRYABLE = (EngineNotReadyError, EngineOverloadedError, SynthesisFailedError)


class FirstAudioTimeoutError(SynthesisFailedError):
    """No try produced audio within ``failover.deadline_s``."""


@dataclass
class SpokenStream:
    """The PCM of the engine that spoke (a :class:`~engines.backend.PcmStream`), its first chunk included, with the
    plan it spoke by and the retries it took to get there."""

    plan: SpeechPlan
    """The request as planned for the engine that spoke: name it in ``x-engine``, use it for the cache key."""
    retries: int
    info: EngineInfo
    sample_rate: int
    _first: bytes | None
    _rest: AsyncIterator[bytes] = field(repr=False)
    _breaker: CircuitBreaker | None = field(repr=False)
    _source: PcmStream | None = field(default=None, repr=False)
    """The engine's stream: its word marks."""

    @property
    def marks(self) -> Sequence[WordMark]:
        return self._source.marks if self._source is not None else ()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._first is None:  # the engine ended without audio
            return
        yield self._first
        try:
            async for chunk in self._rest:
                yield chunk
        except SynthesisFailedError as exc:  # after the first byte: never retried, but it counts against the engine
            if self._breaker is not None and not isinstance(exc, ConsumerTooSlowError):
                self._breaker.record_failure()
            raise


@dataclass(frozen=True, slots=True)
class _Opener:
    """How every try of one request opens its stream, and the exit stack the winner's stream joins."""

    open: OpenEngineStream
    stack: AsyncExitStack


@dataclass
class _Tries:
    """What the tries of one request have been through: the retries counted, and the errors that caused them."""

    deadline: float
    retries: int = 0
    errors: list[Exception] = field(default_factory=list)
    pending: tuple[str, RetryReason] | None = None
    """The engine and reason of the last failed try: it becomes a retry once another try starts."""

    def error(self) -> FailoverExhaustedError:
        """The error to answer with when no try succeeded, around the last one that says more than "not ready" (an
        engine further down the alias that is not ready must not hide why the ones before it failed)."""
        telling = [error for error in self.errors if not isinstance(error, EngineNotReadyError)]
        error = (telling or self.errors)[-1]
        exhausted = FailoverExhaustedError(error, self.retries)
        exhausted.__cause__ = error
        return exhausted


class Failover:
    """Opens a request's stream on the first engine that produces audio for it, within the failover settings."""

    def __init__(self, router: ModelRouter, retries: Counter) -> None:
        self._router = router
        self._settings = router.failover
        self._retries = retries

    @asynccontextmanager
    async def open_stream(
        self,
        plan: SpeechPlan,
        open_engine_stream: OpenEngineStream,
    ) -> AsyncIterator[SpokenStream]:
        """The stream of the first try that produced audio; leaving the block cancels it.

        Args:
            plan: The request as planned; its engine is tried first.
            open_engine_stream: Opens one try's stream on an engine.

        Raises:
            InvalidSynthesisRequestError: the engine rejected the request (never retried).
            EngineOverloadedError: the engine is overloaded and the model's alias does not spill (no retry).
            FailoverExhaustedError: no try produced audio; around the most telling engine error of the last tries.
        """
        async with AsyncExitStack() as stack:
            yield await self._first_audio(plan, _Opener(open_engine_stream, stack))

    async def _first_audio(self, plan: SpeechPlan, opener: _Opener) -> SpokenStream:
        route = self._router.route(plan.request.model)
        tries = _Tries(asyncio.get_running_loop().time() + self._settings.deadline_s)
        for candidate in _candidates(plan, route.engines):
            for _ in range(self._settings.same_engine_attempts):
                self._count_retry(tries)
                try:
                    return await self._try(candidate, opener, tries)
                except _RETRYABLE as exc:
                    reason = retry_reason(exc)
                    if reason == "overloaded" and not route.spill_on_overload:
                        raise
                    tries.errors.append(exc)
                    tries.pending = (candidate.pool.name, reason)
                    log = logger.info if reason in {"overloaded", "not_ready"} else logger.warning
                    log("engine %s failed before the first audio (%s): %s", candidate.pool.name, reason, exc)
                    if reason in {"overloaded", "not_ready"}:
                        break  # this engine cannot take it now: the next one may
        raise tries.error()

    def _count_retry(self, tries: _Tries) -> None:
        if tries.pending is None:
            return
        if asyncio.get_running_loop().time() >= tries.deadline:
            raise tries.error()
        engine, reason = tries.pending
        tries.retries += 1
        tries.pending = None
        self._retries.labels(engine, reason).inc()

    async def _try(self, plan: SpeechPlan, opener: _Opener, tries: _Tries) -> SpokenStream:
        breaker = self._router.breakers.get(plan.pool.name)
        if breaker is not None and not breaker.allow():
            raise EngineNotReadyError(plan.pool.name, "circuit open")
        try:
            async with AsyncExitStack() as attempt:
                async with asyncio.timeout_at(tries.deadline) as timeout:
                    try:
                        pcm = await attempt.enter_async_context(opener.open(plan))
                        chunks = aiter(pcm)
                        first = await anext(chunks, None)
                    except TimeoutError as exc:
                        if timeout.expired():
                            raise
                        raise SynthesisFailedError("the engine timed out") from exc  # its own timeout, not ours
                opener.stack.push_async_exit(attempt.pop_all())  # the stream now lives as long as the caller's block
        except TimeoutError:
            _settle(breaker, None)
            message = f"no audio within failover.deadline_s ({self._settings.deadline_s:g} s)"
            raise FirstAudioTimeoutError(message) from None
        except BaseException as exc:
            _settle(breaker, exc)
            raise
        if breaker is not None:
            breaker.record_success()
        return SpokenStream(plan, tries.retries, pcm.info, pcm.sample_rate, first, chunks, breaker, pcm)


def _candidates(plan: SpeechPlan, engines: tuple[EngineBackend, ...]) -> Iterator[SpeechPlan]:
    """The plan's own engine first, then each other engine of the route that can speak the request, re-planned."""
    yield plan
    for pool in engines:
        if pool is plan.pool:
            continue
        other = plan.for_engine(pool)
        if other is not None:
            yield other


def _settle(breaker: CircuitBreaker | None, exc: BaseException | None) -> None:
    """Tell the breaker how a try that produced no audio went: a failed job counts against the engine; anything else
    (not ready, overloaded, rejected, timed out, the client gone) is no verdict on it."""
    if breaker is None:
        return
    if isinstance(exc, SynthesisFailedError):
        breaker.record_failure()
    else:
        breaker.release()


def retry_reason(exc: Exception) -> RetryReason:
    """Why a try failed, from the error and what caused it or was being handled when it was raised (a remote engine
    raises ``SynthesisFailedError`` from the HTTP client's connect or timeout error)."""
    if isinstance(exc, EngineOverloadedError):
        return "overloaded"
    if isinstance(exc, EngineNotReadyError):
        return "not_ready"
    if isinstance(exc, FirstAudioTimeoutError):
        return "timeout"
    causes = list(_causes(exc))
    if any(isinstance(cause, TimeoutError) or "Timeout" in type(cause).__name__ for cause in causes):
        return "timeout"
    if any(isinstance(cause, ConnectionError) or "Connect" in type(cause).__name__ for cause in causes):
        return "refused"
    return "died" if "worker died" in str(exc) else "failed"


def _causes(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        # The context too: an engine that raises its own error "from None" while handling a timeout still timed out.
        current = current.__cause__ or current.__context__
