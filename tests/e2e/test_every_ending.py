"""Every ending of a streamed response releases what its request holds and records its usage, as a good ending does
(issue #47, CONVENTIONS 21): here the ending is an engine worker killed with SIGKILL mid-stream, on each streaming
route (OpenAI's audio and server-sent events, ElevenLabs' stream and stream with timestamps).

Each route has a tenant limited to one concurrent stream: a lease left held makes its next request a 429
``concurrency``, and an unrecorded usage leaves ``GET /v1/usage`` one request short. Against a real gateway process,
with in-memory limits and usage.
"""

from __future__ import annotations

import os
import signal
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from auth.keys import generate_api_key, hash_api_key
from harness.gateway_process import GatewayProcess

if TYPE_CHECKING:
    from collections.abc import Iterator

#: Real time, 20 ms chunks, 50 ms of audio a character: a 60-character text streams for 3 s.
STEADY = {"kind": "synthetic", "workers": 1, "options": {"rtf": 1.0, "chunk_ms": 20, "seconds_per_char": 0.05}}
LONG_TEXT = "a worker killed while this is spoken " + "x" * 30
SHORT_TEXT = "served after the kill"


def _openai(stream_format: str) -> tuple[str, dict[str, Any], dict[str, Any]]:
    return (
        "/v1/audio/speech",
        {},
        {"model": "steady", "voice": "alloy", "response_format": "pcm", "stream_format": stream_format},
    )


def _elevenlabs(suffix: str) -> tuple[str, dict[str, Any], dict[str, Any]]:
    return f"/v1/text-to-speech/alloy/{suffix}", {"output_format": "pcm_24000"}, {"model_id": "steady"}


#: Each route: its path, its query and its body without the text.
ROUTES = {
    "openai-audio": _openai("audio"),
    "openai-sse": _openai("sse"),
    "elevenlabs-stream": _elevenlabs("stream"),
    "elevenlabs-stream-with-timestamps": _elevenlabs("stream/with-timestamps"),
}
KEYS = {route: generate_api_key() for route in ROUTES}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    tenants = [
        {"name": route, "api_key_sha256": [hash_api_key(key)], "limits": {"concurrent_streams": 1}}
        for route, key in KEYS.items()
    ]
    config = {"auth": {"tenants": tenants}, "engines": {"steady": STEADY}, "aliases": {}}
    with GatewayProcess(config, tmp_path_factory.mktemp("every-ending")) as process:
        yield process


def _body(route: str, text: str) -> dict[str, Any]:
    body = dict(ROUTES[route][2])
    body["input" if route.startswith("openai") else "text"] = text
    return body


def _post(http: httpx.Client, route: str, text: str) -> httpx.Response:
    path, query, _ = ROUTES[route]
    return http.post(path, params=query, json=_body(route, text))


def _killed_mid_stream(http: httpx.Client, gateway: GatewayProcess, route: str) -> tuple[int, bool]:
    """Stream ``LONG_TEXT`` and SIGKILL the engine's worker after the first bytes; the bytes received and whether the
    response ended complete."""
    victim = gateway.wait_engine("steady", ready_workers=1, active_jobs=0)["pids"][0]
    path, query, _ = ROUTES[route]
    received = 0
    try:
        with http.stream("POST", path, params=query, json=_body(route, LONG_TEXT)) as response:
            assert response.status_code == 200, response.read()
            for chunk in response.iter_raw():
                if not received:
                    os.kill(victim, signal.SIGKILL)
                received += len(chunk)
    except httpx.RemoteProtocolError:  # the chunked response ended without its last chunk
        return received, False
    return received, True


@pytest.mark.parametrize("route", list(ROUTES))
def test_a_worker_killed_mid_stream_releases_the_lease_and_counts_the_usage(
    gateway: GatewayProcess, route: str
) -> None:
    """Must hold: the stream ends truncated; the tenant's next request (one concurrent stream allowed) is served,
    not refused 429; and the usage counts both requests with both texts' characters."""
    with httpx.Client(
        base_url=gateway.base_url, headers={"authorization": f"Bearer {KEYS[route]}"}, timeout=30
    ) as http:
        received, complete = _killed_mid_stream(http, gateway, route)
        after = _post(http, route, SHORT_TEXT)
        usage = http.get("/v1/usage").json()
    assert received > 0 and not complete
    assert after.status_code == 200, after.text
    assert (usage["requests"], usage["input_characters"]) == (2, len(LONG_TEXT) + len(SHORT_TEXT))
