"""A real ``redis-server`` for tests: started on a free port, stopped by its pid, restartable to simulate outages.

``tests/conftest.py`` loads this module as a plugin, so every test can ask for ``redis_server``, ``redis_url`` or
``outage_redis``. Tests that need Redis fail when no ``redis-server`` binary is installed: CI installs it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import redis

from harness.gateway_process import free_port

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["RedisServer", "outage_redis_fixture", "redis_server_fixture", "redis_url_fixture"]


class RedisServer:
    """One ``redis-server`` process without persistence, on a fixed port across restarts."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self._dir = Path(tempfile.mkdtemp(prefix="redis-test-"))
        self._pidfile = self._dir / "redis.pid"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        assert binary is not None
        subprocess.run(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "yes",
                "--pidfile",
                str(self._pidfile),
                "--dir",
                str(self._dir),
            ],
            check=True,
            capture_output=True,
        )
        client = redis.Redis(port=self.port, socket_connect_timeout=0.2)
        deadline = time.monotonic() + 5
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
        client.connection_pool.disconnect()  # close() alone leaves the socket open in redis-py 8

    def stop(self) -> None:
        """Kill the server (SIGKILL: an outage, not a clean shutdown) and wait until its port is closed."""
        pid = int(self._pidfile.read_text())
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while _port_open(self.port) and time.monotonic() < deadline:
            time.sleep(0.01)
        self._pidfile.unlink(missing_ok=True)

    def remove(self) -> None:
        if self._pidfile.exists():
            self.stop()
        shutil.rmtree(self._dir, ignore_errors=True)

    def flush(self) -> None:
        client = redis.Redis(port=self.port)
        client.flushall()
        client.connection_pool.disconnect()  # close() alone leaves the socket open in redis-py 8


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
