"""Tenants share the job runners of two real gateway replicas on a real redis-server (issue #47): after one tenant's
flood of long espeak jobs, another tenant's one-sentence job completes within 20 s, long before the flood; the flood
spreads over both replicas (each speaks ``jobs.concurrency`` of its jobs) rather than gathering on one."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from auth.keys import generate_api_key, hash_api_key
from harness.gateway_process import GatewayProcess
from tests.redis_server import RedisServer
from tests.starting import start_together, stop_together
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator

FLOODER, BYSTANDER = generate_api_key(), generate_api_key()
JOBS = "/v1/audio/speech/jobs"
CONCURRENCY = 2
FLOOD = 6


def book(number: int) -> str:
    """100,000 characters (84 segments of the default 1,200) unlike any other book's."""
    sentences = (f"Sentence {i} of book {number} tells the reader something new about foxes." for i in range(1500))
    return " ".join(sentences)[:100_000]


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[GatewayProcess]]:
    server = RedisServer()
    server.start()
    config: dict[str, Any] = {
        "redis_url": server.url,
        "auth": {
            "tenants": [
                {"name": "flooder", "api_key_sha256": [hash_api_key(FLOODER)]},
                {"name": "bystander", "api_key_sha256": [hash_api_key(BYSTANDER)]},
            ]
        },
        "engines": {"espeak": {"kind": "espeak", "workers": 1}},
        "aliases": {"tts-1": ["espeak"]},
        "jobs": {"concurrency": CONCURRENCY, "poll_s": 0.1},
    }
    processes = [GatewayProcess(config, tmp_path_factory.mktemp(f"fair{i}")) for i in range(2)]
    try:
        start_together(processes)
        yield processes
    finally:
        stop_together(processes)
        server.remove()


def create(replica: GatewayProcess, key: str, text: str) -> str:
    body = {"model": "tts-1", "voice": "alloy", "response_format": "mp3", "input": text}
    response = httpx.post(f"{replica.base_url}{JOBS}", json=body, headers=_bearer(key), timeout=30)
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def status(replica: GatewayProcess, key: str, job_id: str) -> str:
    response = httpx.get(f"{replica.base_url}{JOBS}/{job_id}", headers=_bearer(key), timeout=10)
    return str(response.json()["status"])


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_another_tenants_job_completes_within_20_s_of_a_flood(replicas: list[GatewayProcess]) -> None:
    first, second = replicas
    flood = [create(first, FLOODER, book(number)) for number in range(FLOOD)]
    try:
        # Each replica runs as many of the flood's jobs as it has slots; the rest wait in the queue.
        def spread() -> bool:
            return [status(first, FLOODER, job_id) for job_id in flood].count("running") == 2 * CONCURRENCY

        wait_until(spread, timeout_s=20, what="both replicas speaking the flood")
        started = time.monotonic()
        short = create(second, BYSTANDER, "One short sentence of another tenant's.")
        wait_until(lambda: status(second, BYSTANDER, short) == "completed", timeout_s=20, what="the other tenant's job")
        took_s = time.monotonic() - started
        assert all(status(first, FLOODER, job_id) != "completed" for job_id in flood)
        assert took_s < 20, took_s
    finally:
        for job_id in flood:
            httpx.delete(f"{first.base_url}{JOBS}/{job_id}", headers=_bearer(FLOODER), timeout=10)
