"""The reply of the speech operation (:meth:`SpeechService.speak`): audio on its way to one client, and what the
synthesis that produced it settled (shared by every request that joined it)."""

from __future__ import annotations

import asyncio
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio

from engines.base import InvalidSynthesisRequestError
from engines.errors import EngineNotReadyError, EngineOverloadedError, SynthesisFailedError
from gateway.speech.delivery import AudioClock, speech_usage
from gateway.speech.errors import FailoverExhaustedError, ResponseTruncatedError

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable
    from contextlib import AsyncExitStack

    from auth.limits import LimitState
    from engines.timing import TimestampsKind
    from gateway.schemas import SpeechRequest, SpeechUsage
    from gateway.speech.alignment import Alignment, SpeechChunk, WordTime
    from lifecycle import BackgroundTasks

__all__ = ["Outcome", "SpeechReply"]

# What can end a stream after its first bytes: the engine failed, its stream was cut, or a later segment could not
# start. Anything else (a bug) keeps its traceback.
_ENGINE_ERRORS = (
    SynthesisFailedError,
    EngineNotReadyError,
    EngineOverloadedError,
    InvalidSynthesisRequestError,
    FailoverExhaustedError,
)


@dataclass
class Outcome:
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
    """Audio on its way to one client: iterate :meth:`audio` or :meth:`timed` once (or render it, as OpenAI's
    server-sent events do: ``gateway/openai/speech_events.py``), or send :attr:`whole` (when it is there).

    Whoever called :meth:`SpeechService.speak` owns the reply and releases it, with :meth:`close` or ``async with``:
    the HTTP endpoint after its response, a realtime session when the segment or response ends. Release frees what
    the request holds (its stream lease, its share of the synthesis) and records its usage, on every ending (the HTTP
    routes' responses release it in a ``finally``: ``gateway/http/released.py``). Only a reply its owner lost is
    released when it is garbage-collected.
    """

    request: SpeechRequest
    engine: str
    cache_hit: bool
    outcome: Outcome
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
        self._heard_s: float | None = None  # until iterated: the whole audio (a cache hit's goes out in one body)
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
                self._heard_s = self._first.until_s
                yield self._first
            async for chunk in self._rest:
                if growing:
                    alignment.words.extend(chunk.words)
                self._heard_s = max(self._heard_s or 0.0, chunk.until_s)
                yield chunk
        except _ENGINE_ERRORS as exc:  # after the first bytes: the response can only end short
            if self.on_cut is not None:
                self.on_cut(exc)
            raise ResponseTruncatedError(str(exc)) from exc
        alignment.audio_s = self._heard_s = self.outcome.clock.seconds

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

    @property
    def heard_seconds(self) -> float:
        """The audio seconds this reply delivered, what its request is charged: up to the last piece its owner took
        (a shared synthesis runs ahead of a listener who stops, a barge-in), all of it once it ended or when it went
        out whole."""
        return self.outcome.clock.seconds if self._heard_s is None else self._heard_s

    def usage(self) -> SpeechUsage:
        characters = len(self.request.input) if self.characters is None else self.characters
        return speech_usage(characters, self.heard_seconds)

    @property
    def retries(self) -> int:
        """Tries the synthesis repeated before its first audio (0 for a cache hit)."""
        return self.outcome.retries
