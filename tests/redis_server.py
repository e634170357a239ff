"""A real ``redis-server`` for tests: started on a free port, stopped by its pid, restartable to simulate outages.

``tests/conftest.py`` loads this module as a plugin, so every test can ask for ``redis_server``, ``redis_url`` or
``outage_redis``. Tests that need Redis fail when no ``redis-server`` binary is installed: CI installs it.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import redis

from harness.gateway_process import free_port

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

__all__ = [
    "RedisServer",
    "TLSFiles",
    "disconnected",
    "outage_redis_fixture",
    "redis_server_fixture",
    "redis_url_fixture",
]


_BIND_FAILED = "Address already in use"  # what redis-server logs when a port it was given is taken


class RedisServer:
    """One ``redis-server`` process without persistence, on a fixed port across restarts.

    Args:
        port: The port; a free one by default.
        password: ``requirepass`` (and what :attr:`url` and the helpers here authenticate with).
        args: More command-line options, e.g. ``["--replicaof", "127.0.0.1", "6379"]``.
        sentinel_config: Run as a sentinel with this configuration (written once: a sentinel rewrites its file).
        tls: Serve TLS only, on ``port``, with these files (and replicate over TLS).
    """

    def __init__(
        self,
        port: int | None = None,
        *,
        password: str | None = None,
        args: Sequence[str] = (),
        sentinel_config: str | None = None,
        tls: TLSFiles | None = None,
    ) -> None:
        self.port = port or free_port()
        self._ports_chosen_here = port is None
        self.password = password
        self.args = list(args)
        self.tls = tls
        self._sentinel_config = sentinel_config
        self.dir = Path(tempfile.mkdtemp(prefix="redis-test-"))
        self._pidfile = self.dir / "redis.pid"

    @property
    def url(self) -> str:
        credentials = f":{self.password}@" if self.password else ""
        if self.tls is not None:
            return f"rediss://{credentials}127.0.0.1:{self.port}/0?ssl_ca_certs={self.tls.ca}"
        return f"redis://{credentials}127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int:
        return int(self._pidfile.read_text())

    def client(self, **options: Any) -> redis.Redis:
        """A synchronous client of this server; disconnect its pool when done (:func:`disconnected`)."""
        tls = {} if self.tls is None else {"ssl": True, "ssl_ca_certs": str(self.tls.ca)}
        return redis.Redis(port=self.port, password=self.password, **{"socket_connect_timeout": 1, **tls, **options})

    def start(self) -> None:
        """Start the daemon and wait until it answers. Ports chosen here (by :func:`free_port`, which frees the port
        it found) may be taken by someone else before the daemon binds them: then they are chosen again, twice at
        most, before the first start only (a restart keeps its port)."""
        for attempt in range(3):
            logged = self._log_size()
            try:
                self._start()
                self._ports_chosen_here = False  # started: its port is fixed from now on
                return
            except (redis.ConnectionError, redis.TimeoutError):  # refused, or someone else's listener is silent
                port_taken = _BIND_FAILED in self.log()[logged:]
                if not (self._ports_chosen_here and port_taken and attempt < 2):
                    raise
                self._choose_ports_again()

    def _choose_ports_again(self) -> None:
        self.port = free_port()
        if "--cluster-port" in self.args:  # a cluster node's bus port, chosen by free_port too
            self.args[self.args.index("--cluster-port") + 1] = str(free_port())

    def _start(self) -> None:
        binary = shutil.which("redis-server")
        assert binary is not None
        command = [binary]
        if self._sentinel_config is not None:
            config = self.dir / "sentinel.conf"
            if not config.exists():
                config.write_text(self._sentinel_config)
            command += [str(config), "--sentinel"]
        else:
            command += ["--save", "", "--appendonly", "no"]
        command += ["--port", str(self.port)] if self.tls is None else self.tls.server_options(self.port)
        command += ["--bind", "127.0.0.1", "--daemonize", "yes"]
        command += ["--pidfile", str(self._pidfile), "--dir", str(self.dir), "--logfile", str(self.dir / "redis.log")]
        if self.password:
            command += ["--requirepass", self.password]
        subprocess.run([*command, *self.args], check=True, capture_output=True)
        try:
            self._wait_answering()
        except BaseException:
            if self._pidfile.exists():  # a daemon that never answered must not outlive the test
                self.stop()
            raise

    def _wait_answering(self) -> None:
        with disconnected(self.client(socket_connect_timeout=0.2)) as client:
            deadline = time.monotonic() + 5
            while True:
                try:
                    client.ping()
                    return
                except redis.ConnectionError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.01)

    def stop(self) -> None:
        """Kill the server (SIGKILL: an outage, not a clean shutdown) and wait until its port is closed."""
        os.kill(self.pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while _port_open(self.port) and time.monotonic() < deadline:
            time.sleep(0.01)
        self._pidfile.unlink(missing_ok=True)

    def remove(self) -> None:
        if self._pidfile.exists():
            self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def flush(self) -> None:
        with disconnected(self.client()) as client:
            client.flushall()

    def log(self) -> str:
        log = self.dir / "redis.log"
        return log.read_text(errors="replace") if log.exists() else ""

    def _log_size(self) -> int:
        return len(self.log())


@dataclass(frozen=True)
class TLSFiles:
    """A CA and a certificate it signed for 127.0.0.1 and localhost, with its key: what a TLS server here serves."""

    ca: Path
    cert: Path
    key: Path

    @classmethod
    def create(cls, directory: Path) -> TLSFiles:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        def name(common_name: str) -> x509.Name:
            return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])

        now = datetime.datetime.now(datetime.UTC)
        ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
        valid = x509.CertificateBuilder().not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
        ca = (
            valid.subject_name(name("tts-gateway test CA"))
            .issuer_name(name("tts-gateway test CA"))
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256())
        )
        alt_names = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
        cert = (
            valid.subject_name(name("localhost"))
            .issuer_name(ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        files = cls(directory / "ca.crt", directory / "server.crt", directory / "server.key")
        files.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
        files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        unencrypted = serialization.NoEncryption()
        files.key.write_bytes(
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, unencrypted)
        )
        return files

    def server_options(self, port: int) -> list[str]:
        """TLS only on ``port``, no client certificates asked, replication over TLS too."""
        return [
            *("--port", "0", "--tls-port", str(port), "--tls-auth-clients", "no", "--tls-replication", "yes"),
            *("--tls-cert-file", str(self.cert), "--tls-key-file", str(self.key), "--tls-ca-cert-file", str(self.ca)),
        ]


@contextmanager
def disconnected(client: redis.Redis) -> Iterator[redis.Redis]:
    """``client``, with its sockets closed at the end (``close()`` alone leaves them open in redis-py 8)."""
    try:
        yield client
    finally:
        client.connection_pool.disconnect()


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _running_server() -> Iterator[RedisServer]:
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is not installed (.ci/run installs Debian's redis-server)")
    server = RedisServer()
    server.start()
    yield server
    server.remove()


@pytest.fixture(scope="session", name="redis_server")
def redis_server_fixture() -> Iterator[RedisServer]:
    """A session-wide server; a test that stops it must start it again."""
    yield from _running_server()


@pytest.fixture(name="outage_redis")
def outage_redis_fixture() -> Iterator[RedisServer]:
    """A server of this test's own, to stop and restart without disturbing the session server."""
    yield from _running_server()


@pytest.fixture(name="redis_url")
def redis_url_fixture(redis_server: RedisServer) -> str:
    """The session server's URL, emptied for this test."""
    redis_server.flush()
    return redis_server.url
