"""Long inputs are scheduled segment by segment: real gateway processes, real worker processes, httpx as the client.

On a one-worker engine whose jobs take real time, tenant ``b`` keeps three long inputs streaming; tenant ``a``'s
short request gets its first byte within one of ``b``'s segments, where one job per request made it wait behind a
whole long input. A segmented request's audio is every segment's in order; a client that hangs up cancels the
segment in progress and no later one starts; a later segment that fails ends the stream after the audio before it.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np
import pytest

from auth.keys import generate_api_key, hash_api_key
from engines.base import CancelFlag, SynthesisRequest
from engines.synthetic import SyntheticEngine
from gateway.speech.segments import split_text
from harness.gateway_process import GatewayProcess

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterator

MAX_SEGMENT_CHARS = 100
PACED_SECONDS_PER_CHAR = 0.01  # a segment of two sentences (89 characters) takes 0.89 s, spoken at real time
SLOW_SECONDS_PER_CHAR = 0.02  # 1.78 s: long enough to tell a cancelled segment from one that ran out
TONES = {"seconds_per_char": 0.01}
#: How far past the end of the segment in progress a light tenant's first byte may come (a busy 2-core machine).
MARGIN_S = 1.0
KEYS = {name: generate_api_key() for name in ("a", "b", "c")}

CONFIG: dict[str, Any] = {
    "auth": {"tenants": [{"name": name, "api_key_sha256": [hash_api_key(key)]} for name, key in KEYS.items()]},
    "speech": {"max_segment_chars": MAX_SEGMENT_CHARS},
    "engines": {
        # One worker, as the usual GPU set-up: the fair queue alone decides who goes next.
        "paced": {
            "kind": "synthetic",
            "workers": 1,
            "queue_size": 8,
            "options": {"rtf": 1.0, "seconds_per_char": PACED_SECONDS_PER_CHAR},
        },
        "slow": {"kind": "synthetic", "workers": 1, "options": {"rtf": 1.0, "seconds_per_char": SLOW_SECONDS_PER_CHAR}},
        "tones": {"kind": "synthetic", "workers": 1, "options": TONES},
    },
    "aliases": {},
}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with GatewayProcess(CONFIG, tmp_path_factory.mktemp("long-inputs")) as process:
        yield process


@pytest.fixture
async def http(gateway: GatewayProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=gateway.base_url, timeout=30) as client:
        yield client


def long_text(sentences: int) -> str:
    """Sentences of 44 characters no other request has asked for (identical requests would share a synthesis)."""
    tag = uuid.uuid4().hex[:8]
    return " ".join(f"Sentence {n:03d} of stream {tag} speaks here." for n in range(sentences))


def speech(engine: str, text: str) -> dict[str, Any]:
    return {"model": engine, "input": text, "voice": "alloy", "response_format": "pcm"}


def bearer(who: str) -> dict[str, str]:
    return {"authorization": f"Bearer {KEYS[who]}"}


def tone(chars: int) -> bytes:
    """The PCM of one job of the ``tones`` engine for ``chars`` characters."""
    chunks = SyntheticEngine(TONES).synthesize(SynthesisRequest("x" * chars, "alloy"), CancelFlag())
    return b"".join(np.asarray(chunk, dtype="<i2").tobytes() for chunk in chunks)


async def engine_state(http: httpx.AsyncClient, engine: str) -> dict[str, Any]:
    state: dict[str, Any] = (await http.get("/readyz")).json()["engines"][engine]
    return state


async def wait_until(http: httpx.AsyncClient, engine: str, condition: Callable[[dict[str, Any]], bool]) -> float:
    """Poll the engine's state until ``condition`` holds; returns when it did (monotonic)."""
    deadline = time.monotonic() + 10
    while not condition(await engine_state(http, engine)):
        assert time.monotonic() < deadline, f"{engine}: condition not reached: {await engine_state(http, engine)}"
        await asyncio.sleep(0.02)
    return time.monotonic()


async def jobs_opened(http: httpx.AsyncClient, engine: str, tenant: str) -> float:
    """Engine jobs the tenant has asked for: each waits for a worker once (the queue-wait histogram's count)."""
    wanted = f'tts_engine_queue_wait_seconds_count{{engine="{engine}",tenant="{tenant}"}}'
    metrics = (await http.get("/metrics")).text
    return next((float(line.split()[-1]) for line in metrics.splitlines() if line.startswith(wanted)), 0.0)


async def stream_all(http: httpx.AsyncClient, who: str, body: dict[str, Any]) -> None:
    async with http.stream("POST", "/v1/audio/speech", json=body, headers=bearer(who)) as response:
        assert response.status_code == 200
        async for _ in response.aiter_raw():
            pass


async def first_byte_after(http: httpx.AsyncClient, who: str, body: dict[str, Any]) -> float:
    """Seconds from sending the request to its first audio byte."""
    asked = time.monotonic()
    async with http.stream("POST", "/v1/audio/speech", json=body, headers=bearer(who)) as response:
        assert response.status_code == 200
        await anext(response.aiter_raw())
        return time.monotonic() - asked


# ------------------------------------------------------------------------------------------------------------ tests
async def test_a_light_tenant_waits_one_segment_not_a_long_input(http: httpx.AsyncClient) -> None:
    long_input = long_text(91)  # 4,094 characters (the API's most is 4,096): 41 s of speech, segments of 0.89 s
    segment_s = max(map(len, split_text(long_input, MAX_SEGMENT_CHARS))) * PACED_SECONDS_PER_CHAR
    floods = [asyncio.create_task(stream_all(http, "b", speech("paced", long_text(91)))) for _ in range(3)]
    try:
        await wait_until(http, "paced", lambda state: state["active_jobs"] == 1 and state["queued"] == 2)
        bound = segment_s + MARGIN_S
        try:  # given up on well before a long input's 41 s: with one job per request, a waits that long
            waited = await asyncio.wait_for(first_byte_after(http, "a", speech("paced", "A short question.")), 5)
        except TimeoutError:
            pytest.fail("a had no first byte within 5 s: it waited behind the whole of one of b's long inputs")
        assert waited < bound, f"a's first byte after {waited:.2f} s, more than one of b's segments ({bound:.2f} s)"
        assert not any(flood.done() for flood in floods)  # b's inputs were still streaming meanwhile
    finally:
        for flood in floods:
            flood.cancel()
        await asyncio.gather(*floods, return_exceptions=True)
    await wait_until(http, "paced", lambda state: state["active_jobs"] == 0 and state["queued"] == 0)


async def test_a_segmented_request_is_every_segments_audio_in_order(http: httpx.AsyncClient) -> None:
    # Segments of different lengths: the tone restarts with each job, so the order shows in the bytes.
    text = f"{uuid.uuid4().hex}. " + long_text(5) + " The last one is short."
    segments = split_text(text, MAX_SEGMENT_CHARS)
    assert len(segments) == 4
    response = await http.post("/v1/audio/speech", json=speech("tones", text), headers=bearer("c"))
    assert response.status_code == 200
    assert response.content == b"".join(tone(len(segment)) for segment in segments)
    assert len(response.content) == round((len(text) - 3) * TONES["seconds_per_char"] * 24000) * 2  # but 3 cuts


async def test_a_client_gone_mid_stream_cancels_the_segment_in_progress_and_no_more_start(
    http: httpx.AsyncClient,
) -> None:
    text = long_text(8)  # four segments of 1.78 s
    first_segment = round(len(split_text(text, MAX_SEGMENT_CHARS)[0]) * SLOW_SECONDS_PER_CHAR * 24000) * 2
    opened = await jobs_opened(http, "slow", "c")
    received = 0
    async with http.stream("POST", "/v1/audio/speech", json=speech("slow", text), headers=bearer("c")) as response:
        async for chunk in response.aiter_raw():
            received += len(chunk)
            if received > first_segment:  # the second segment is being spoken
                break
    hung_up = time.monotonic()
    freed = await wait_until(http, "slow", lambda state: state["active_jobs"] == 0 and state["busy_workers"] == 0)
    assert freed - hung_up < 1.0  # the segment would have run for about 1.7 s more
    await asyncio.sleep(SLOW_SECONDS_PER_CHAR * MAX_SEGMENT_CHARS / 2)  # a third segment would be running by now
    assert (await engine_state(http, "slow"))["active_jobs"] == 0
    assert await jobs_opened(http, "slow", "c") == opened + 2


async def test_a_later_segment_that_fails_ends_the_stream_after_the_audio_before_it(http: httpx.AsyncClient) -> None:
    text = f"{uuid.uuid4().hex} " + long_text(2) + " Then this one fails #fail. " + long_text(2)
    segments = split_text(text, MAX_SEGMENT_CHARS)
    assert len(segments) == 3 and "#fail" in segments[1]
    received = b""
    with pytest.raises(httpx.RemoteProtocolError):  # the body ends short of what chunked encoding promised
        async with http.stream("POST", "/v1/audio/speech", json=speech("tones", text), headers=bearer("c")) as reply:
            assert reply.status_code == 200
            assert reply.headers["x-retries"] == "0"
            async for chunk in reply.aiter_raw():
                received += chunk
    assert received == tone(len(segments[0]))  # neither retried nor continued
    assert (await http.post("/v1/audio/speech", json=speech("tones", "Still here."), headers=bearer("c"))).is_success
