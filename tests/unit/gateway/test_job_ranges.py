"""A ``Range`` of any length on a job's audio is a 416 or a 206, never a 500 (issue #47: ``int()`` refuses more than
4,300 digits), on the real app in process, with its jobs in memory or in Redis. (Concurrent ``DELETE``s are in
``tests/e2e/test_job_races.py``: the test client serves one request at a time.)"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest
from litestar.testing import AsyncTestClient

from tests.inprocess import in_process_app

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

JOBS = "/v1/audio/speech/jobs"
TEXT = " ".join(f"Sentence number {i} says a little more." for i in range(30))
HUGE = "9" * 5000  # past the 4,300 digits int() reads


@pytest.fixture(params=["memory", "redis"])
async def client(request: pytest.FixtureRequest) -> AsyncIterator[AsyncTestClient[Any]]:
    """The app with its jobs in memory, or in Redis (where each step of a call is a round trip another call's steps
    fall between)."""
    shared = {"redis_url": request.getfixturevalue("redis_url")} if request.param == "redis" else {}
    config = {
        **shared,
        "engines": {
            "tones": {"kind": "synthetic", "workers": 1, "options": {"seconds_per_char": 0.01}},
            # 1 s of audio a segment, spoken in 0.5 s: a job runs for 7 s, its first segment done after 0.5 s.
            "paced": {"kind": "synthetic", "workers": 1, "options": {"seconds_per_char": 0.01, "rtf": 0.5}},
        },
        "aliases": {},
        "jobs": {"segment_chars": 100, "poll_s": 0.02},
    }
    async with AsyncTestClient(app=in_process_app(config)) as test_client:
        yield test_client


async def create(client: AsyncTestClient[Any], model: str) -> str:
    body = {"model": model, "voice": "alloy", "input": TEXT, "response_format": "pcm"}
    response = await client.post(JOBS, json=body)
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


async def progress(client: AsyncTestClient[Any], job: str, characters: int) -> dict[str, Any]:
    for _ in range(500):
        record: dict[str, Any] = (await client.get(f"{JOBS}/{job}")).json()
        if record["progress"]["characters_done"] >= characters:
            return record
        await asyncio.sleep(0.02)
    raise AssertionError(f"job {job} never spoke {characters} characters")


@pytest.mark.parametrize(
    ("header", "status"),
    [
        (f"bytes={HUGE}-", 416),
        (f"bytes=0-{HUGE}", 206),  # to the end
        (f"bytes=-{HUGE}", 206),  # the last bytes: all of them
        (f"bytes={HUGE}-{HUGE}", 416),
        # Not valid (the last position before the first): ignored, the whole file (RFC 9110 section 14.2)
        ("bytes=5-2", 200),
        ("bytes=999999999-2", 200),  # not valid before beyond the file
        (f"bytes={HUGE}-{HUGE[1:]}", 200),
    ],
)
async def test_a_range_of_any_length_on_a_complete_job(client: AsyncTestClient[Any], header: str, status: int) -> None:
    job = await create(client, "tones")
    whole = await client.get(f"{JOBS}/{job}/content")  # follows the job to its end
    response = await client.get(f"{JOBS}/{job}/content", headers={"range": header})
    assert response.status_code == status, response.text
    if status == 200:
        assert "content-range" not in response.headers
        assert (response.content, response.headers["content-length"]) == (whole.content, str(len(whole.content)))
    elif status == 206:
        assert response.content == whole.content
    else:
        assert response.json()["error"]["code"] == "range_not_satisfiable"
        assert response.headers["content-range"] == f"bytes */{len(whole.content)}"


async def test_a_range_of_any_length_on_a_running_job(client: AsyncTestClient[Any]) -> None:
    job = await create(client, "paced")
    await progress(client, job, 1)
    refused = await client.get(f"{JOBS}/{job}/content", headers={"range": f"bytes={HUGE}-"})
    assert refused.status_code == 416, refused.text
    assert (refused.json()["error"]["code"], refused.headers["content-range"]) == ("range_not_satisfiable", "bytes */*")
    async with client.stream("GET", f"{JOBS}/{job}/content", headers={"range": f"bytes=10-{HUGE}"}) as open_range:
        assert open_range.status_code == 206
        assert open_range.headers["content-range"] == f"bytes 10-{2**53 - 1}/*"
    await client.delete(f"{JOBS}/{job}")
