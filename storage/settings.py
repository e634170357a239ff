"""The settings of the process's Redis client's connections (``redis_pool`` in the configuration)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["RedisPoolSettings"]


class RedisPoolSettings(BaseModel):
    """How many connections the process's one Redis client keeps, and how long a command waits for one.

    A request holds a connection only for each of its round trips (well under a millisecond on a local network), so a
    few hundred serve thousands of requests in flight; what is beyond them waits for the next free connection instead
    of failing (redis-py's default pool fails at once when empty: a burst of requests got 503 while Redis idled)."""

    model_config = ConfigDict(extra="forbid")

    max_connections: int = Field(default=256, ge=1)
    """Connections to Redis (to each master of a Cluster) this process may open. Keep it under Redis's
    ``maxclients`` (10,000) divided by the replicas that share it; ``server.max_connections`` (1,000) client
    connections need far fewer, for each holds one only during a round trip."""
    wait_s: float = Field(default=2.0, gt=0)
    """How long a command waits for a free connection when all ``max_connections`` are in use and none comes back
    meanwhile, before it fails as if Redis were unreachable (counted in ``tts_redis_pool_exhausted_total``); while
    connections do come back it waits again, up to five times this in all. A Redis Cluster client does not wait:
    redis-py's cluster pools refuse at once when full."""
