"""Audio leaves as the engine speaks: SSE events, first byte before the synthesis is half done."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jsonschema
import pytest
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from tests.audio_decode import DURATION_TOLERANCE_S, decode_audio
from tests.e2e.conftest import SECONDS_PER_CHAR

if TYPE_CHECKING:
    import httpx

SCHEMA_FILE = Path(__file__).parents[1] / "data" / "openai-speech-schema.json"


@pytest.fixture(scope="module")
def openai_event_validator() -> Any:
    spec = json.loads(SCHEMA_FILE.read_text())
    registry = Registry().with_resource("urn:openai", Resource.from_contents(spec, default_specification=DRAFT202012))
    schema = {"$ref": "urn:openai#/components/schemas/CreateSpeechResponseStreamEvent"}
    return jsonschema.Draft202012Validator(schema, registry=registry)


async def read_sse(response: httpx.Response) -> list[dict[str, Any]]:
    events = []
    async for line in response.aiter_lines():
        if line.startswith("data: "):
            events.append(json.loads(line.removeprefix("data: ")))
    return events


@pytest.mark.parametrize("response_format", ["mp3", "opus", "aac", "flac", "wav", "pcm"])
async def test_sse_deltas_concatenate_into_the_audio(
    http: httpx.AsyncClient,
    openai_event_validator: Any,
    response_format: str,
) -> None:
    text = "Server-sent events carry base64 audio. " * 2
    body = {
        "model": "synthetic",
        "input": text,
        "voice": "sage",
        "response_format": response_format,
        "stream_format": "sse",
    }
    async with http.stream("POST", "/v1/audio/speech", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = await read_sse(response)
    # OpenAI's stream, every event of OpenAI's schema: the gateway's extension events come only when asked for
    # (tests/e2e/test_timestamps.py).
    for event in events:
        openai_event_validator.validate(event)
    *deltas, done = events
    # This engine speaks faster than any client reads, so the pool may hand on what piled up as one piece: at least
    # one delta (streaming as the engine speaks is shown with a paced engine in test_first_bytes_* below).
    assert deltas and all(e["type"] == "speech.audio.delta" for e in deltas)
    assert done["type"] == "speech.audio.done"
    audio = decode_audio(b"".join(base64.b64decode(e["audio"]) for e in deltas), response_format)
    expected = len(text.strip()) * SECONDS_PER_CHAR
    assert audio.duration == pytest.approx(expected, abs=DURATION_TOLERANCE_S)
    usage = done["usage"]
    assert usage["input_tokens"] == len(text.strip())
    assert usage["output_tokens"] == round(expected * 50)
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]


@pytest.mark.parametrize(
    ("response_format", "stream_format"),
    [
        ("mp3", "audio"),
        ("opus", "audio"),
        ("aac", "audio"),
        ("flac", "audio"),
        ("wav", "audio"),
        ("pcm", "audio"),
        ("mp3", "sse"),
    ],
)
async def test_first_bytes_arrive_before_half_the_synthesis(
    http: httpx.AsyncClient,
    response_format: str,
    stream_format: str,
) -> None:
    # The "slow" engine speaks in real time: 40 characters make 2 s of audio that take 2 s to synthesize.
    text = f"{response_format} {stream_format} ".ljust(40, "x")  # distinct per case: a repeat would be a cache hit
    body = {
        "model": "slow",
        "input": text,
        "voice": "nova",
        "response_format": response_format,
        "stream_format": stream_format,
    }
    started = time.monotonic()
    first_byte_at = None
    data = b""
    async with http.stream("POST", "/v1/audio/speech", json=body) as response:
        assert response.status_code == 200
        async for chunk in response.aiter_raw():
            first_byte_at = first_byte_at or time.monotonic() - started
            data += chunk
    total = time.monotonic() - started
    assert total >= 1.8  # the synthesis really took about 2 s
    assert first_byte_at is not None and first_byte_at < total / 2
    if stream_format == "audio":
        assert decode_audio(data, response_format).duration == pytest.approx(2.0, abs=DURATION_TOLERANCE_S)
