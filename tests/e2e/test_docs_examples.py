"""Every example in README.md and docs/ (configuration, realtime, ElevenLabs, deployment), run exactly as written.

Each fenced block is preceded by a marker that says how it runs (a block without one fails the test, so no
example escapes):

- ``<!-- example: config FILE -->``: a YAML file, written as ``FILE`` in the document's folder and loaded by the
  gateway's settings (later blocks may use it);
- ``<!-- example: shell [creates FILE ...] -->``: bash, run to completion in that folder with the virtualenv first on
  ``PATH``, against the gateway the README's readers start with ``make serve`` (``chattts-gateway serve`` on port 8000)
  and a Redis on port 6379; each created file must be decodable audio (its suffix names the format);
- ``<!-- example: python [creates FILE ...] -->``: the virtualenv's Python, run in that folder (files as above);
- ``<!-- example: serve PORT -->``: bash whose last command serves; it must come up on ``PORT`` with every engine
  ready, and is stopped then;
- ``<!-- example: background PORT -->``: the same, but it keeps serving for the blocks after it (stopped when the
  document's test ends);
- ``<!-- example: skip (reason) -->``: not run, with the reason (the two commands of the README are the ones CI runs).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from gateway.settings import load_settings
from tests.audio_decode import decode_audio
from tests.redis_server import RedisServer

if TYPE_CHECKING:
    from collections.abc import Iterator

ROOT = Path(__file__).resolve().parents[2]
_BLOCK = re.compile(
    r"<!-- example: (?P<kind>\w+) ?(?P<args>[^>]*?) ?-->\n```(?P<lang>\w*)\n(?P<body>.*?)^```", re.MULTILINE | re.DOTALL
)
_FENCE = re.compile(r"^```\w*\n", re.MULTILINE)
_SUFFIX_FORMATS = {".mp3": "mp3", ".ogg": "opus", ".aac": "aac", ".flac": "flac", ".wav": "wav", ".pcm": "pcm"}
_RUN_TIMEOUT_S = 120
# An example that names the ChatTTS engine (not merely the `chattts-gateway` command) expects it ready.
_NAMES_CHATTTS = re.compile(r"chattts(?!-gateway)")


@dataclass(frozen=True)
class Example:
    document: str
    kind: str
    args: str
    body: str


def examples(document: str) -> list[Example]:
    text = (ROOT / document).read_text()
    found = [Example(document, m["kind"], m["args"].strip(), m["body"]) for m in _BLOCK.finditer(text)]
    opening_fences = len(_FENCE.findall(text)) - text.count("\n```\n")  # every block opens once and closes once
    assert len(found) == opening_fences, f"{document}: every code block needs an <!-- example: ... --> marker"
    return found


def venv_env(**extra: str) -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", **extra}


def wait_ready(port: int, process: subprocess.Popen[bytes], timeout_s: float = 90) -> dict[str, object]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, f"the server exited with {process.returncode}"
        try:
            body: dict[str, object] = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).json()
        except httpx.HTTPError:
            time.sleep(0.1)
            continue
        engines = body["engines"]
        assert isinstance(engines, dict)
        if all(engine["state"] != "starting" for engine in engines.values()):
            return body
        time.sleep(0.1)
    raise AssertionError(f"nothing ready on port {port} after {timeout_s} s")


@pytest.fixture
def served() -> Iterator[list[subprocess.Popen[bytes]]]:
    processes: list[subprocess.Popen[bytes]] = []
    yield processes
    for process in processes:
        stop(process)


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)


def serve(command: str, cwd: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as sink:
        return subprocess.Popen(
            ["bash", "-c", command],
            cwd=cwd,
            env=venv_env(),
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def run_example(example: Example, cwd: Path, served: list[subprocess.Popen[bytes]]) -> None:
    where = f"{example.document}: {example.body[:80]!r}"
    if example.kind == "config":
        (cwd / example.args).write_text(example.body)
        load_settings(cwd / example.args)  # raises with the setting's name when the example is wrong
    elif example.kind in {"shell", "python"}:
        command = ["bash", "-c", example.body] if example.kind == "shell" else [sys.executable, "-c", example.body]
        result = subprocess.run(
            command, cwd=cwd, env=venv_env(), capture_output=True, text=True, timeout=_RUN_TIMEOUT_S, check=False
        )
        assert result.returncode == 0, f"{where} exited with {result.returncode}:\n{result.stdout}\n{result.stderr}"
        for name in example.args.removeprefix("creates").split():
            audio = decode_audio((cwd / name).read_bytes(), _SUFFIX_FORMATS[Path(name).suffix])
            assert audio.duration > 0.3, f"{where}: {name} holds no speech"
    elif example.kind in {"serve", "background"}:
        port = int(example.args)
        process = serve(example.body, cwd, cwd / f"serve-{port}.log")
        served.append(process)
        body = wait_ready(port, process)
        engines = body["engines"]
        assert isinstance(engines, dict)
        not_ready = {
            name: e
            for name, e in engines.items()
            if (e["state"] != "ready" and name != "chattts")
            or (name == "chattts" and _NAMES_CHATTTS.search(example.body) and e["state"] != "ready")
        }
        assert not not_ready, f"{where}: engines not ready: {not_ready}"
        if example.kind == "serve":
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(30)
    else:
        assert example.kind == "skip" and example.args.startswith("("), f"{where}: unknown marker {example.kind}"


def test_the_configuration_examples_run(tmp_path: Path, served: list[subprocess.Popen[bytes]]) -> None:
    for example in examples("docs/configuration.md"):
        run_example(example, tmp_path, served)


def test_the_deployment_examples_run(tmp_path: Path, served: list[subprocess.Popen[bytes]]) -> None:
    # Docker and Kubernetes blocks are marked skip with their reason; the two-tier set-up by hand runs.
    for example in examples("docs/deployment.md"):
        run_example(example, tmp_path, served)


def test_the_custom_voice_examples_run(tmp_path: Path, served: list[subprocess.Popen[bytes]]) -> None:
    # The document serves its own gateway (ChatTTS on the tiny random-weight assets) in the background.
    for example in examples("docs/voices.md"):
        run_example(example, tmp_path, served)


def test_the_usage_api_examples_run(tmp_path: Path, served: list[subprocess.Popen[bytes]]) -> None:
    # The document serves its own gateway (espeak, with an admin token) in the background.
    for example in examples("docs/usage-api.md"):
        run_example(example, tmp_path, served)


@pytest.fixture(scope="module")
def make_serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """What a reader has after the README's first command: `make serve`, i.e. `chattts-gateway serve` on port 8000,
    and for the tenants example a Redis at its default address. One for the documents below, which run one after the
    other against it: each names its own files, tenants and keys (it starts last in this module, after the tests
    above that serve on port 8000 themselves)."""
    home = tmp_path_factory.mktemp("make-serve")
    redis = RedisServer(port=6379)
    redis.start()
    gateway = serve("chattts-gateway serve", home, home / "make-serve.log")
    try:
        wait_ready(8000, gateway)
        yield
    finally:
        stop(gateway)
        redis.remove()


@pytest.mark.parametrize(
    "document",
    ["README.md", "docs/realtime.md", "docs/elevenlabs.md", "docs/ssml.md", "docs/pronunciation.md", "docs/jobs.md"],
)
@pytest.mark.usefixtures("make_serve")
def test_the_examples_against_a_served_gateway_run(
    document: str,
    tmp_path: Path,
    served: list[subprocess.Popen[bytes]],
) -> None:
    for example in examples(document):
        run_example(example, tmp_path, served)
