"""Followers of a job's events share one poll of the store per job (200 followers each polling cost 0.65 of a core
and slowed every other request 4.6 times), and one tenant may have ``jobs.max_followers_per_tenant`` at once."""

from __future__ import annotations

import asyncio
import functools
import json
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeAlias, cast

import httpx
import pytest
from litestar.testing import AsyncTestClient

from gateway.state import gateway_state
from tests.inprocess import in_process_app

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

    from litestar import Litestar

    from gateway.jobs.service import SpeechJobs

    Follow: TypeAlias = Callable[..., Awaitable[httpx.Response]]

JOBS = "/v1/audio/speech/jobs"
POLL_S = 0.05
FOLLOWERS = 20
CAP = 3
TEXT = " ".join(f"Sentence number {i} of a job that takes its time." for i in range(40))  # 20 segments, 0.5 s each


@pytest.fixture
async def client() -> AsyncIterator[AsyncTestClient[Any]]:
    """The app under Litestar's client, whose requests block the calling thread until answered: the followers below
    are sent from threads of their own (:func:`follow`) to be open at once."""
    config = {
        "engines": {"slow": {"kind": "synthetic", "workers": 1, "options": {"seconds_per_char": 0.01, "rtf": 0.5}}},
        "aliases": {"tts-1": ["slow"]},
        "jobs": {"segment_chars": 100, "poll_s": POLL_S, "max_followers_per_tenant": FOLLOWERS},
    }
    async with AsyncTestClient(app=in_process_app(config)) as test_client:
        yield test_client


@pytest.fixture
def follow(client: AsyncTestClient[Any]) -> Iterator[Follow]:
    """Follow a job's events (or its content) to their end, in a thread of its own, through the app's own client
    transport."""
    threads = ThreadPoolExecutor(max_workers=FOLLOWERS)
    transport = cast("httpx.BaseTransport", client._transport)  # Litestar's test transport is sync and async
    sync = httpx.Client(transport=transport, base_url=str(client.base_url))

    async def follow_job(job_id: str, what: str = "events") -> httpx.Response:
        url = f"{JOBS}/{job_id}/{what}"
        return await asyncio.get_running_loop().run_in_executor(threads, functools.partial(sync.get, url, timeout=60))

    yield follow_job
    threads.shutdown(wait=True)  # not ``sync.close()``: the transport is the app client's, closed with it


def speech_jobs(app: Litestar) -> SpeechJobs:
    jobs = gateway_state(app).jobs
    assert jobs is not None
    return jobs


async def create(client: AsyncTestClient[Any]) -> str:
    body = {"model": "tts-1", "voice": "alloy", "input": TEXT, "response_format": "pcm"}
    response = await client.post(JOBS, json=body)
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


async def until(condition: Callable[[], bool]) -> None:
    for _ in range(200):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the condition never held")


def events(response: httpx.Response) -> list[dict[str, Any]]:
    return [json.loads(line.removeprefix("data: ")) for line in response.text.splitlines() if line.startswith("data: ")]


def count_reads(jobs: SpeechJobs) -> list[int]:
    """Count the store's reads of job records (the store itself still answers them)."""
    reads = [0]
    read: Callable[[str, str], Awaitable[Any]] = jobs.store.get

    async def counted(tenant: str, job_id: str) -> Any:
        reads[0] += 1
        return await read(tenant, job_id)

    jobs.store.get = counted  # type: ignore[method-assign]
    return reads


async def test_followers_of_one_job_share_one_poll(client: AsyncTestClient[Any], follow: Follow) -> None:
    jobs = speech_jobs(client.app)
    job_id = await create(client)
    followers = [asyncio.ensure_future(follow(job_id)) for _ in range(FOLLOWERS)]
    await until(lambda: jobs.followers.following("anonymous") == FOLLOWERS)
    reads = count_reads(jobs)
    await asyncio.sleep(1.0)
    # One poll reads every 0.05 s: about 20 reads in the second, where each follower polling would make 400.
    assert jobs.followers.polls() == 1
    assert 3 <= reads[0] <= 1.0 / POLL_S * 1.5, reads[0]
    assert (await client.delete(f"{JOBS}/{job_id}")).json()["status"] == "cancelled"
    for response in await asyncio.gather(*followers):
        received = events(response)
        assert received[0]["type"] == "audio.speech.job.progress"
        assert received[-1]["type"] == "audio.speech.job.cancelled"
    await until(lambda: jobs.followers.polls() == 0 and jobs.followers.following("anonymous") == 0)


async def test_followers_beyond_the_cap_get_429_until_one_leaves(client: AsyncTestClient[Any], follow: Follow) -> None:
    jobs = speech_jobs(client.app)
    jobs.followers.max_per_tenant = CAP
    job_id = await create(client)
    followers = [asyncio.ensure_future(follow(job_id)) for _ in range(CAP)]
    await until(lambda: jobs.followers.following("anonymous") == CAP)
    refused = await client.get(f"{JOBS}/{job_id}/events")
    assert refused.status_code == 429
    error = refused.json()["error"]
    assert (error["type"], error["code"]) == ("requests", "concurrency_limit_exceeded")
    assert refused.headers["retry-after"] == "1"
    await client.delete(f"{JOBS}/{job_id}")  # the job ends, and so do its followers' streams
    await asyncio.gather(*followers)
    await until(lambda: jobs.followers.following("anonymous") == 0)
    again = await client.get(f"{JOBS}/{job_id}/events")
    assert again.status_code == 200
    assert events(again)[-1]["type"] == "audio.speech.job.cancelled"


async def test_followers_of_a_jobs_audio_share_its_poll_too(client: AsyncTestClient[Any], follow: Follow) -> None:
    jobs = speech_jobs(client.app)
    job_id = await create(client)
    followers = [asyncio.ensure_future(follow(job_id, "content")) for _ in range(FOLLOWERS)]
    await asyncio.sleep(0.5)  # they all follow the job
    reads = count_reads(jobs)
    await asyncio.sleep(1.0)
    assert 3 <= reads[0] <= 1.0 / POLL_S * 1.5, reads[0]  # each polling: about 400
    assert jobs.followers.polls() == 1
    await client.delete(f"{JOBS}/{job_id}")
    responses = await asyncio.gather(*followers)
    assert all(response.status_code == 200 for response in responses)
    bodies = sorted((response.content for response in responses), key=len)
    assert len(bodies[-1]) > 0
    assert all(bodies[-1].startswith(body) for body in bodies)  # each ended where the job did, the same bytes
