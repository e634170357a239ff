"""The one Redis client of a process, for one Redis, a Sentinel-managed master or a Redis Cluster, with the timeout
policy every user of it shares.

What redis-py does on each topology, and what the stores may rely on, is pinned by tests/unit/storage/: on a Cluster
every script, transaction and multi-key command must keep to one hash slot.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import ClusterNode, ClusterPubSub, RedisCluster
from redis.asyncio.connection import Connection, SSLConnection, UnixDomainSocketConnection
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool, SentinelManagedConnection
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

from storage.redis_url import parse_redis_url
from storage.settings import RedisPoolSettings

if TYPE_CHECKING:
    from storage.redis_url import RedisURL

__all__ = [
    "REDIS_TIMEOUT_S",
    "ClusterClient",
    "RedisClient",
    "SentinelMasterClient",
    "connect_redis",
    "pool_exhaustions",
]

RedisClient: TypeAlias = Redis | RedisCluster
"""What every store takes: one Redis (plain or behind Sentinel) or a Redis Cluster. Stores never reach into the
client's connection pool (a cluster client has one per node)."""

REDIS_TIMEOUT_S = 1.0
_HEALTH_CHECK_INTERVAL_S = 10
# How many times ``redis_pool.wait_s`` a command may wait for a connection while connections keep coming back.
_MOST_WAITS = 5


def connect_redis(url: str, pool: RedisPoolSettings | None = None) -> RedisClient:
    """A client for any URL of ``storage/redis_url.py``; it connects lazily, on its first command.

    Short timeouts and a single retry without backoff: an unreachable Redis must degrade requests quickly (fail
    open or closed, bypass the cache), never hang them, where redis-py's default retries with backoff for seconds.
    Responses are not decoded: the audio cache stores bytes, and every other user decodes what it reads. At most
    ``pool.max_connections`` connections; a command that finds them all in use waits up to ``pool.wait_s`` for one
    (one Redis or a Sentinel-managed master; a Cluster's pools refuse at once when full).

    Raises:
        InvalidRedisURLError: the URL is not one the gateway can use (the settings check it at load already).
    """
    target = parse_redis_url(url)
    pool = pool or RedisPoolSettings()
    if target.topology == "sentinel":
        return _sentinel_master(target, pool)
    if target.topology == "cluster":
        return _cluster(target, pool)
    return _standalone(target, pool)


def pool_exhaustions(client: RedisClient) -> int:
    """Commands of ``client`` that found every connection in use for all of ``wait_s`` (and failed)."""
    pool = getattr(client, "connection_pool", None)
    return pool.exhaustions if isinstance(pool, _WaitingPool) else 0


class _WaitingPool(BlockingConnectionPool):
    """redis-py's pool that waits for a free connection while connections keep coming back, counting the waits that
    ended empty-handed.

    redis-py's own wait is one deadline from the moment a command starts waiting. On a busy event loop that fails
    commands while Redis is healthy: a connection is back in the pool only once the coroutine that used it has run
    again, and with a thousand requests on the loop that can take longer than the deadline (1,000 requests at once on
    a loaded host: 34 failed as if Redis were down). What the deadline is for is a pool that no longer moves (Redis
    hung: every connection held until its socket timeout), so a command waits again while some connection came back
    during its last wait, up to :data:`_MOST_WAITS` waits in all."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.exhaustions = 0
        self._returned = 0  # connections given back since the start: whether the pool moved during a wait

    async def get_connection(self, *args: Any, **kwargs: Any) -> Connection:
        waits = 1
        while True:
            returned_before = self._returned
            try:
                connection: Connection = await super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]
            except RedisConnectionError as exc:
                if not isinstance(exc.__cause__, TimeoutError):  # a failed connect, not a wait
                    raise
                if self._returned == returned_before or waits == _MOST_WAITS:
                    self.exhaustions += 1
                    raise
                waits += 1
            else:
                return connection

    async def release(self, connection: Connection) -> None:  # type: ignore[override]
        self._returned += 1
        await super().release(connection)


class _WaitingSentinelPool(SentinelConnectionPool, _WaitingPool):
    """A Sentinel-managed master's pool that waits for a free connection (both redis-py classes, combined)."""


def _policy() -> dict[str, Any]:
    """The timeout policy, for one client's connections (a Retry object of its own for each)."""
    return {
        "socket_timeout": REDIS_TIMEOUT_S,
        "socket_connect_timeout": REDIS_TIMEOUT_S,
        "retry": Retry(NoBackoff(), 1),
    }


def _tls(target: RedisURL) -> dict[str, Any]:
    return {"ssl": True, **dict(target.tls_options)} if target.tls else {}


def _standalone(target: RedisURL, pool: RedisPoolSettings) -> Redis:
    where: dict[str, Any] = (
        {"path": target.socket_path, "connection_class": UnixDomainSocketConnection}
        if target.socket_path is not None
        else {
            "host": target.addresses[0][0],
            "port": target.addresses[0][1],
            **({"connection_class": SSLConnection, **dict(target.tls_options)} if target.tls else {}),
        }
    )
    connections = _WaitingPool(
        max_connections=pool.max_connections,
        timeout=pool.wait_s,
        **where,
        db=target.db,
        username=target.username,
        password=target.password,
        **_policy(),
        health_check_interval=_HEALTH_CHECK_INTERVAL_S,
    )
    return Redis.from_pool(connections)  # the client owns the pool: closing it closes the connections


class SentinelMasterClient(Redis):
    """The client of a Sentinel-managed master, which also closes its connections to the sentinels.

    Each of its connections asks the sentinels for the master's address whenever it connects, so after a failover the
    next connection goes to the new master: a connection to the old one fails (the old master is gone), or answers a
    write with ``READONLY`` (it came back as a replica, or was demoted by a manual failover), which redis-py turns
    into a ``ConnectionError`` that drops the connection; the client's one retry then reconnects, through the
    sentinels, to the new master (:class:`_SentinelAwareConnection`).
    """

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        pool = self.connection_pool
        if isinstance(pool, SentinelConnectionPool):
            await pool.sentinel_manager.aclose()


class _SentinelAwareConnection(SentinelManagedConnection):
    """A connection to the master that asks the sentinels where the master is on every connect, reconnects included.

    redis-py 8.1 asks them only when the pool hands out a connection that is not connected: a connection dropped and
    reconnected within a command (its retry after a ``READONLY`` or a lost connection, a failed health check) goes
    back to the address it had, the old master (redis/redis-py#3874, unfixed in 8.1.0). After a manual failover the
    retry then meets ``READONLY`` again and the write fails (tests/unit/storage/test_sentinel_failover.py).
    """

    async def connect_check_health(self, check_health: bool = True, retry_socket_connect: bool = True) -> None:
        if not self.is_connected:
            await self.connect()  # type: ignore[no-untyped-call]  # redis-py's sentinel-aware connect

    async def connect_to(self, address: tuple[str, int]) -> None:
        self.host, self.port = address
        await super().connect_check_health(
            check_health=self.connection_pool.check_connection, retry_socket_connect=False
        )


class _SentinelAwareSSLConnection(_SentinelAwareConnection, SSLConnection):
    pass


def _sentinel_master(target: RedisURL, pool: RedisPoolSettings) -> SentinelMasterClient:
    assert target.service is not None  # the parser requires it for this topology
    # The sentinels' own connections: the same policy (a sentinel that is down costs one timeout, then the next one
    # is asked), their own credentials, and TLS when the master speaks it.
    sentinel_kwargs = {
        "username": target.sentinel_username,
        "password": target.sentinel_password,
        **_tls(target),
        **_policy(),
    }
    sentinels = Sentinel(  # type: ignore[no-untyped-call]  # redis-py leaves Sentinel.__init__ unannotated
        list(target.addresses),
        sentinel_kwargs=sentinel_kwargs,
        db=target.db,
        username=target.username,
        password=target.password,
        **_tls(target),
        **_policy(),
        health_check_interval=_HEALTH_CHECK_INTERVAL_S,
    )
    connection_class = _SentinelAwareSSLConnection if target.tls else _SentinelAwareConnection
    client = sentinels.master_for(
        target.service,
        redis_class=SentinelMasterClient,
        connection_class=connection_class,
        connection_pool_class=_WaitingSentinelPool,
        max_connections=pool.max_connections,
        timeout=pool.wait_s,
    )
    assert isinstance(client, SentinelMasterClient)  # master_for builds it with redis_class
    return client


class ClusterClient(RedisCluster):
    """A Redis Cluster client that learns the cluster's slots before it routes its first commands.

    redis-py 8.1's asyncio client routes the commands that arrive before it knows the slots to any node: each is
    redirected (MOVED), and after a few redirections the client rebuilds its view of the cluster, closing connections
    that concurrent commands are using; they fail ("Connection closed by server", or an ``AttributeError`` from a
    closed writer). Its ``ClusterPubSub`` looks the channel's slot up without learning the slots first and fails with a
    bare ``KeyError`` (redis/redis-py#4296, fixed after 8.1.0): the revocation subscriber, the first user of the
    client, would die at start. Both learn the slots first here (once: later it is a check of a flag); redis-py's
    maintainers ask asyncio users to ``await initialize()`` before any command, which a lazily connecting client
    cannot do when it is built (tests/unit/storage/test_topologies.py).
    """

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        await self.initialize()
        return await super().execute_command(*args, **kwargs)

    def pubsub(
        self,
        node: ClusterNode | None = None,
        host: str | None = None,
        port: int | None = None,
        **kwargs: Any,
    ) -> ClusterPubSub:
        return _InitializedClusterPubSub(self, node=node, host=host, port=port, **kwargs)


class _InitializedClusterPubSub(ClusterPubSub):
    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        await self.cluster.initialize()
        return await super().execute_command(*args, **kwargs)


def _cluster(target: RedisURL, pool: RedisPoolSettings) -> ClusterClient:
    return ClusterClient(
        max_connections=pool.max_connections,
        startup_nodes=[ClusterNode(host, port) for host, port in target.addresses],
        # Keep the configured names for later topology refreshes: in Kubernetes the nodes announce pod addresses,
        # which all change when the pods are replaced, while a Service name keeps leading to the cluster.
        dynamic_startup_nodes=False,
        username=target.username,
        password=target.password,
        **_tls(target),
        **_policy(),
        health_check_interval=_HEALTH_CHECK_INTERVAL_S,
    )
