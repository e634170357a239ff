"""A graceful restart of the replica speaking a job (SIGTERM: a rolling update, ``systemctl restart``) on a real
redis-server: the stopping process hands the job back to the queue, and the next process completes it whole, from its
first segment not spoken, although that process's engine becomes ready only seconds after it started.

Before the fix the new process's job worker took the job about 20 ms after start-up, before any engine worker was
ready, tried its segment three times at once and failed the job for good ("engine 'paced' is not ready: still loading:
no worker is ready yet").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import httpx
import pytest

from auth.keys import generate_api_key, hash_api_key
from gateway.speech.segments import split_text
from harness.gateway_process import GatewayProcess
from tests.audio_decode import decode_audio
from tests.waiting import wait_until

if TYPE_CHECKING:
    from pathlib import Path

    from tests.redis_server import RedisServer

KEY = generate_api_key()
JOBS = "/v1/audio/speech/jobs"
SEGMENT_CHARS = 100
SECONDS_PER_CHAR = 0.01
# 1 s of audio a 100-character segment, spoken in 0.5 s: the job runs for some 20 s.
TEXT = " ".join(f"Sentence {i} of the book tells the reader about foxes." for i in range(70))
LOAD_DELAY_S = 4.0
"""How long the restarted process's engine takes to load: its job worker must not speak before."""
ENDED = {"completed", "failed", "cancelled", "expired"}


def config(redis_url: str, load_delay_s: float) -> dict[str, Any]:
    paced = {"seconds_per_char": SECONDS_PER_CHAR, "rtf": 0.5, "load_delay_s": load_delay_s}
    return {
        "redis_url": redis_url,
        "auth": {"tenants": [{"name": "acme", "api_key_sha256": [hash_api_key(KEY)]}]},
        "engines": {"paced": {"kind": "synthetic", "workers": 1, "options": paced}},
        "aliases": {},
        "jobs": {"segment_chars": SEGMENT_CHARS, "poll_s": 0.05, "heartbeat_s": 2, "sweep_s": 1},
    }


def job_of(gateway: GatewayProcess, job_id: str) -> dict[str, Any]:
    response = httpx.get(f"{gateway.base_url}{JOBS}/{job_id}", headers={"Authorization": f"Bearer {KEY}"}, timeout=10)
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_a_job_handed_back_by_a_graceful_stop_completes_on_a_process_still_loading(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    redis_server.flush()
    (tmp_path / "first").mkdir()
    (tmp_path / "second").mkdir()
    with GatewayProcess(config(redis_server.url, 0.0), tmp_path / "first") as first:
        body = {"model": "paced", "voice": "alloy", "input": TEXT, "response_format": "pcm"}
        created = httpx.post(f"{first.base_url}{JOBS}", json=body, headers={"Authorization": f"Bearer {KEY}"})
        assert created.status_code == 202, created.text
        job_id = created.json()["id"]
        wait_until(lambda: job_of(first, job_id)["progress"]["characters_done"] > 0, what="a first segment")
        first.stop()  # SIGTERM: a graceful stop, which hands the job back to the queue
        assert "Retrying Job" in first.log()
    with GatewayProcess(config(redis_server.url, LOAD_DELAY_S), tmp_path / "second") as second:
        wait_until(lambda: job_of(second, job_id)["status"] in ENDED, timeout_s=90, what="the job's end")
        done = job_of(second, job_id)
        assert (done["status"], done["error"]) == ("completed", None)
        audio = httpx.get(
            f"{second.base_url}{JOBS}/{job_id}/content", headers={"Authorization": f"Bearer {KEY}"}, timeout=30
        )
    expected_s = sum(len(segment) for segment in split_text(TEXT, SEGMENT_CHARS)) * SECONDS_PER_CHAR
    assert decode_audio(audio.content, "pcm").duration == pytest.approx(expected_s, abs=0.01)  # none missing or doubled
