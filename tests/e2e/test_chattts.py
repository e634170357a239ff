"""ChatTTS end to end: a real gateway with the chattts engine on tiny random-weight assets, the real OpenAI SDK."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import signal
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import openai
import psutil
import pytest

from engines.chattts.loader import verify_directory
from engines.timing import word_spans
from gateway.speech.segments import split_text
from harness.gateway_process import CONSOLE_SCRIPT, GatewayProcess
from tests.audio_decode import DURATION_TOLERANCE_S, SPEECH_FORMATS, SpeechFormat, decode_audio
from tests.chattts_assets import TEST_TOKENS, chattts_engine_options

if TYPE_CHECKING:
    from collections.abc import Iterator

SEGMENT_S = (TEST_TOKENS * 512 - 256) / 24000  # every sentence is exactly TEST_TOKENS tokens here


def config() -> dict[str, Any]:
    # A batch window of 300 ms, not 10: four requests sent together reach the worker spread out when the machine is
    # busy (the suite runs in two processes), and the batching test needs them in one batch.
    chattts = {"kind": "chattts", "workers": 1, "health_interval_s": 3.0, "start_timeout_s": 120,
               "options": chattts_engine_options(max_batch=4, batch_window_ms=300)}  # fmt: skip
    return {
        "engines": {"chattts": chattts, "espeak": {"kind": "espeak"}},
        "aliases": {"tts-1": ["chattts", "espeak"], "tts-1-hd": ["chattts", "espeak"]},
    }


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    process = GatewayProcess(config(), tmp_path_factory.mktemp("chattts-gateway")).start(timeout_s=90)
    yield process
    process.stop()


@pytest.fixture(scope="module")
def client(gateway: GatewayProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key="anything", max_retries=0) as sdk:
        yield sdk


def test_chattts_is_ready_with_generated_weights(gateway: GatewayProcess) -> None:
    state = gateway.engine("chattts")
    assert state["state"] == "ready", state
    assert state["ready_workers"] == 1
    # Which text normalizer speaks numbers and dates: the built-in rules unless the `normalize` extra is installed.
    assert state["details"]["text_normalizer"] in {"builtin", "nemo+wetext"}
    assert state["details"]["weights"].startswith("generated random weights")


def test_torch_is_loaded_in_the_worker_and_never_in_the_server_process(gateway: GatewayProcess) -> None:
    # ChatTTS's per-token Python loop must not share the server's GIL: engines/registry.py keeps torch in the workers.
    assert gateway.process is not None
    state = gateway.engine("chattts")
    assert state["state"] == "ready", state
    worker = state["pids"][0]
    assert "libtorch" in Path(f"/proc/{worker}/maps").read_text(), "the check must see torch where it is"
    assert "libtorch" not in Path(f"/proc/{gateway.process.pid}/maps").read_text()


@pytest.mark.parametrize("response_format", SPEECH_FORMATS)
def test_every_format_through_the_alias(client: openai.OpenAI, response_format: SpeechFormat) -> None:
    with client.audio.speech.with_streaming_response.create(
        model="tts-1",
        voice="nova",
        input="Hello from ChatTTS. Two sentences.",
        response_format=response_format,
    ) as response:
        assert response.headers["x-engine"] == "chattts"
        data = response.read()
    audio = decode_audio(data, response_format)
    assert audio.channels == 1
    assert audio.duration == pytest.approx(2 * SEGMENT_S, abs=DURATION_TOLERANCE_S)
    assert audio.rms > 0.005


async def test_concurrent_requests_each_get_their_own_length(gateway: GatewayProcess) -> None:
    texts = ["One.", "One. Two. Three.", "One. Two.", "One. Two. Three. Four."]
    async with openai.AsyncOpenAI(base_url=f"{gateway.base_url}/v1", api_key="x", max_retries=0) as client:
        responses = await asyncio.gather(
            *(client.audio.speech.create(model="chattts", voice="alloy", input=t, response_format="pcm") for t in texts)
        )
    for text, response in zip(texts, responses, strict=True):
        assert len(response.content) == 2 * round(text.count(".") * SEGMENT_S * 24000)
    metrics = httpx.get(f"{gateway.base_url}/metrics").text
    batched = [line for line in metrics.splitlines() if line.startswith('tts_engine_batches_total{engine="chattts"')]
    assert any(not line.split('size="')[1].startswith('1"') for line in batched), batched  # some ran together


def test_timestamps_fall_within_their_segments_and_stay_after_a_cache_hit(gateway: GatewayProcess) -> None:
    # Over 300 characters: two of the gateway's segments (speech.max_segment_chars), each of whole sentences, and every
    # sentence exactly TEST_TOKENS tokens of ChatTTS. The words are estimated, and exact where segments meet.
    text = " ".join(f"Sentence number {n} is here." for n in range(1, 13))
    segments = split_text(text, 300)
    assert len(segments) == 2
    body = {
        "model": "chattts",
        "input": text,
        "voice": "nova",
        "response_format": "pcm",
        "stream_format": "sse",
        "word_timestamps": True,
    }
    answers = []
    for _ in range(2):  # the second from the cache, which keeps the words
        with httpx.stream("POST", f"{gateway.base_url}/v1/audio/speech", json=body, timeout=120) as response:
            assert response.status_code == 200
            events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
        answers.append((response.headers["x-cache"], events))
    assert [cache for cache, _ in answers] == ["miss", "hit"]
    events = answers[0][1]
    pcm = b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta")
    stamps = [e for e in events if e["type"] == "speech.audio.timestamps"]
    hit = [e for e in answers[1][1] if e["type"] == "speech.audio.timestamps"]
    assert [w for e in hit for w in e["words"]] == [w for e in stamps for w in e["words"]]
    assert {e["kind"] for e in stamps} == {"estimated"}
    assert "".join(c for e in stamps for c in e["alignment"]["characters"]) == text
    words = [w for e in stamps for w in e["words"]]
    assert [(w["char_start"], w["char_end"]) for w in words] == word_spans(text)
    first_s = segments[0].count(".") * SEGMENT_S  # where the second segment's audio starts
    total_s = len(pcm) / 2 / 24000
    assert total_s == pytest.approx(text.count(".") * SEGMENT_S, abs=0.001)
    cut = text.index(segments[1])
    for word in words:
        low, high = (0.0, first_s) if word["char_start"] < cut else (first_s, total_s)
        assert low - 0.001 <= word["start"] <= word["end"] <= high + 0.001, word
    second = next(w for w in words if w["char_start"] == cut)
    assert second["start"] == pytest.approx(first_s, abs=0.05)  # from the second segment's first loud frame


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGSTOP], ids=["killed", "hung"])
def test_a_dead_or_hung_worker_is_replaced(client: openai.OpenAI, gateway: GatewayProcess, how: int) -> None:
    before = gateway.wait_engine("chattts", ready_workers=1)
    victim = before["pids"][0]
    os.kill(victim, how)
    try:
        after = gateway.wait_engine("chattts", timeout_s=60, ready_workers=1, restarts=before["restarts"] + 1)
    finally:
        if how == signal.SIGSTOP:
            with contextlib.suppress(ProcessLookupError):  # the pool killed it already; make sure
                os.kill(victim, signal.SIGKILL)
    assert victim not in after["pids"]
    # Forked warm from the template that imported torch (engines/template.py), not started by the server itself.
    template = psutil.Process(after["pids"][0]).ppid()
    assert gateway.process is not None and template != gateway.process.pid
    assert "libtorch" in Path(f"/proc/{template}/maps").read_text()
    text = f"Back again after signal {int(how)}."  # not the other case's text: its reply is in the audio cache
    response = client.audio.speech.with_raw_response.create(model="tts-1", voice="echo", input=text)
    assert response.headers["x-engine"] == "chattts"
    assert decode_audio(response.content, "mp3").duration == pytest.approx(SEGMENT_S, abs=DURATION_TOLERANCE_S)


def test_cli_generates_assets_that_verify(tmp_path: Path) -> None:
    target = tmp_path / "assets"
    subprocess.run([str(CONSOLE_SCRIPT), "assets", "generate", "--preset", "tiny", str(target)], check=True,
                   capture_output=True, timeout=120)  # fmt: skip
    assert verify_directory(target).generated
