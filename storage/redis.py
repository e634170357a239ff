"""The one Redis client of a process, with the timeout policy every user of it shares."""

from __future__ import annotations

from typing import TypeAlias

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

__all__ = ["REDIS_TIMEOUT_S", "RedisClient", "connect_redis"]

RedisClient: TypeAlias = Redis | RedisCluster
"""What every store takes: one Redis (plain or behind Sentinel) or a Redis Cluster. Stores never reach into the
client's connection pool (a cluster client has one per node)."""

REDIS_TIMEOUT_S = 1.0


def connect_redis(url: str) -> Redis:
    """A client for ``redis://[[user]:password@]host:port/db`` or ``rediss://`` (TLS); connects lazily.

    Short timeouts and a single retry without backoff: an unreachable Redis must degrade requests quickly (fail
    open or closed, bypass the cache), never hang them, where redis-py's default retries with backoff for seconds.
    Responses are not decoded: the audio cache stores bytes, and every other user decodes what it reads.
    """
    return Redis.from_url(
        url,
        socket_timeout=REDIS_TIMEOUT_S,
        socket_connect_timeout=REDIS_TIMEOUT_S,
        health_check_interval=10,
        retry=Retry(NoBackoff(), 1),
    )
