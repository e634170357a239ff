"""What the auth contract suites run against: an :class:`~auth.AuthStore` and a
:class:`~auth.limits.TenantRateLimiter` in memory or on Redis (a real redis-server, or fakeredis where a test says so).

A module, not a test module: test modules import from here, never from each other. The fixtures that parametrize
over the backends stay in the test modules, each with the backends it runs against.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import fakeredis
import redis.asyncio as aioredis

from auth import AuthStore, MemoryAuthStore, RedisAuthStore
from auth.limits import TenantRateLimiter
from storage import connect_redis

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    import pytest

    from storage import RedisClient

__all__ = ["MEMORY", "Backend", "Limiters", "make_backend"]

MEMORY = "memory://"
"""What :class:`Limiters` takes for a limiter that keeps its limits in memory."""


@dataclass
class Backend:
    """A store under test, plus what the contract needs to look behind it."""

    store: AuthStore
    dump: Callable[[], Awaitable[bytes]]
    """Everything the backend holds, as bytes: to search for secrets."""
    replica: Callable[[], AuthStore]
    """Another store on the same data, as another gateway replica would have."""
    closers: list[AuthStore] = field(default_factory=list)

    async def close(self) -> None:
        for store in self.closers:
            await store.close()


def make_backend(kind: str, request: pytest.FixtureRequest) -> Backend:
    """A store of ``kind``: ``memory``, ``fakeredis`` or ``redis`` (the session's real redis-server, emptied)."""
    if kind == "memory":
        return _memory_backend()
    if kind == "fakeredis":
        server = fakeredis.FakeServer()
        return _redis_backend(lambda: fakeredis.FakeAsyncRedis(server=server))
    url: str = request.getfixturevalue("redis_url")
    return _redis_backend(lambda: aioredis.Redis.from_url(url))


def _memory_backend() -> Backend:
    store = MemoryAuthStore()

    async def dump() -> bytes:
        return repr(vars(store)).encode()

    return Backend(store=store, dump=dump, replica=lambda: store, closers=[store])


def _redis_backend(new_client: Callable[[], aioredis.Redis]) -> Backend:
    prefix = f"test:{uuid.uuid4().hex}:"
    inspector = new_client()

    def replica() -> AuthStore:
        store = RedisAuthStore(new_client(), prefix, owns_client=True)
        made.closers.append(store)
        return store

    made = Backend(store=RedisAuthStore(new_client(), prefix, owns_client=True), dump=lambda: _dump_redis(inspector),
                      replica=replica)  # fmt: skip
    made.closers.extend([made.store, RedisAuthStore(inspector, owns_client=True)])
    return made


async def _dump_redis(client: aioredis.Redis) -> bytes:
    parts: list[bytes] = []
    async for key in client.scan_iter():
        parts.append(key + b"=" + repr(await _redis_value(client, key)).encode())
    return b"\n".join(parts)


async def _redis_value(client: aioredis.Redis, key: bytes) -> object:
    kind = await client.type(key)
    match kind.decode() if isinstance(kind, bytes) else kind:
        case "string":
            return await client.get(key)
        case "hash":
            return await client.hgetall(key)
        case "set":
            return await client.smembers(key)
        case "zset":
            return await client.zrange(key, 0, -1)
        case other:
            raise AssertionError(f"no dump for a Redis {other}")


class Limiters:
    """Makes rate limiters, each on a client of its own, and closes them all (limiters first, then their clients)."""

    def __init__(self) -> None:
        self._limiters: list[TenantRateLimiter] = []
        self._clients: list[RedisClient] = []

    def __call__(self, uri: str, **options: Any) -> TenantRateLimiter:
        """A limiter on the Redis at ``uri``, or in memory for :data:`MEMORY`; ``options`` as the limiter takes."""
        client = None if uri == MEMORY else connect_redis(uri)
        if client is not None:
            self._clients.append(client)
        limiter = TenantRateLimiter(client, **options)
        self._limiters.append(limiter)
        return limiter

    async def close(self) -> None:
        for limiter in self._limiters:
            await limiter.close()
        for client in self._clients:
            await client.aclose()
