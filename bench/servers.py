"""Server processes for the benchmarks: the real gateway, the bare Litestar route, and the Flask baseline.

Every server binds 127.0.0.1 on a free port. ``pinned`` sets the CPU affinity that child processes inherit, so the
servers can be kept on one core and the load generator on the other.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from harness.gateway_process import GatewayProcess, free_port

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["ROOT", "GatewayProcess", "ServerProcess", "gateway", "pinned"]

ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def pinned(cpus: set[int] | None) -> Iterator[None]:
    """Runs the block (and the processes it starts) on ``cpus``; None: no change."""
    if cpus is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def gateway(config: dict[str, Any], workdir: Path, cpus: set[int] | None, timeout_s: float = 60.0) -> GatewayProcess:
    """A started ``chattts-gateway serve`` (uvicorn, uvloop, httptools, one process) with every engine settled within
    ``timeout_s``."""
    with pinned(cpus):
        return GatewayProcess(config, workdir).start(timeout_s)


class ServerProcess:
    """A server command on a free port (``{port}`` in the command), up when it answers HTTP."""

    def __init__(self, name: str, command: list[str], workdir: Path, env: dict[str, str]) -> None:
        self.name = name
        self.port = free_port()
        self.command = [part.format(port=self.port) for part in command]
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / f"{name}.log"
        self.env = {**os.environ, **env}
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self, cpus: set[int] | None, timeout_s: float = 30.0) -> ServerProcess:
        with pinned(cpus), self.log_path.open("wb") as log:
            self.process = subprocess.Popen(self.command, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}:\n{self.log_path.read_text()}")
            try:
                httpx.get(f"{self.base_url}/", timeout=1)
                return self
            except httpx.HTTPError:
                time.sleep(0.1)
        self.stop()
        raise TimeoutError(f"{self.name} did not answer within {timeout_s} s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


def bare_litestar(workdir: Path, body_file: Path, content_type: str) -> ServerProcess:
    """The bare route under the gateway's uvicorn settings (uvloop, httptools, no access log, one process)."""
    command = [sys.executable, "-m", "uvicorn", "bench.bare_app:app", "--host", "127.0.0.1", "--port", "{port}",
               "--loop", "uvloop", "--http", "httptools", "--no-access-log", "--log-level", "warning"]  # fmt: skip
    env = {"BENCH_BODY_FILE": str(body_file), "BENCH_CONTENT_TYPE": content_type}
    return ServerProcess("bare-litestar", command, workdir, env)


def flask_gunicorn(
    workdir: Path, body_file: Path, content_type: str, *, workers: int, delay_ms: float, threads: int = 1
) -> ServerProcess:
    """The Flask baseline with one global model lock under gunicorn: sync workers, or gthread when ``threads`` > 1."""
    worker_class = "sync" if threads == 1 else "gthread"
    command = [sys.executable, "-m", "gunicorn", "--bind", "127.0.0.1:{port}", "--workers", str(workers),
               "--worker-class", worker_class, "--threads", str(threads), "--log-level", "warning",
               "bench.flask_app:app"]  # fmt: skip
    env = {"BENCH_BODY_FILE": str(body_file), "BENCH_CONTENT_TYPE": content_type, "BENCH_DELAY_MS": str(delay_ms)}
    name = f"flask-gunicorn-{worker_class}"
    return ServerProcess(name, command, workdir, env)
