"""The audio cache: finished audio by a key over everything that shapes it, in Redis or in memory.

A cache key covers everything that changes the audio (:func:`cache_key`). The cache never fails a request: a
backend error reads as a miss and a write that fails is dropped, with one warning per outage.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import time
import unicodedata
from collections import OrderedDict
from typing import TYPE_CHECKING, Protocol

from aiocache import RedisCache  # type: ignore[import-untyped]
from aiocache.serializers import NullSerializer  # type: ignore[import-untyped]

from storage import STORAGE_ERRORS, OutageLatch
from storage.redis import REDIS_TIMEOUT_S

if TYPE_CHECKING:
    from collections.abc import Mapping

    from redis.asyncio import Redis

    from gateway.settings import CacheSettings

__all__ = ["AudioCache", "cache_key"]

logger = logging.getLogger("tts_gateway.cache")

_KEY_VERSION = 1  # bump when the key's contents change, so old entries are never served for new requests


def cache_key(
    *,
    engine: str,
    weights_id: str,
    text: str,
    voice_id: str,
    response_format: str,
    speed: float,
    instructions: str | None,
    params: Mapping[str, object],
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
    """aiocache's RedisCache on the process's shared Redis client, with the audio bytes stored as they are."""

    def __init__(self, client: Redis, ttl_s: int) -> None:
        self._ttl_s = float(ttl_s)  # a float TTL makes aiocache use PSETEX, not the deprecated SETEX
        # aiocache builds its client from a connection pool it makes itself, from host, port, db and password only
        # (no ACL user name); handing it the shared client's pool instead keeps one pool, one timeout policy and
        # the URL's full credentials (ACL user, TLS) for every user of Redis.
        shared_pool = client.connection_pool
        self._cache = RedisCache(
            # NullSerializer decodes UTF-8 unless told no encoding: audio must go through untouched.
            serializer=NullSerializer(encoding=None),
            namespace="tts:audio",
            connection_pool_class=lambda **_: shared_pool,
            timeout=REDIS_TIMEOUT_S,
        )

    async def get(self, key: str) -> bytes | None:
        audio: bytes | None = await self._cache.get(key)
        return audio

    async def set(self, key: str, audio: bytes) -> None:
        await self._cache.set(key, audio, ttl=self._ttl_s)

    async def close(self) -> None:
        return None  # the pool belongs to the shared client, closed by whoever built it


class AudioCache:
    """Finished audio by :func:`cache_key`: in Redis when ``redis_url`` is set, else an in-memory LRU.

    Args:
        settings: TTL, entry size bound, memory entry count, whether caching is on and shared across tenants.
        redis: the process's Redis client, or ``None`` for this process's memory.
    """

    def __init__(self, settings: CacheSettings, redis: Redis | None) -> None:
        self._settings = settings
        self._store: _AudioStore
        if redis is None:
            self._store = _MemoryLRU(settings.max_memory_entries, settings.ttl_s)
        else:
            self._store = _RedisStore(redis, settings.ttl_s)
        self._outage = OutageLatch(
            logger, "audio cache unreachable, bypassing it until it returns", "audio cache reachable again"
        )

    @property
    def shared_across_tenants(self) -> bool:
        """Whether tenants hit each other's entries (``cache.shared_across_tenants``)."""
        return self._settings.shared_across_tenants

    async def get(self, key: str) -> bytes | None:
        """The cached audio, or ``None`` on a miss, with caching off, or when the backend fails."""
        if not self._settings.enabled:
            return None
        try:
            audio = await self._store.get(key)
        except STORAGE_ERRORS as exc:
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
        except STORAGE_ERRORS as exc:
            self._failed(exc)
            return
        self._worked()

    async def close(self) -> None:
        """Close the backend's connections."""
        with contextlib.suppress(*STORAGE_ERRORS):
            await self._store.close()

    def _failed(self, exc: Exception) -> None:
        self._outage.failed(exc)

    def _worked(self) -> None:
        self._outage.worked()
