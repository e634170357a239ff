"""Concurrent ``DELETE``s of a running speech job (issue #47: 20 of them got one 200 and nineteen 404s, and the job's
usage was lost): each gets an honest answer (``docs/jobs.md``) and what the job spoke is counted once.

Against a real gateway process with its jobs in a real Redis, where every step of a call is a round trip that the
steps of the other calls fall between (an in-process test client serves one request at a time).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from auth.keys import generate_api_key, hash_api_key
from harness.gateway_process import GatewayProcess

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.redis_server import RedisServer

KEY = generate_api_key()
JOBS = "/v1/audio/speech/jobs"
TEXT = " ".join(f"Sentence number {i} says a little more." for i in range(30))
DELETES = 20
ROUNDS = 5


@pytest.fixture(scope="module")
def gateway(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    redis_server.flush()
    config = {
        "redis_url": redis_server.url,
        "auth": {"tenants": [{"name": "acme", "api_key_sha256": [hash_api_key(KEY)]}]},
        # 1 s of audio a 100-character segment, spoken in 0.5 s: the job runs for about 7 s.
        "engines": {"paced": {"kind": "synthetic", "workers": 1, "options": {"seconds_per_char": 0.01, "rtf": 0.5}}},
        "aliases": {},
        "jobs": {"segment_chars": 100, "poll_s": 0.02},
    }
    with GatewayProcess(config, tmp_path_factory.mktemp("job-races")) as process:
        yield process


async def running_job(http: httpx.AsyncClient) -> str:
    """A job with its first segment spoken and more to come."""
    body = {"model": "paced", "voice": "alloy", "input": TEXT, "response_format": "pcm"}
    created = await http.post(JOBS, json=body)
    assert created.status_code == 202, created.text
    job = str(created.json()["id"])
    async with asyncio.timeout(10):
        while not (await http.get(f"{JOBS}/{job}")).json()["progress"]["characters_done"]:
            await asyncio.sleep(0.02)
    return job


async def counted(http: httpx.AsyncClient, requests: int) -> dict[str, Any]:
    async with asyncio.timeout(5):  # the ledger writes a moment after the answer
        while (usage := (await http.get("/v1/usage")).json())["requests"] < requests:
            await asyncio.sleep(0.02)
    return dict(usage)


async def delete_at_once(http: httpx.AsyncClient, job: str) -> int:
    """``DELETES`` concurrent ``DELETE``s of ``job``, their answers checked; the characters the job spoke.

    Must hold: each that found the job running answers the job cancelled (one of them cancelled it), none deletes
    it; one that found it cancelled deletes it (200 ``deleted``), and only after that may another get a 404.
    """
    answers = await asyncio.gather(*(http.delete(f"{JOBS}/{job}") for _ in range(DELETES)))
    statuses = [answer.status_code for answer in answers]
    assert set(statuses) <= {200, 404}, [answer.text for answer in answers]
    bodies = [answer.json() for answer in answers if answer.status_code == 200]
    cancelled = [body for body in bodies if body.get("status") == "cancelled"]
    deleted = [body for body in bodies if body.get("deleted") is True]
    assert cancelled, statuses  # before the fix, often lost: the one that cancelled it answered 404
    assert len(cancelled) + len(deleted) == len(bodies) and len(deleted) <= 1
    assert 404 not in statuses or deleted  # a 404 only for a job a concurrent call deleted
    spoken = {int(body["progress"]["characters_done"]) for body in cancelled}
    assert len(spoken) == 1 and 0 < min(spoken) < len(TEXT)
    after = await http.get(f"{JOBS}/{job}")
    assert after.status_code == (404 if deleted else 200)
    return min(spoken)


async def test_concurrent_deletes_of_a_running_job_answer_honestly_and_count_it_once(gateway: GatewayProcess) -> None:
    """Several rounds, since the race is lost only in some: in 4 of 6 before the fix, the call that cancelled the job
    read it back after another had deleted it, answered 404 and counted nothing. The usage must count each job
    once, with the characters its cancelled record shows."""
    bearer = {"authorization": f"Bearer {KEY}"}
    async with httpx.AsyncClient(base_url=gateway.base_url, headers=bearer, timeout=30) as http:
        spoken = [await delete_at_once(http, await running_job(http)) for _ in range(ROUNDS)]
        usage = await counted(http, ROUNDS)
    assert (usage["requests"], usage["input_characters"]) == (ROUNDS, sum(spoken))
