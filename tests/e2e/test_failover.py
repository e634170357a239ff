"""Retry before the first byte and circuit breakers, on a real gateway process with real worker processes.

Each engine of the gateway serves one kind of fault, so the tests do not disturb each other: a worker killed while
its request waits for the first audio, an engine that fails the requests that ask for it, a full engine, a stream
cut after its first audio, and a flaky engine whose breaker goes round its whole cycle. What a test asserts comes
from the responses (``x-engine``, ``x-retries``), ``/readyz`` and ``/metrics``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import time
from typing import TYPE_CHECKING, Any

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import connect

from harness.gateway_process import GatewayProcess
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator

SECONDS_PER_CHAR = 0.02
BROKEN_BREAKER_FAILURES = 4
FLAKY_OPEN_S = 2.0

CONFIG: dict[str, Any] = {
    "engines": {
        # One worker whose first audio comes 1.5 s after the request: time to kill it before the first byte.
        "solo": {
            "kind": "synthetic",
            "workers": 1,
            "options": {"seconds_per_char": SECONDS_PER_CHAR, "request_delay_ms": 1500},
        },
        # Real-time pacing: the stream is still running when its worker crashes after the first chunks.
        "streamer": {
            "kind": "synthetic",
            "workers": 1,
            "options": {"rtf": 1.0, "chunk_ms": 50, "seconds_per_char": 0.05},
        },
        # Fails the requests that ask for it (#fail, which espeak just speaks); its breaker stays open once open.
        "broken": {
            "kind": "synthetic",
            "workers": 1,
            "breaker": {"failures": BROKEN_BREAKER_FAILURES, "window_s": 60, "open_s": 600},
        },
        "espeak": {"kind": "espeak"},
        # Fails the requests that ask for it (#fail); its breaker opens after two and half-opens soon.
        "flaky": {
            "kind": "synthetic",
            "workers": 1,
            "breaker": {"failures": 2, "window_s": 60, "open_s": FLAKY_OPEN_S},
        },
        # One worker, no wait queue, real-time pacing: a second request finds it overloaded.
        "busy": {"kind": "synthetic", "workers": 1, "queue_size": 0, "options": {"rtf": 1.0, "seconds_per_char": 0.05}},
        "backup": {"kind": "synthetic", "workers": 1, "options": {"seconds_per_char": SECONDS_PER_CHAR}},
    },
    "aliases": {
        "failing": ["broken", "espeak"],
        "strict": ["busy", "backup"],  # the list form: overload is a 503
        "spilling": {"engines": ["busy", "backup"], "spill_on_overload": True},
    },
}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with GatewayProcess(CONFIG, tmp_path_factory.mktemp("failover")) as process:
        yield process


@pytest.fixture(scope="module")
def http(gateway: GatewayProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway.base_url, timeout=60) as client:
        yield client


def speech(model: str, text: str) -> dict[str, Any]:
    return {"model": model, "input": text, "voice": "alloy", "response_format": "pcm"}


def pcm_bytes(text: str, seconds_per_char: float = SECONDS_PER_CHAR) -> int:
    return round(len(text) * seconds_per_char * 24000) * 2


def metric(http: httpx.Client, name: str, **labels: str) -> float | None:
    """The value of one sample of ``/metrics``, or None when the gateway does not export it."""
    for family in text_string_to_metric_families(http.get("/metrics").text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return None


def test_a_worker_killed_before_the_first_byte_is_replaced_and_the_request_served(
    gateway: GatewayProcess,
    http: httpx.Client,
) -> None:
    import threading

    before = gateway.engine("solo")
    victim = before["pids"][0]
    responses: list[httpx.Response] = []
    text = "served after all"
    request = threading.Thread(
        target=lambda: responses.append(http.post("/v1/audio/speech", json=speech("solo", text)))
    )
    request.start()
    gateway.wait_engine("solo", active_jobs=1)  # its worker holds the job and has sent no audio yet
    os.kill(victim, signal.SIGKILL)
    request.join(30)
    (response,) = responses
    assert response.status_code == 200, response.text
    assert response.headers["x-retries"] == "1"
    assert response.headers["x-engine"] == "solo"
    assert len(response.content) == pcm_bytes(text)
    after = gateway.engine("solo")
    assert victim not in after["pids"]
    assert after["restarts"] == before["restarts"] + 1
    assert metric(http, "tts_engine_retries_total", engine="solo", reason="died") == 1


def test_an_engine_failing_before_its_first_audio_hands_the_alias_to_the_next_and_its_breaker_opens(
    gateway: GatewayProcess,
    http: httpx.Client,
) -> None:
    assert gateway.engine("broken")["breaker"] == "closed"  # each failed try counts against it
    for served in range(BROKEN_BREAKER_FAILURES // 2):  # two tries on `broken` per request
        response = http.post("/v1/audio/speech", json=speech("failing", f"spoken by espeak {served} #fail"))
        assert response.status_code == 200, response.text
        assert (response.headers["x-engine"], response.headers["x-retries"]) == ("espeak", "2")
        assert len(response.content) > 22050  # espeak's speech (22.05 kHz), not a tone
    assert metric(http, "tts_engine_retries_total", engine="broken", reason="failed") == BROKEN_BREAKER_FAILURES
    assert gateway.engine("broken")["breaker"] == "open"
    assert metric(http, "tts_engine_breaker_state", engine="broken") == 2
    # Open: the alias goes straight to the next engine, without a try on the broken one.
    started = time.monotonic()
    response = http.post("/v1/audio/speech", json=speech("failing", "straight to espeak #fail"))
    assert (response.headers["x-engine"], response.headers["x-retries"]) == ("espeak", "0")
    assert time.monotonic() - started < 2
    assert metric(http, "tts_engine_retries_total", engine="broken", reason="failed") == BROKEN_BREAKER_FAILURES
    assert gateway.engine("broken")["state"] == "ready"  # the workers are fine: only the breaker keeps it out


def test_overload_spills_to_the_next_engine_only_where_the_alias_allows_it(
    gateway: GatewayProcess,
    http: httpx.Client,
) -> None:
    with http.stream("POST", "/v1/audio/speech", json=speech("busy", "x" * 80)) as blocker:
        # Held, not a temporary: a dropped iterator is finalized at once, and closing it closes the connection.
        audio = blocker.iter_raw()
        next(audio)  # the one worker of `busy` is speaking now, and it has no wait queue
        refused = http.post("/v1/audio/speech", json=speech("strict", "refused while busy"))
        assert refused.status_code == 503
        assert refused.json()["error"]["code"] == "engine_overloaded"
        spilled = http.post("/v1/audio/speech", json=speech("spilling", "spilled while busy"))
        assert spilled.status_code == 200, spilled.text
        assert (spilled.headers["x-engine"], spilled.headers["x-retries"]) == ("backup", "1")
    assert metric(http, "tts_engine_retries_total", engine="busy", reason="overloaded") == 1


def test_a_crash_after_the_first_byte_is_not_retried(gateway: GatewayProcess, http: httpx.Client) -> None:
    restarts = gateway.engine("streamer")["restarts"]
    received = 0
    crashing = speech("streamer", "x" * 40 + " #crash-after=3")
    # The response ends without its final chunk.
    with pytest.raises(httpx.RemoteProtocolError), http.stream("POST", "/v1/audio/speech", json=crashing) as cut:
        assert cut.headers["x-retries"] == "0"
        for chunk in cut.iter_raw():
            received += len(chunk)
    assert 0 < received < pcm_bytes("x" * 40, 0.05)  # the first chunks, and nothing twice
    after = gateway.wait_engine("streamer", ready_workers=1, active_jobs=0)
    assert after["restarts"] == restarts + 1
    assert metric(http, "tts_engine_retries_total", engine="streamer", reason="died") is None


def test_a_breaker_opens_fails_fast_half_opens_and_closes(gateway: GatewayProcess, http: httpx.Client) -> None:
    client = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key="anything", max_retries=0)
    with pytest.raises(openai.InternalServerError) as failed:
        client.audio.speech.create(model="flaky", voice="alloy", input="fails twice #fail")
    assert failed.value.status_code == 503
    assert gateway.engine("flaky")["breaker"] == "open"
    assert metric(http, "tts_engine_breaker_state", engine="flaky") == 2
    started = time.monotonic()
    with pytest.raises(openai.InternalServerError, match="circuit open"):
        client.audio.speech.create(model="flaky", voice="alloy", input="refused at once")
    assert time.monotonic() - started < 1
    wait_until(lambda: gateway.engine("flaky")["breaker"] == "half_open", timeout_s=FLAKY_OPEN_S + 5)
    assert metric(http, "tts_engine_breaker_state", engine="flaky") == 1
    response = client.audio.speech.with_raw_response.create(
        model="flaky", voice="alloy", input="works again", response_format="pcm"
    )
    assert response.headers["x-engine"] == "flaky"
    assert len(response.content) == pcm_bytes("works again", 0.05)
    assert gateway.engine("flaky")["breaker"] == "closed"
    assert metric(http, "tts_engine_breaker_state", engine="flaky") == 0


async def test_a_realtime_segment_whose_worker_dies_before_its_first_audio_is_spoken_all_the_same(
    gateway: GatewayProcess,
) -> None:
    victim = gateway.engine("solo")["pids"][0]
    text = "A segment spoken after all."
    url = gateway.base_url.replace("http://", "ws://") + "/v1/audio/speech/stream"
    async with connect(url) as socket:
        await socket.send(json.dumps({"type": "session.update", "session": {"model": "solo"}}))
        await socket.send(json.dumps({"type": "input.append", "text": text}))
        await socket.send(json.dumps({"type": "input.flush"}))
        await asyncio.to_thread(gateway.wait_engine, "solo", active_jobs=1)
        os.kill(victim, signal.SIGKILL)
        audio, events = b"", list[dict[str, Any]]()
        async with asyncio.timeout(30):
            while not events or events[-1]["type"] != "audio.done":
                events.append(json.loads(await socket.recv()))
                if events[-1]["type"] == "audio.delta":
                    audio += base64.b64decode(events[-1]["audio"])
    assert [event for event in events if event["type"] == "error"] == []
    assert events[-1]["status"] == "completed"
    assert len(audio) == pcm_bytes(text)  # the session's default format is pcm
