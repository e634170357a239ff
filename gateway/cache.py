"""The audio cache, and single-flight sharing of identical syntheses in flight on one replica.

A cache key covers everything that changes the audio (:func:`cache_key`). The cache never fails a request: a
backend error reads as a miss and a write that fails is dropped, with one warning per outage.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time
import unicodedata
import warnings
from collections import OrderedDict
from typing import TYPE_CHECKING, Protocol
from urllib.parse import unquote, urlparse

from aiocache import RedisCache  # type: ignore[import-untyped]
from aiocache.serializers import NullSerializer  # type: ignore[import-untyped]
from redis.exceptions import RedisError

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping

    from gateway.settings import CacheSettings

__all__ = ["AudioCache", "ProductionCancelledError", "SingleFlight", "cache_key"]

logger = logging.getLogger("tts_gateway.cache")

_KEY_VERSION = 1  # bump when the key's contents change, so old entries are never served for new requests
_BACKEND_ERRORS: tuple[type[Exception], ...] = (RedisError, OSError)  # TimeoutError (aiocache's) is an OSError
_REDIS_TIMEOUT_S = 1.0


def cache_key(
    *, engine: str, weights_id: str, text: str, voice_id: str, response_format: str, speed: float,
    instructions: str | None, params: Mapping[str, object],
) -> str:
    """The cache key of one synthesis: a SHA-256 over a canonical JSON of everything that shapes the audio.

    The text is NFC-normalized with whitespace runs collapsed to one space and stripped, so texts that read the
    same share an entry. ``params`` are the sampling parameters; their values must be JSON-serializable.
    """
    canonical = {
        "v": _KEY_VERSION,
        "engine": engine,
        "weights": weights_id,
        "text": " ".join(unicodedata.normalize("NFC", text).split()),
        "voice": voice_id,
        "format": response_format,
        "speed": float(speed),
        "instructions": instructions,
        "params": dict(params),
    }
    encoded = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(encoded.encode()).hexdigest()


class _AudioStore(Protocol):
    async def get(self, key: str) -> bytes | None: ...
    async def set(self, key: str, audio: bytes) -> None: ...
    async def close(self) -> None: ...


class _MemoryLRU:
    """In-process entries, least recently used evicted first.

    Written here because aiocache's memory cache has no size bound.
    """

    def __init__(self, max_entries: int, ttl_s: float) -> None:
        self._entries: OrderedDict[str, tuple[float, bytes]] = OrderedDict()
        self._max_entries = max_entries
        self._ttl_s = ttl_s

    async def get(self, key: str) -> bytes | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        expires, audio = entry
        if expires <= time.monotonic():
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return audio

    async def set(self, key: str, audio: bytes) -> None:
        self._entries[key] = (time.monotonic() + self._ttl_s, audio)
        self._entries.move_to_end(key)
        while len(self._entries) > self._max_entries:
            self._entries.popitem(last=False)

    async def close(self) -> None:
        self._entries.clear()


class _RedisStore:
    """aiocache's RedisCache with the audio bytes stored as they are."""

    def __init__(self, redis_url: str, ttl_s: int) -> None:
        url = urlparse(redis_url)
        self._ttl_s = float(ttl_s)  # a float TTL makes aiocache use PSETEX, not the deprecated SETEX
        self._cache = RedisCache(
            # NullSerializer decodes UTF-8 unless told no encoding: audio must go through untouched.
            serializer=NullSerializer(encoding=None),
            namespace="tts:audio",
            endpoint=url.hostname or "127.0.0.1",
            port=url.port or 6379,
            db=int(url.path.strip("/") or 0),
            password=unquote(url.password) if url.password else None,
            ssl=url.scheme == "rediss",
            timeout=_REDIS_TIMEOUT_S,
            create_connection_timeout=_REDIS_TIMEOUT_S,
        )

    async def get(self, key: str) -> bytes | None:
        audio: bytes | None = await self._cache.get(key)
        return audio

    async def set(self, key: str, audio: bytes) -> None:
        await self._cache.set(key, audio, ttl=self._ttl_s)

    async def close(self) -> None:
        # aiocache 0.12 closes with redis-py's deprecated ``close()``; its replacement ``aclose()`` is not reachable.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"Call to deprecated close\.", category=DeprecationWarning)
            await self._cache.close()


class AudioCache:
    """Finished audio by :func:`cache_key`: in Redis when ``redis_url`` is set, else an in-memory LRU.

    Args:
        settings: TTL, entry size bound, memory entry count and whether caching is on at all.
        redis_url: the shared Redis, or ``None`` for this process's memory.
    """

    def __init__(self, settings: CacheSettings, redis_url: str | None) -> None:
        self._settings = settings
        self._store: _AudioStore
        if redis_url is None:
            self._store = _MemoryLRU(settings.max_memory_entries, settings.ttl_s)
        else:
            self._store = _RedisStore(redis_url, settings.ttl_s)
        self._in_outage = False

    async def get(self, key: str) -> bytes | None:
        """The cached audio, or ``None`` on a miss, with caching off, or when the backend fails."""
        if not self._settings.enabled:
            return None
        try:
            audio = await self._store.get(key)
        except _BACKEND_ERRORS as exc:
            self._failed(exc)
            return None
        self._worked()
        return audio

    async def set(self, key: str, audio: bytes) -> None:
        """Store ``audio``; entries over ``max_entry_bytes`` are skipped and backend errors swallowed."""
        if not self._settings.enabled or len(audio) > self._settings.max_entry_bytes:
            return
        try:
            await self._store.set(key, audio)
        except _BACKEND_ERRORS as exc:
            self._failed(exc)
            return
        self._worked()

    async def close(self) -> None:
        """Close the backend's connections."""
        with contextlib.suppress(*_BACKEND_ERRORS):
            await self._store.close()

    def _failed(self, exc: Exception) -> None:
        if not self._in_outage:
            self._in_outage = True
            logger.warning("audio cache unreachable, bypassing it until it returns: %r", exc)

    def _worked(self) -> None:
        if self._in_outage:
            self._in_outage = False
            logger.warning("audio cache reachable again")


class ProductionCancelledError(Exception):
    """A shared synthesis was cancelled from outside (e.g. shutdown) while waiters were still reading it."""


class _Flight:
    """One production and the chunks it has made so far."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.done = False
        self.error: BaseException | None = None
        self.waiters = 0
        self.task: asyncio.Task[None] | None = None
        self._news = asyncio.Event()

    def publish(self) -> None:
        """Wake every waiter; the next wait needs newer news."""
        self._news.set()
        self._news = asyncio.Event()

    def next_news(self) -> Awaitable[bool]:
        return self._news.wait()


class SingleFlight:
    """Identical requests in flight on one replica share one producer.

    The first caller of :meth:`stream` for a key starts ``produce()`` in a background task; every caller reads the
    chunks from the beginning and then follows new ones as they come. A caller that stops reading leaves the others
    undisturbed; when the last one leaves, the production is cancelled.
    """

    def __init__(self) -> None:
        self._flights: dict[str, _Flight] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def stream(
        self, key: str, produce: Callable[[], AsyncIterator[bytes]],
        on_complete: Callable[[bytes], Awaitable[None]] | None = None,
    ) -> AsyncGenerator[bytes, None]:
        """The chunks of the production for ``key``, started by the first caller.

        Args:
            key: requests with equal keys share one production (see :func:`cache_key`).
            produce: makes the chunks; called once per production.
            on_complete: awaited with the whole audio once the production finished successfully (never for a
                failed or cancelled one), e.g. to store it in the :class:`AudioCache`. The first caller's is used.

        Raises:
            Exception: whatever ``produce()`` raised, re-raised to every caller.
            ProductionCancelledError: the production was cancelled from outside while this caller was reading.
        """
        return self._follow(key, produce, on_complete)

    @property
    def in_flight(self) -> int:
        """Productions running now."""
        return len(self._flights)

    async def _follow(
        self, key: str, produce: Callable[[], AsyncIterator[bytes]],
        on_complete: Callable[[bytes], Awaitable[None]] | None,
    ) -> AsyncGenerator[bytes, None]:
        # Joined on the first ``anext``, not at the call: a stream never iterated starts and holds nothing.
        flight = self._flights.get(key) or self._start(key, produce, on_complete)
        flight.waiters += 1
        try:
            sent = 0
            while True:
                while sent < len(flight.chunks):
                    yield flight.chunks[sent]
                    sent += 1
                if flight.error is not None:
                    raise flight.error
                if flight.done:
                    return
                await flight.next_news()
        finally:
            flight.waiters -= 1
            if flight.waiters == 0 and not flight.done and flight.task is not None:
                flight.task.cancel()
                if self._flights.get(key) is flight:  # a new caller must start afresh, not join a cancelled one
                    del self._flights[key]
            if flight.waiters == 0:
                # A failed flight has left the table, so the last caller has raised its error. Raised, the error's
                # traceback holds the callers' frames and they hold the flight: dropping it breaks that cycle, which
                # would keep the frames of ``produce()`` (an encoder) until a full garbage collection.
                flight.error = None

    def _start(
        self, key: str, produce: Callable[[], AsyncIterator[bytes]],
        on_complete: Callable[[bytes], Awaitable[None]] | None,
    ) -> _Flight:
        flight = _Flight()
        self._flights[key] = flight
        flight.task = asyncio.get_running_loop().create_task(self._produce(key, flight, produce, on_complete))
        self._tasks.add(flight.task)
        flight.task.add_done_callback(self._ended)
        return flight

    def _ended(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            # A cancelled task keeps the CancelledError it ended with until someone awaits it, which nobody does;
            # its traceback holds this task's frame (the flight, and so the task again) and the frames of
            # ``produce()`` (an encoder, the engine's stream). Taking it here frees them now instead of at the
            # next full garbage collection.
            with contextlib.suppress(asyncio.CancelledError):
                task.exception()

    async def _produce(
        self, key: str, flight: _Flight, produce: Callable[[], AsyncIterator[bytes]],
        on_complete: Callable[[bytes], Awaitable[None]] | None,
    ) -> None:
        try:
            try:
                async for chunk in produce():
                    flight.chunks.append(chunk)
                    flight.publish()
            except asyncio.CancelledError:
                flight.error = ProductionCancelledError(f"production of {key} cancelled")
                raise
            except Exception as exc:  # every waiter gets it; nobody awaits this task
                flight.error = exc
                return
            flight.done = True
            flight.publish()
            # Still in the table meanwhile: an identical request arriving now joins the finished flight.
            await _complete(on_complete, b"".join(flight.chunks))
        finally:
            if self._flights.get(key) is flight:
                del self._flights[key]
            flight.publish()


async def _complete(on_complete: Callable[[bytes], Awaitable[None]] | None, audio: bytes) -> None:
    if on_complete is None:
        return
    try:
        await on_complete(audio)
    except Exception:  # the audio was delivered; a failed store must not surface anywhere
        logger.exception("storing completed audio failed")

