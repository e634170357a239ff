"""Speech jobs without Redis (the embedded default): the accepting process speaks them itself (not durable), its
audio comes back whole in each format the jobs take, a WAV file carries its true sizes once complete, and a cancel
stops the job's engine work."""

from __future__ import annotations

import asyncio
import struct
from typing import TYPE_CHECKING, Any

import pytest
from litestar.testing import AsyncTestClient

from gateway.speech.segments import split_text
from tests.audio_decode import decode_audio
from tests.inprocess import in_process_app

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

JOBS = "/v1/audio/speech/jobs"
SECONDS_PER_CHAR = 0.01
SEGMENT_CHARS = 100
TEXT = " ".join(f"Sentence number {i} says a little more." for i in range(30))


@pytest.fixture
async def client() -> AsyncIterator[AsyncTestClient[Any]]:
    config = {
        "engines": {
            "tones": {"kind": "synthetic", "workers": 1, "options": {"seconds_per_char": SECONDS_PER_CHAR}},
            "slow": {"kind": "synthetic", "workers": 1, "options": {"seconds_per_char": 0.05, "rtf": 1.0}},
        },
        "aliases": {"tts-1": ["tones"]},
        "jobs": {"segment_chars": SEGMENT_CHARS, "poll_s": 0.02},
    }
    async with AsyncTestClient(app=in_process_app(config)) as test_client:
        yield test_client


async def create(client: AsyncTestClient[Any], **body: Any) -> dict[str, Any]:
    fields = {"model": "tts-1", "voice": "alloy", "input": TEXT, "response_format": "wav", **body}
    response = await client.post(JOBS, json=fields)
    assert response.status_code == 202, response.text
    return dict(response.json())


@pytest.mark.parametrize("response_format", ["mp3", "aac", "wav", "pcm"])
async def test_a_job_comes_back_whole_in_each_format(client: AsyncTestClient[Any], response_format: str) -> None:
    job = await create(client, response_format=response_format)
    audio = await client.get(f"{JOBS}/{job['id']}/content")  # follows the job to its end
    assert audio.status_code == 200
    segments = split_text(TEXT, SEGMENT_CHARS)
    expected_s = sum(len(segment) for segment in segments) * SECONDS_PER_CHAR
    decoded = decode_audio(audio.content, response_format)
    # Each segment's MP3 or AAC stream brings its encoder's priming and padding (up to about 0.1 s).
    padding_s = 0.1 * len(segments) if response_format in {"mp3", "aac"} else 0.0
    assert expected_s - 0.01 <= decoded.duration <= expected_s + padding_s + 0.01
    done = (await client.get(f"{JOBS}/{job['id']}")).json()
    assert done["status"] == "completed"
    assert done["progress"]["audio_seconds"] == pytest.approx(expected_s, abs=0.01)


async def test_an_ssml_input_is_refused_not_read_out(client: AsyncTestClient[Any]) -> None:
    body = {"model": "tts-1", "voice": "alloy", "input": f"<speak>{TEXT}</speak>"}
    refused = await client.post(JOBS, json=body)
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "input"
    assert (await client.post(JOBS, json={**body, "input": f"a < b. {TEXT}"})).status_code == 202  # plain text


async def test_a_complete_wav_says_its_sizes(client: AsyncTestClient[Any]) -> None:
    job = await create(client)
    await client.get(f"{JOBS}/{job['id']}/content")
    whole = await client.get(f"{JOBS}/{job['id']}/content")
    riff, data = struct.unpack_from("<4xI", whole.content)[0], struct.unpack_from("<40xI", whole.content)[0]
    assert (riff, data) == (len(whole.content) - 8, len(whole.content) - 44)
    assert whole.headers["content-length"] == str(len(whole.content))
    head = await client.get(f"{JOBS}/{job['id']}/content", headers={"range": "bytes=-100"})
    assert (head.status_code, head.content) == (206, whole.content[-100:])


async def test_a_cancel_stops_the_job_and_its_audio_is_gone(client: AsyncTestClient[Any]) -> None:
    job = await create(client, model="slow")  # each 100-character segment: 5 s of engine work
    await asyncio.sleep(0.3)
    cancelled = await client.delete(f"{JOBS}/{job['id']}")
    assert cancelled.json()["status"] == "cancelled"
    quick = await client.post(
        "/v1/audio/speech", json={"model": "slow", "voice": "alloy", "input": "Hi.", "response_format": "pcm"}
    )
    assert quick.status_code == 200  # the worker was free: the job's segment stopped at once
    assert quick.elapsed.total_seconds() < 1.5
    assert (await client.get(f"{JOBS}/{job['id']}/content")).status_code == 409
    assert (await client.delete(f"{JOBS}/{job['id']}")).json()["deleted"] is True


async def test_a_job_counts_once_in_usage(client: AsyncTestClient[Any]) -> None:
    job = await create(client, response_format="pcm")
    await client.get(f"{JOBS}/{job['id']}/content")
    spoken_s = (await client.get(f"{JOBS}/{job['id']}")).json()["progress"]["audio_seconds"]
    usage: dict[str, Any] = {}
    for _ in range(100):  # the ledger writes in the background
        usage = (await client.get("/v1/usage")).json()
        if usage["requests"]:
            break
        await asyncio.sleep(0.02)
    # One request, with every character and all of the audio: not one per segment (15 were spoken).
    assert (usage["requests"], usage["input_characters"]) == (1, len(TEXT))
    assert usage["audio_seconds"] == pytest.approx(spoken_s, abs=0.01)
