"""A live gateway as deployed by default (no Redis, the built-in espeak engine and its defaults) keeps a worker for
speech jobs (``low_priority_workers``, issue #47): an interactive request never waits for a job's segment.

The proof does not rest on timings: the jobs' worker is stopped (SIGSTOP) while a job runs on it, and another
tenant's interactive request is still spoken whole, as it could not be if it needed that worker; the job then goes on.
"""

from __future__ import annotations

import contextlib
import os
import signal
from typing import TYPE_CHECKING, Any

import httpx
import psutil
import pytest

from auth.keys import generate_api_key, hash_api_key
from harness.gateway_process import GatewayProcess
from tests.audio_decode import decode_audio
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator

FLOODER, BYSTANDER = generate_api_key(), generate_api_key()
JOBS = "/v1/audio/speech/jobs"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    tenants = [
        {"name": "flooder", "api_key_sha256": [hash_api_key(FLOODER)]},
        {"name": "bystander", "api_key_sha256": [hash_api_key(BYSTANDER)]},
    ]
    config: dict[str, Any] = {"auth": {"tenants": tenants}, "engines": {"espeak": {"kind": "espeak"}}}
    process = GatewayProcess(config, tmp_path_factory.mktemp("jobs-worker"))
    process.start()
    try:
        yield process
    finally:
        process.stop()


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _progress(gateway: GatewayProcess, job_id: str) -> dict[str, Any]:
    response = httpx.get(f"{gateway.base_url}{JOBS}/{job_id}", headers=_bearer(FLOODER), timeout=10)
    return dict(response.json())


def test_the_default_espeak_keeps_a_lower_priority_worker_for_jobs(gateway: GatewayProcess) -> None:
    state = gateway.wait_engine("espeak", ready_workers=2)
    first, last = state["pids"]
    assert psutil.Process(last).nice() == psutil.Process(first).nice() + 10


def test_an_interactive_request_is_served_while_the_jobs_worker_is_stopped(gateway: GatewayProcess) -> None:
    jobs_worker = gateway.wait_engine("espeak", ready_workers=2)["pids"][-1]
    text = " ".join(f"Sentence {i} of a long book read in the background." for i in range(2000))
    body = {"model": "espeak", "voice": "alloy", "input": text, "response_format": "mp3"}
    created = httpx.post(f"{gateway.base_url}{JOBS}", json=body, headers=_bearer(FLOODER), timeout=30)
    assert created.status_code == 202, created.text
    job_id = created.json()["id"]
    try:
        wait_until(lambda: _progress(gateway, job_id)["progress"]["characters_done"] > 0, timeout_s=30, what="a job")
        os.kill(jobs_worker, signal.SIGSTOP)  # the job's segment cannot end now
        try:
            speech = {"model": "espeak", "voice": "nova", "input": "Served beside a job.", "response_format": "wav"}
            reply = httpx.post(
                f"{gateway.base_url}/v1/audio/speech", json=speech, headers=_bearer(BYSTANDER), timeout=10
            )
            assert _progress(gateway, job_id)["status"] == "running"
        finally:
            os.kill(jobs_worker, signal.SIGCONT)
        assert reply.status_code == 200, reply.text
        assert decode_audio(reply.content, "wav").duration > 0.5
        done = _progress(gateway, job_id)["progress"]["characters_done"]
        wait_until(lambda: _progress(gateway, job_id)["progress"]["characters_done"] > done, timeout_s=30, what="more")
    finally:
        with contextlib.suppress(httpx.HTTPError):
            httpx.delete(f"{gateway.base_url}{JOBS}/{job_id}", headers=_bearer(FLOODER), timeout=10)
