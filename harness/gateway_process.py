"""A real ``chattts-gateway serve`` process for end-to-end tests."""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

from gateway.settings import BUILT_IN_ENGINES

if TYPE_CHECKING:
    from types import TracebackType

__all__ = ["GatewayProcess", "closed_port", "exact_engines", "free_port"]

CONSOLE_SCRIPT = Path(sys.executable).with_name("chattts-gateway")


#: What the polls of a starting gateway's /readyz go through. ``httpx.get`` builds a client, and with it an SSL
#: context, on every call: about 26 ms of CPU, against 1 ms for a request of a client built once, and a start polls
#: ten times a second (``wait_engine`` twenty) while the gateway and everything else on the machine compete for the
#: CPU. Thread-safe; keeps no connection open between requests, as ``httpx.get`` did not.
_HTTP = httpx.Client(limits=httpx.Limits(max_keepalive_connections=0))


def _get(url: str, **options: Any) -> httpx.Response:
    """GET through the shared client, or for ``https://`` through one made now: its SSL context reads the CA the
    environment names at the time (a TLS test sets ``SSL_CERT_FILE`` after this module built ``_HTTP``)."""
    return _HTTP.get(url, **options) if url.startswith("http://") else httpx.get(url, **options)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


_HELD_PORTS: list[socket.socket] = []


# Closed at exit rather than left to the interpreter's teardown, which reports each as an unclosed socket.
@atexit.register
def _close_held_ports() -> None:
    for sock in _HELD_PORTS:
        sock.close()


def closed_port() -> int:
    """A port where connections are refused for as long as this process lives: bound here and never listened on, so
    no other process (a server of another test worker) can take it, as it can a port :func:`free_port` found."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    _HELD_PORTS.append(sock)
    port: int = sock.getsockname()[1]
    return port


def exact_engines(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with the built-in engines it does not name removed: a test runs exactly the engines it lists
    (settings merge into the built-ins, which would otherwise start a ChatTTS worker in every test gateway)."""
    engines = config.get("engines")
    if engines is None:
        return config
    removed = {name: None for name in BUILT_IN_ENGINES if name not in engines}
    return {**config, "engines": {**engines, **removed}}


class GatewayProcess:
    """Starts the console script on a free port with a YAML config, waits until every engine has settled.

    The config runs exactly the engines it lists (:func:`exact_engines`) when it lists any.
    """

    def __init__(
        self,
        config: dict[str, Any],
        workdir: Path,
        env: dict[str, str] | None = None,
        *,
        niceness: int = 0,
        own_group: bool = False,
    ) -> None:
        """``niceness``: started under ``nice -n`` (its worker processes inherit it), as a process that must yield
        the CPU to the others on the machine. ``own_group``: started in a session of its own, leading a process
        group that holds it and its children only (as under a supervisor that signals the whole group)."""
        self.port = free_port()
        self.niceness = niceness
        self.own_group = own_group
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.config_path = workdir / "gateway.yaml"
        self.config_path.write_text(yaml.safe_dump(exact_engines(config)))
        self.log_path = workdir / "gateway.log"
        self.env = {**os.environ, **(env or {})}
        if os.environ.get("COVER_PROCESSES") != "1":  # see [tool.coverage.run] in pyproject.toml
            self.env.pop("COVERAGE_PROCESS_CONFIG", None)
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 60.0) -> GatewayProcess:
        command = [str(CONSOLE_SCRIPT), "serve", "--port", str(self.port), "--config", str(self.config_path)]
        if self.niceness:
            command = ["nice", "-n", str(self.niceness), *command]
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=self.own_group,
            )
        try:
            self._wait_settled(timeout_s)
        except BaseException:
            self.stop()  # a gateway that never settled must not outlive the test (``__exit__`` will not run)
            raise
        return self

    def _wait_settled(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"gateway exited with {self.process.returncode}:\n{self.log()}")
            try:
                engines = _get(f"{self.base_url}/readyz", timeout=2).json()["engines"]
                if all(engine["state"] != "starting" for engine in engines.values()):
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"gateway not settled after {timeout_s} s:\n{self.log()}")

    def readiness(self) -> dict[str, Any]:
        body: dict[str, Any] = _get(f"{self.base_url}/readyz", timeout=5).json()
        return body

    def engine(self, name: str) -> dict[str, Any]:
        state: dict[str, Any] = self.readiness()["engines"][name]
        return state

    def wait_engine(self, name: str, timeout_s: float = 15.0, **expected: Any) -> dict[str, Any]:
        """Wait until the engine's readiness fields equal ``expected``; returns its state."""
        deadline = time.monotonic() + timeout_s
        while True:
            state = self.engine(name)
            if all(state[key] == value for key, value in expected.items()):
                return state
            if time.monotonic() > deadline:
                raise AssertionError(f"engine {name} never reached {expected}: {state}")
            time.sleep(0.05)

    def refusals(self, headers: dict[str, str] | None = None) -> Counter[tuple[str, int, str]]:
        """``tts_requests_refused_total`` by (source, status, code); ``headers`` for an engine node's token."""
        text = _get(f"{self.base_url}/metrics", headers=headers, timeout=5).text
        refused: Counter[tuple[str, int, str]] = Counter()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "tts_requests_refused_total":
                    labels = sample.labels
                    refused[labels["source"], int(labels["status"]), labels["code"]] = int(sample.value)
        return refused

    def log(self) -> str:
        """What the process has logged so far. While it runs, whole lines only: a line read while it is being written
        (a JSON line cut in two) is read once it ends."""
        text = self.log_path.read_text(errors="replace")
        if self.process is not None and self.process.poll() is not None:
            return text  # it has ended: nothing more will come, an unfinished last line included
        return text[: text.rfind("\n") + 1]

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 20.0) -> int:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        return self.process.returncode

    def __enter__(self) -> GatewayProcess:
        return self.start()

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()
