"""Clients beyond the Python SDK against a real gateway: the official Node SDK, the README's curl and
``chattts-gateway say``.

Every file a client writes is decoded back with PyAV. The Node SDK comes from ``tests/node`` (``make setup`` runs
``npm ci --prefix tests/node``); when it is missing these tests fail rather than skip, so CI cannot pass without it.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from engines.synthetic import voice_frequency
from harness.gateway_process import CONSOLE_SCRIPT, GatewayProcess
from tests.audio_decode import DURATION_TOLERANCE_S, decode_audio, dominant_frequency
from tests.node_client import NODE_DIR, node_with_sdk

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.audio_decode import DecodedAudio

ROOT = Path(__file__).resolve().parents[2]
README_ORIGIN = "http://127.0.0.1:8000"
SECONDS_PER_CHAR = 0.02
CLIENT_TIMEOUT_S = 30

GATEWAY_CONFIG: dict[str, Any] = {
    "engines": {
        "synthetic": {"kind": "synthetic", "options": {"seconds_per_char": SECONDS_PER_CHAR}},
        "espeak": {"kind": "espeak"},
    },
    "aliases": {"tts-1": ["espeak"]},
}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with GatewayProcess(GATEWAY_CONFIG, tmp_path_factory.mktemp("clients-gateway")) as process:
        yield process


def assert_speech(path: Path, response_format: str) -> DecodedAudio:
    """The file holds real speech: longer than half a second and not silent."""
    assert path.is_file(), f"{path} was not written"
    audio = decode_audio(path.read_bytes(), response_format)
    assert audio.duration > 0.5
    assert audio.rms > 0.01
    return audio


# --- the official OpenAI Node SDK ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def node_sdk() -> str:
    return node_with_sdk()


def speak_with_node(
    node: str, gateway: GatewayProcess, *, model: str, voice: str, response_format: str, output: Path, text: str
) -> dict[str, str]:
    result = subprocess.run(
        [node, str(NODE_DIR / "speak.mjs"), f"{gateway.base_url}/v1", model, voice, response_format, str(output), text],
        capture_output=True,
        text=True,
        timeout=CLIENT_TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 0, f"node exited with {result.returncode}:\n{result.stderr}"
    headers: dict[str, str] = json.loads(result.stdout)
    return headers


@pytest.mark.parametrize(("response_format", "content_type"), [("mp3", "audio/mpeg"), ("wav", "audio/wav")])
def test_node_sdk_speaks_through_an_alias(
    node_sdk: str, gateway: GatewayProcess, tmp_path: Path, response_format: str, content_type: str
) -> None:
    output = tmp_path / f"node.{response_format}"
    headers = speak_with_node(
        node_sdk,
        gateway,
        model="tts-1",
        voice="nova",
        response_format=response_format,
        output=output,
        text="Hello from the OpenAI Node SDK, through the speech gateway.",
    )
    assert headers == {"engine": "espeak", "type": content_type}
    assert_speech(output, response_format)


def test_node_sdk_sends_voice_and_input_unchanged(node_sdk: str, gateway: GatewayProcess, tmp_path: Path) -> None:
    text = "The synthetic engine makes one tone per voice, for this long."
    output = tmp_path / "node.ogg"
    speak_with_node(
        node_sdk, gateway, model="synthetic", voice="shimmer", response_format="opus", output=output, text=text
    )
    audio = assert_speech(output, "opus")
    assert audio.codec == "opus"
    assert audio.duration == pytest.approx(len(text) * SECONDS_PER_CHAR, abs=DURATION_TOLERANCE_S)
    assert dominant_frequency(audio) == pytest.approx(voice_frequency("shimmer"), abs=5)


def test_node_sdk_surfaces_openai_errors(node_sdk: str, gateway: GatewayProcess, tmp_path: Path) -> None:
    result = subprocess.run(
        [
            node_sdk,
            str(NODE_DIR / "speak.mjs"),
            f"{gateway.base_url}/v1",
            "tts-9000",
            "nova",
            "mp3",
            str(tmp_path / "never.mp3"),
            "Hello.",
        ],
        capture_output=True,
        text=True,
        timeout=CLIENT_TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 1
    assert "404" in result.stderr
    assert "The model `tts-9000` does not exist" in result.stderr


# --- the README's curl example, exactly as written ---------------------------------------------------------------


def readme_curl_command() -> str:
    readme = (ROOT / "README.md").read_text()
    section = re.search(r"^## Use it\n(.*?)(?=^## )", readme, re.MULTILINE | re.DOTALL)
    assert section is not None, "README.md has no '## Use it' section"
    blocks = re.findall(r"^```bash\n(.*?)^```", section.group(1), re.MULTILINE | re.DOTALL)
    curls = [block for block in blocks if block.startswith("curl ")]
    assert len(curls) == 1, f"expected one ```bash block starting with curl in 'Use it', found {len(curls)}"
    command: str = curls[0]
    assert command.count(README_ORIGIN) == 1, f"the README's curl example should call {README_ORIGIN}"
    return command


def test_readme_curl_example_runs_as_written(gateway: GatewayProcess, tmp_path: Path) -> None:
    command = readme_curl_command().replace(README_ORIGIN, gateway.base_url)
    result = subprocess.run(
        ["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S, check=False
    )
    assert result.returncode == 0, f"curl exited with {result.returncode}:\n{result.stderr}"
    audio = assert_speech(tmp_path / "hello.mp3", "mp3")
    assert audio.codec == "mp3float"


# --- chattts-gateway say --------------------------------------------------------------------------------------------


def say(
    gateway: GatewayProcess, *args: str, cwd: Path, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CONSOLE_SCRIPT), "say", *args, "--base-url", f"{gateway.base_url}/v1"],
        input=stdin,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=CLIENT_TIMEOUT_S,
        check=False,
    )


def test_say_writes_speech_to_a_file(gateway: GatewayProcess, tmp_path: Path) -> None:
    result = say(
        gateway,
        "Hello from the terminal, through the speech gateway.",
        "--voice",
        "nova",
        "--format",
        "mp3",
        "-o",
        "out.mp3",
        "--model",
        "tts-1",
        "--speed",
        "1.0",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # no progress line when stderr is not a terminal
    assert_speech(tmp_path / "out.mp3", "mp3")


def test_say_reads_standard_input_and_takes_the_format_from_the_file_name(
    gateway: GatewayProcess, tmp_path: Path
) -> None:
    text = "Every word of this came in on standard input, all of it.\n"
    result = say(gateway, "-", "--model", "synthetic", "--voice", "echo", "-o", "stdin.wav", cwd=tmp_path, stdin=text)
    assert result.returncode == 0, result.stderr
    audio = assert_speech(tmp_path / "stdin.wav", "wav")
    assert audio.codec == "pcm_s16le"
    assert audio.duration == pytest.approx(len(text.strip()) * SECONDS_PER_CHAR, abs=DURATION_TOLERANCE_S)
    assert dominant_frequency(audio) == pytest.approx(voice_frequency("echo"), abs=5)


def test_say_reports_the_openai_error_and_fails(gateway: GatewayProcess, tmp_path: Path) -> None:
    result = say(gateway, "Hello.", "--model", "tts-9000", "-o", "never.mp3", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr == (
        "chattts-gateway: 404 The model `tts-9000` does not exist or you do not have access to it.\n"
    )
    assert not (tmp_path / "never.mp3").exists()
