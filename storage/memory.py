"""What a Redis does when its memory is full: its ``maxmemory`` and ``maxmemory-policy``, and whether that may cost
keys the gateway cannot lose.

At ``maxmemory`` Redis refuses writes (``noeviction``), evicts keys that carry a TTL (``volatile-*``: here only audio
cache entries and records retired on purpose, see the key layout) or evicts any key (``allkeys-*``): API keys,
tenants, voices and usage too, which carry no TTL. Issue #26 measured the last: one tenant's 1,000 clips cost 19 of 30
tenants their API keys, silently.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ResponseError

if TYPE_CHECKING:
    import logging

    from storage.redis import RedisClient

__all__ = ["EvictionPolicyCheck", "MemoryLimit", "read_memory_limit"]


@dataclass(frozen=True)
class MemoryLimit:
    """A Redis's memory limit and what it does there (the smallest limit and the riskiest policy of a Cluster's
    nodes)."""

    maxmemory: int
    """Bytes; 0 is no limit."""
    policy: str
    """``maxmemory-policy``, e.g. ``noeviction`` or ``volatile-lru``."""
    startup: int = 0
    """Bytes Redis uses empty (``used_memory_startup``; 0 when unknown): about 0.9 MB, not negligible in a small
    ``maxmemory``."""

    @property
    def usable(self) -> int:
        """What data may take: ``maxmemory`` less what Redis uses empty (0 when there is no limit)."""
        return max(self.maxmemory - self.startup, 0)

    @property
    def evicts_keys_without_ttl(self) -> bool:
        return self.policy.startswith("allkeys-")


async def read_memory_limit(client: RedisClient) -> MemoryLimit | None:
    """The limit from ``INFO memory`` (allowed on managed Redis services that disable ``CONFIG``), else from
    ``CONFIG GET``; ``None`` when the server allows neither.

    Raises:
        redis.exceptions.ConnectionError, TimeoutError: Redis is unreachable (``STORAGE_ERRORS``).
    """
    # A Cluster client asks one node unless told otherwise: every primary holds cache shards and control-plane keys.
    nodes: dict[str, Any] = {"target_nodes": RedisCluster.PRIMARIES} if isinstance(client, RedisCluster) else {}
    try:
        info = await client.info("memory", **nodes)
        limit = _combined(_nodes(info), "maxmemory", "maxmemory_policy", "used_memory_startup")
    except ResponseError:  # refused: an ACL without INFO, a proxy that does not pass it on
        limit = None
    if limit is not None:
        return limit
    try:
        return _combined(_nodes(await client.config_get("maxmemory*", **nodes)), "maxmemory", "maxmemory-policy")
    except ResponseError:
        return None


def _nodes(reply: Any) -> list[dict[Any, Any]]:
    """One mapping per node: a plain client's reply is one, a Cluster client's maps each node to its own."""
    if not isinstance(reply, dict):
        return []
    if reply and all(isinstance(value, dict) for value in reply.values()):
        return list(reply.values())
    return [reply]


def _combined(
    nodes: list[dict[Any, Any]],
    limit_field: str,
    policy_field: str,
    startup_field: str = "",
) -> MemoryLimit | None:
    limits: list[MemoryLimit] = []
    for node in nodes:
        fields = {_text(name): _text(value) for name, value in node.items()}
        if limit_field not in fields or policy_field not in fields:
            return None
        limits.append(MemoryLimit(int(fields[limit_field]), fields[policy_field], int(fields.get(startup_field, 0))))
    if not limits:
        return None
    bounded = [limit.maxmemory for limit in limits if limit.maxmemory > 0]
    riskiest = next((limit.policy for limit in limits if limit.evicts_keys_without_ttl), limits[0].policy)
    return MemoryLimit(min(bounded, default=0), riskiest, max(limit.startup for limit in limits))


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class EvictionPolicyCheck:
    """Reads the ``maxmemory-policy`` of the Redis that holds the control plane (keys, tenants, voices, usage) once it
    answers, and warns once, loudly, when that policy may evict keys without a TTL.

    Args:
        client: The shared Redis.
        logger: Where the warning goes (or the info line saying the policy could not be read).
        cache_shares_it: Whether the audio cache lives in it too (then a Redis of its own is one of the fixes).
    """

    def __init__(self, client: RedisClient, logger: logging.Logger, *, cache_shares_it: bool) -> None:
        self._client = client
        self._logger = logger
        self._cache_shares_it = cache_shares_it
        self.done = False
        self.warning: str | None = None
        """The warning, for ``/readyz``, while the policy stays as it was read at start."""

    async def check(self) -> None:
        """Read the policy, unless done already.

        Raises:
            redis.exceptions.ConnectionError, TimeoutError: Redis is unreachable; the check is done on a later call.
        """
        if self.done:
            return
        limit = await read_memory_limit(self._client)
        self.done = True
        if limit is None:
            self._logger.info("the shared Redis's maxmemory-policy cannot be read (INFO and CONFIG refused)")
        elif limit.evicts_keys_without_ttl and limit.maxmemory > 0:  # no maxmemory: the policy never applies
            self.warning = self._warning(limit)
            self._logger.warning("%s", self.warning)

    def _warning(self, limit: MemoryLimit) -> str:
        fix = "set maxmemory-policy volatile-lru (only keys with a TTL are evicted) or noeviction"
        if self._cache_shares_it:
            fix += ", or give the audio cache a Redis of its own (cache.redis_url)"
        return (
            f"the shared Redis has maxmemory-policy {limit.policy}: at its maxmemory ({limit.maxmemory} bytes) it may "
            f"evict API keys, tenants, voices and usage, which carry no TTL; {fix}"
        )
