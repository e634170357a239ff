"""Jobs whose text holds long runs with nothing to say (emoji, dashes), on a real gateway and redis-server: their
segments stay within ``jobs.segment_chars``, so such a job is spoken whole in bounded time, no log line quotes its
text, and it is bounded at creation by the job cap alone (``string_above_max_length`` naming it).

Before, a run of 60,000 emoji after 100 sentences joined the sentences' last segment whole: 120,902 characters, past
what a speech request may hold. Its runner raised on it, SAQ ran the job again twenty times in 0.2 s, each time
logging a traceback that quoted the input, then left it ``running``, at 0 characters, for good; and 100,001 emoji
alone, within the cap of 500,000, were refused at once with "String should have at most 100000 characters".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import httpx
import pytest

from auth.keys import generate_api_key, hash_api_key
from harness.gateway_process import GatewayProcess
from tests.redis_server import RedisServer
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator

KEY, CAPPED = generate_api_key(), generate_api_key()
CAPPED_CHARS = 150_000
JOBS = "/v1/audio/speech/jobs"
SENTENCE = "Quixotic marmalade sails at dawn. "
"""The jobs' text, which no log line may hold."""
EMOJI = "\U0001f600"
TENANTS = [
    {"name": "acme", "api_key_sha256": [hash_api_key(KEY)]},
    {"name": "capped", "api_key_sha256": [hash_api_key(CAPPED)], "limits": {"job_input_characters": CAPPED_CHARS}},
]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    server = RedisServer()
    server.start()
    config: dict[str, Any] = {
        "redis_url": server.url,
        "auth": {"tenants": TENANTS},
        # A millisecond of tone a character: a 120,000-character job is two minutes of audio, made in seconds.
        "engines": {"tones": {"kind": "synthetic", "workers": 1, "options": {"seconds_per_char": 0.001}}},
        "aliases": {"tts-1": ["tones"]},
        "jobs": {"heartbeat_s": 2, "sweep_s": 1, "poll_s": 0.1},
    }
    process = GatewayProcess(config, tmp_path_factory.mktemp("unspeakable"))
    try:
        process.start()
        yield process
    finally:
        process.stop()
        server.remove()


def create(gateway: GatewayProcess, text: str, key: str = KEY) -> httpx.Response:
    body = {"model": "tts-1", "voice": "alloy", "response_format": "pcm", "input": text}
    return httpx.post(f"{gateway.base_url}{JOBS}", json=body, headers=_bearer(key), timeout=60)


def ended(gateway: GatewayProcess, job_id: str, timeout_s: float) -> dict[str, Any]:
    """The job once it ended (completed, failed, cancelled)."""
    seen: dict[str, Any] = {}

    def over() -> bool:
        url = f"{gateway.base_url}{JOBS}/{job_id}"
        seen.update(httpx.get(url, headers=_bearer(KEY), timeout=10).json())
        return seen["status"] not in {"queued", "running"}

    wait_until(over, timeout_s=timeout_s, what=f"the job to end (last seen: {seen})")
    return seen


def forget(gateway: GatewayProcess, job_id: str, key: str = KEY) -> None:
    """Cancel the job if it runs, then delete it."""
    for _ in range(2):
        httpx.delete(f"{gateway.base_url}{JOBS}/{job_id}", headers=_bearer(key), timeout=10)


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_a_long_run_of_emoji_is_spoken_whole_and_never_logged(gateway: GatewayProcess) -> None:
    text = (SENTENCE * 100 + f"{EMOJI} " * 60_000).strip()  # 123,399 characters: within the cap of 500,000
    created = create(gateway, text)
    assert created.status_code == 202, created.text
    job = ended(gateway, created.json()["id"], timeout_s=90)
    assert (job["status"], job["error"]) == ("completed", None)
    assert job["progress"]["characters_done"] == len(text)
    audio = httpx.get(f"{gateway.base_url}{JOBS}/{job['id']}/content", headers=_bearer(KEY), timeout=60)
    assert audio.status_code == 200
    assert len(audio.content) >= 2 * 24_000 * 0.001 * len(text.replace(" ", ""))  # every character spoken
    assert "Quixotic" not in gateway.log()
    forget(gateway, job["id"])


@pytest.mark.parametrize(
    ("key", "text", "cap"),
    [
        (KEY, EMOJI * 100_001, None),
        (KEY, "- " * 60_000, None),
        (KEY, EMOJI * 500_001, 500_000),
        (CAPPED, EMOJI * CAPPED_CHARS, None),
        (CAPPED, EMOJI * (CAPPED_CHARS + 1), CAPPED_CHARS),
    ],
    ids=["100001-emoji", "dashes", "over-the-cap", "at-the-tenants-cap", "over-the-tenants-cap"],
)
def test_a_job_is_bounded_by_the_job_cap_alone(gateway: GatewayProcess, key: str, text: str, cap: int | None) -> None:
    response = create(gateway, text, key)
    if cap is None:
        assert response.status_code == 202, response.text
        forget(gateway, response.json()["id"], key)
        return
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("string_above_max_length", "input")
    assert f"at most {cap}." in error["message"]
