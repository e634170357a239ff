"""Tenants share the job runners: after one tenant's flood of long jobs, another tenant's short job is spoken within
a segment or two, not after the flood (it was first come, first served: the bystander's one sentence waited hours
behind a quota-sized flood on ChatTTS). On both stores: this process's own jobs, and the SAQ queue on Redis."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import pytest
from litestar.testing import AsyncTestClient

from auth.keys import generate_api_key, hash_api_key
from tests.inprocess import in_process_app

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

JOBS = "/v1/audio/speech/jobs"
FLOODER, BYSTANDER = generate_api_key(), generate_api_key()
SEGMENT_CHARS = 100
SEGMENT_S = 0.1  # engine time of one 100-character segment: 1 s of audio at rtf 0.1


def book(number: int) -> str:
    """30 segments, unlike any other book's (the audio cache would speak a second copy at once)."""
    return " ".join(f"Line {i:03d} of book {number:02d}, spoken in the background." for i in range(60))


def tenant(name: str, key: str) -> dict[str, Any]:
    return {"name": name, "api_key_sha256": [hash_api_key(key)]}


@pytest.fixture(params=["memory", "redis"])
async def client(request: pytest.FixtureRequest) -> AsyncIterator[AsyncTestClient[Any]]:
    config: dict[str, Any] = {
        "auth": {"tenants": [tenant("flooder", FLOODER), tenant("bystander", BYSTANDER)]},
        "engines": {
            "tones": {"kind": "synthetic", "workers": 1, "options": {"seconds_per_char": 0.01, "rtf": 0.1}},
        },
        "aliases": {"tts-1": ["tones"]},
        "jobs": {"segment_chars": SEGMENT_CHARS, "poll_s": 0.05, "concurrency": 1},
    }
    if request.param == "redis":
        config["redis_url"] = request.getfixturevalue("redis_url")
    async with AsyncTestClient(app=in_process_app(config)) as test_client:
        yield test_client


async def create(client: AsyncTestClient[Any], key: str, text: str) -> str:
    body = {"model": "tts-1", "voice": "alloy", "input": text, "response_format": "pcm"}
    response = await client.post(JOBS, json=body, headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


async def job(client: AsyncTestClient[Any], key: str, job_id: str) -> dict[str, Any]:
    return dict((await client.get(f"{JOBS}/{job_id}", headers={"Authorization": f"Bearer {key}"})).json())


async def test_another_tenants_short_job_is_spoken_within_a_segment_of_a_flood(client: AsyncTestClient[Any]) -> None:
    flood = [
        await create(client, FLOODER, book(number)) for number in range(4)
    ]  # 120 segments: 12 s of engine time, one slot
    await asyncio.sleep(0.5)  # the flood is under way
    started = time.perf_counter()
    short = await create(client, BYSTANDER, "One sentence of the other tenant's.")
    while (await job(client, BYSTANDER, short))["status"] != "completed":
        assert time.perf_counter() - started < 5, "the other tenant's job waited behind the flood"
        await asyncio.sleep(0.05)
    waited_s = time.perf_counter() - started
    states = [(await job(client, FLOODER, job_id))["status"] for job_id in flood]
    assert states.count("completed") == 0, states  # the flood was far from done: the short job did not wait for it
    # One segment of the flood's (0.1 s) and its own, plus the polls; the flood's 12 s would be far more.
    assert waited_s < 3, waited_s


async def test_a_tenants_own_jobs_still_run_and_complete(client: AsyncTestClient[Any]) -> None:
    texts = [" ".join(f"Short line {i} of job {number}." for i in range(15)) for number in range(4)]  # 3 segments
    jobs = [(FLOODER, await create(client, FLOODER, text)) for text in texts[:3]]
    jobs.append((BYSTANDER, await create(client, BYSTANDER, texts[3])))
    deadline = time.perf_counter() + 20
    for (key, job_id), text in zip(jobs, texts, strict=True):
        while (state := await job(client, key, job_id))["status"] != "completed":
            assert time.perf_counter() < deadline, state
            await asyncio.sleep(0.05)
        assert state["progress"]["characters_done"] == len(text)
