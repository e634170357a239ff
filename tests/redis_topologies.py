"""Real Redis topologies for tests: a Sentinel set-up (master, replica, three sentinels) and a 3-master Redis Cluster
(with or without replicas), on free loopback ports, with passwords, stopped by pid.

``tests/conftest.py`` loads this module as a plugin. Fixtures:

- ``redis_sentinel`` (session) and ``redis_sentinel_url`` (emptied for the test): a set-up that is never failed over.
- ``failover_sentinel``: a set-up of the test's own, to kill the master of (:meth:`SentinelSetup.kill_master`, then
  :meth:`SentinelSetup.wait_promoted`); its sentinels notice a dead master after a second.
- ``redis_cluster`` (session) and ``redis_cluster_url`` (emptied for the test).
- ``failover_cluster``: a cluster of the test's own with a replica per master, to kill a master of
  (:meth:`RedisClusterSetup.kill_master`, then :meth:`RedisClusterSetup.wait_promoted`); its nodes promote the replica
  of a master silent for a second.
- ``any_redis_url``: parametrized over one Redis, Sentinel and Cluster, for a contract that must hold on each.
- ``tls_files``: a CA and a server certificate for ``RedisServer(tls=...)``, ``SentinelSetup(tls=...)`` and
  ``RedisClusterSetup(tls=...)``: TLS-only servers whose URLs carry ``ssl_ca_certs``.

The URLs are in the gateway's schemes (``storage/redis_url.py``). Redis and the sentinels have different passwords,
so the sentinels' own (``sentinel_password``) is exercised too.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
import time
from typing import TYPE_CHECKING

import pytest
import redis

from harness.gateway_process import free_port
from tests.redis_server import RedisServer, TLSFiles, disconnected

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = [
    "REDIS_PASSWORD",
    "SENTINEL_PASSWORD",
    "SERVICE",
    "RedisClusterSetup",
    "SentinelSetup",
    "any_redis_url_fixture",
    "failover_cluster_fixture",
    "failover_sentinel_fixture",
    "redis_cluster_fixture",
    "redis_cluster_url_fixture",
    "redis_sentinel_fixture",
    "redis_sentinel_url_fixture",
    "tls_files_fixture",
]

REDIS_PASSWORD = "redis-pw-" + secrets.token_hex(4)
SENTINEL_PASSWORD = "sentinel-pw-" + secrets.token_hex(4)
SERVICE = "tts"
_QUORUM = 2


def _wait(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if condition():
                return
        except redis.RedisError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} after {timeout_s} s")
        time.sleep(0.02)


def _binary(name: str) -> None:
    if shutil.which(name) is None:
        pytest.fail(f"{name} is not installed (.ci/run installs Debian's redis-server, which brings redis-cli)")


class SentinelSetup:
    """A master, one replica and three sentinels (quorum 2) monitoring them as :data:`SERVICE`.

    Each sentinel is told of the replica and of the other sentinels in its configuration, so the set-up can fail
    over as soon as it has started, without waiting for the sentinels' hello messages (every 2 s).

    Args:
        down_after_ms: How long the master must be silent before a sentinel thinks it down. Short for the failover
            tests; long for the shared set-up, which a busy machine must never fail over by accident.
        tls: Every server and sentinel speaks TLS only, with these files.
    """

    def __init__(self, *, down_after_ms: int, tls: TLSFiles | None = None) -> None:
        self._down_after_ms = down_after_ms
        self._tls = tls
        # No 5 s wait for more replicas before a full synchronization (a diskless one, as persistence is off).
        self.master = RedisServer(
            password=REDIS_PASSWORD, args=["--masterauth", REDIS_PASSWORD, "--repl-diskless-sync-delay", "0"], tls=tls
        )
        self.replica = RedisServer(password=REDIS_PASSWORD, args=["--masterauth", REDIS_PASSWORD], tls=tls)
        self.replica.args += ["--replicaof", "127.0.0.1", str(self.master.port)]
        ids = [secrets.token_hex(20) for _ in range(3)]
        ports = [free_port() for _ in ids]
        self.sentinels = [
            RedisServer(
                port,
                password=SENTINEL_PASSWORD,
                sentinel_config=self._sentinel_config(
                    my_id, [(p, i) for p, i in zip(ports, ids, strict=True) if p != port]
                ),
                tls=tls,
            )
            for port, my_id in zip(ports, ids, strict=True)
        ]

    def _sentinel_config(self, my_id: str, others: list[tuple[int, str]]) -> str:
        lines = [
            f"sentinel myid {my_id}",
            f"sentinel monitor {SERVICE} 127.0.0.1 {self.master.port} {_QUORUM}",
            f"sentinel down-after-milliseconds {SERVICE} {self._down_after_ms}",
            f"sentinel failover-timeout {SERVICE} 10000",
            f"sentinel auth-pass {SERVICE} {REDIS_PASSWORD}",
            f"sentinel sentinel-pass {SENTINEL_PASSWORD}",
            f"sentinel known-replica {SERVICE} 127.0.0.1 {self.replica.port}",
            *(f"sentinel known-sentinel {SERVICE} 127.0.0.1 {port} {other}" for port, other in others),
        ]
        return "\n".join(lines) + "\n"

    @property
    def url(self) -> str:
        """The gateway's URL for the master: Redis's password in the user part, the sentinels' as an option."""
        sentinels = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        scheme, tls = ("redis", "") if self._tls is None else ("rediss", f"&ssl_ca_certs={self._tls.ca}")
        return (
            f"{scheme}+sentinel://:{REDIS_PASSWORD}@{sentinels}/{SERVICE}/0?sentinel_password={SENTINEL_PASSWORD}{tls}"
        )

    def start(self) -> SentinelSetup:
        for server in (self.master, self.replica, *self.sentinels):
            server.start()
        _wait(self._replica_in_sync, 10, "the replica never synchronized")
        _wait(self._sentinels_ready, 10, "the sentinels never saw the master, its replica and each other")
        return self

    def _replica_in_sync(self) -> bool:
        with disconnected(self.replica.client()) as client:
            return client.info("replication").get("master_link_status") == "up"

    def _sentinels_ready(self) -> bool:
        for sentinel in self.sentinels:
            with disconnected(sentinel.client()) as client:
                state = client.sentinel_master(SERVICE)
            assert isinstance(state, dict)  # redis-py's types add the bool a Sentinel-managed client may answer
            if state["num-slaves"] < 1 or state["num-other-sentinels"] < len(self.sentinels) - 1:
                return False
        return True

    def master_address(self, sentinel: RedisServer) -> tuple[str, int] | None:
        """What ``sentinel`` says the master is."""
        with disconnected(sentinel.client(decode_responses=True)) as client:
            address = client.sentinel_get_master_addr_by_name(SERVICE)
        assert not isinstance(address, bool)  # as above
        return None if address is None else (str(address[0]), int(address[1]))

    def wait_replicated(self, timeout_s: float = 5.0) -> None:
        """Wait until the replica holds every write the master has: what a failover then keeps is everything."""

        def caught_up() -> bool:
            with disconnected(self.master.client()) as master, disconnected(self.replica.client()) as replica:
                offset = master.info("replication")["master_repl_offset"]
                return bool(replica.info("replication")["slave_repl_offset"] >= offset)

        _wait(caught_up, timeout_s, "the replica never caught up with the master")

    def kill_master(self) -> None:
        """SIGKILL the master: a crash, with nothing flushed or handed over."""
        self.master.stop()

    def wait_promoted(self, timeout_s: float = 20.0) -> None:
        """Wait until every sentinel names the replica as the master and the replica says it is one; from then on
        :attr:`master` is the promoted server and :attr:`replica` the old master."""
        promoted = ("127.0.0.1", self.replica.port)

        def done() -> bool:
            if any(self.master_address(sentinel) != promoted for sentinel in self.sentinels):
                return False
            with disconnected(self.replica.client()) as client:
                return bool(client.info("replication")["role"] == "master")

        _wait(done, timeout_s, "the sentinels never promoted the replica")
        self.master, self.replica = self.replica, self.master

    def fail_over(self, timeout_s: float = 20.0) -> None:
        """A manual failover (``SENTINEL FAILOVER``): the replica is promoted, and the old master, alive, is made its
        replica at once, keeping its clients' connections: they get ``READONLY`` for a write. (The sentinels would
        demote it themselves after their next look at it, up to 10 s later, and close its clients' connections.) Then
        :attr:`master` and :attr:`replica` swap too."""
        old = self.master
        with disconnected(self.sentinels[0].client()) as client:
            client.sentinel_failover(SERVICE)
        self.wait_promoted(timeout_s)
        with disconnected(old.client()) as client:
            client.replicaof("127.0.0.1", self.master.port)

    def flush(self) -> None:
        self.master.flush()

    def remove(self) -> None:
        for server in (*self.sentinels, self.replica, self.master):
            server.remove()


class RedisClusterSetup:
    """Three masters, each with ``replicas`` replicas, made a cluster by ``redis-cli --cluster create``; with ``tls``,
    every node and the cluster bus speak TLS only.

    With replicas, a master can be killed (:meth:`kill_master`) and its replica promoted by the cluster itself
    (:meth:`wait_promoted`), once the nodes have missed it for ``node_timeout_ms``.
    """

    def __init__(
        self, masters: int = 3, tls: TLSFiles | None = None, *, replicas: int = 0, node_timeout_ms: int = 5000
    ) -> None:
        self._tls = tls
        self._replicas = replicas
        self.nodes = [RedisServer(password=REDIS_PASSWORD, tls=tls) for _ in range(masters * (1 + replicas))]
        self._killed: list[RedisServer] = []
        for node in self.nodes:
            node.args += ["--cluster-enabled", "yes", "--cluster-config-file", str(node.dir / "nodes.conf")]
            node.args += [] if tls is None else ["--tls-cluster", "yes"]
            # The bus port defaults to port + 10000, past 65535 for most free ports: a free one of its own.
            node.args += ["--cluster-port", str(free_port()), "--cluster-node-timeout", str(node_timeout_ms)]
            node.args += ["--masterauth", REDIS_PASSWORD, "--repl-diskless-sync-delay", "0"]

    @property
    def url(self) -> str:
        nodes = ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)
        if self._tls is not None:
            return f"rediss+cluster://:{REDIS_PASSWORD}@{nodes}?ssl_ca_certs={self._tls.ca}"
        return f"redis+cluster://:{REDIS_PASSWORD}@{nodes}"

    def start(self) -> RedisClusterSetup:
        for node in self.nodes:
            node.start()
        addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
        tls = [] if self._tls is None else ["--tls", "--cacert", str(self._tls.ca)]
        subprocess.run(
            [
                "redis-cli",
                *tls,
                "-a",
                REDIS_PASSWORD,
                "--no-auth-warning",
                "--cluster",
                "create",
                *addresses,
                "--cluster-replicas",
                str(self._replicas),
                "--cluster-yes",
            ],
            check=True,
            capture_output=True,
            timeout=30,
        )
        _wait(self._formed, 10, "the cluster never reached cluster_state:ok on every node")
        return self

    def _formed(self) -> bool:
        for node in self.nodes:
            with disconnected(node.client()) as client:
                info = client.cluster("INFO")
                replication = client.info("replication")
            if info["cluster_state"] != "ok" or int(info["cluster_known_nodes"]) != len(self.nodes):
                return False
            if replication["role"] != "master" and replication.get("master_link_status") != "up":
                return False
        return True

    @property
    def living(self) -> list[RedisServer]:
        return [node for node in self.nodes if node not in self._killed]

    def master_of(self, tag: str) -> RedisServer:
        """The master serving the slot of hash tag ``tag`` (where a key ``…{tag}…`` lives), as a living node says."""
        with disconnected(self.living[0].client()) as client:
            slot = int(client.cluster("KEYSLOT", tag))
            ranges = client.cluster("SLOTS")
        [port] = [int(master[1]) for start, end, master, *_ in ranges if int(start) <= slot <= int(end)]
        return self._node_at(port)

    def wait_replicated(self, timeout_s: float = 5.0) -> None:
        """Wait until every replica holds every write its master has: a failover then keeps everything."""

        def caught_up() -> bool:
            for node in self.nodes:
                with disconnected(node.client()) as client:
                    replication = client.info("replication")
                if replication["role"] == "master":
                    continue
                with disconnected(self._node_at(int(replication["master_port"])).client()) as master:
                    offset = master.info("replication")["master_repl_offset"]
                if replication["slave_repl_offset"] < offset:
                    return False
            return True

        _wait(caught_up, timeout_s, "the replicas never caught up with their masters")

    def kill_master(self, tag: str) -> None:
        """SIGKILL the master serving ``tag``: a crash, with nothing flushed or handed over."""
        node = self.master_of(tag)
        node.stop()
        self._killed.append(node)

    def wait_promoted(self, tag: str, timeout_s: float = 20.0) -> None:
        """Wait until every living node says the cluster is whole again, ``tag``'s slot served by a living master."""

        def done() -> bool:
            for node in self.living:
                with disconnected(node.client()) as client:
                    if client.cluster("INFO")["cluster_state"] != "ok":
                        return False
            return self.master_of(tag) in self.living

        _wait(done, timeout_s, "the cluster never promoted a replica")

    def _node_at(self, port: int) -> RedisServer:
        [node] = [node for node in self.nodes if node.port == port]
        return node

    def flush(self) -> None:
        for node in self.living:
            with disconnected(node.client()) as client:
                if client.info("replication")["role"] == "master":  # a replica refuses writes; its master's reach it
                    client.flushall()

    def remove(self) -> None:
        for node in self.nodes:
            node.remove()


@pytest.fixture(scope="session", name="redis_sentinel")
def redis_sentinel_fixture() -> Iterator[SentinelSetup]:
    """A session-wide Sentinel set-up; never failed over (use ``failover_sentinel`` for that)."""
    _binary("redis-server")
    setup = SentinelSetup(down_after_ms=30_000)
    try:
        yield setup.start()
    finally:
        setup.remove()


@pytest.fixture(name="redis_sentinel_url")
def redis_sentinel_url_fixture(redis_sentinel: SentinelSetup) -> str:
    """The session Sentinel set-up's URL, its master emptied for this test."""
    redis_sentinel.flush()
    return redis_sentinel.url


@pytest.fixture(name="failover_sentinel")
def failover_sentinel_fixture() -> Iterator[SentinelSetup]:
    """A Sentinel set-up of this test's own, whose sentinels fail over a master that is silent for a second."""
    _binary("redis-server")
    setup = SentinelSetup(down_after_ms=1000)
    try:
        yield setup.start()
    finally:
        setup.remove()


@pytest.fixture(scope="session", name="redis_cluster")
def redis_cluster_fixture() -> Iterator[RedisClusterSetup]:
    """A session-wide 3-master Redis Cluster."""
    _binary("redis-server")
    _binary("redis-cli")
    setup = RedisClusterSetup()
    try:
        yield setup.start()
    finally:
        setup.remove()


@pytest.fixture(name="failover_cluster")
def failover_cluster_fixture() -> Iterator[RedisClusterSetup]:
    """A cluster of this test's own, three masters with a replica each, which promotes a replica once its master has
    been silent for a second."""
    _binary("redis-server")
    _binary("redis-cli")
    setup = RedisClusterSetup(replicas=1, node_timeout_ms=1000)
    try:
        yield setup.start()
    finally:
        setup.remove()


@pytest.fixture(name="redis_cluster_url")
def redis_cluster_url_fixture(redis_cluster: RedisClusterSetup) -> str:
    """The session cluster's URL, every node emptied for this test."""
    redis_cluster.flush()
    return redis_cluster.url


@pytest.fixture(scope="session", name="tls_files")
def tls_files_fixture(tmp_path_factory: pytest.TempPathFactory) -> TLSFiles:
    """A CA and a certificate it signed for 127.0.0.1, for TLS-only test servers."""
    return TLSFiles.create(tmp_path_factory.mktemp("tls"))


@pytest.fixture(name="any_redis_url", params=["redis", "sentinel", "cluster"])
def any_redis_url_fixture(request: pytest.FixtureRequest) -> str:
    """One Redis, a Sentinel-managed master and a Redis Cluster in turn, each emptied for the test."""
    fixture = {"redis": "redis_url", "sentinel": "redis_sentinel_url", "cluster": "redis_cluster_url"}[request.param]
    url: str = request.getfixturevalue(fixture)
    return url
