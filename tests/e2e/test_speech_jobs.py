"""Speech jobs across two real gateway replicas on a real redis-server (``docs/jobs.md``, issue #36).

A 20,000-character job created on one replica is followed (server-sent events) and fetched (while it runs) on the
other, decodes in PyAV to as long as the same text spoken in pieces, and holds its segments in order; the replica
running a job is SIGKILLed and another completes it, whole; a cancel frees the engine at once; other tenants and
made-up ids get 404, caps and quotas clear 4xx; deleting a tenant on one replica stops its job on the other and
leaves a tenant created again under its name none of its jobs.
"""

from __future__ import annotations

import json
import signal
import time
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from auth.keys import generate_api_key, hash_api_key
from gateway.speech.segments import split_text
from harness.gateway_process import GatewayProcess
from tests.audio_decode import decode_audio
from tests.redis_server import RedisServer
from tests.starting import start_together, stop_together
from tests.tenancy import ADMIN_TOKEN, Admin
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator

ACME, GLOBEX, SMALL = generate_api_key(), generate_api_key(), generate_api_key()
JOBS = "/v1/audio/speech/jobs"
SEGMENT_CHARS = 300  # jobs.segment_chars here, and speech.max_segment_chars (the default): one engine job a segment
# Tones of 0.05 s per character at a twentieth of real time: a 300-character segment takes 0.75 s of engine work.
TONES = {"kind": "synthetic", "workers": 1, "options": {"rtf": 0.05, "chunk_ms": 100}}
# At 0.4 of real time: a segment keeps the engine busy for 6 s, unless it is cancelled.
SLOW = {"kind": "synthetic", "workers": 1, "options": {"rtf": 0.4, "chunk_ms": 100}}
SPEED = 3.0  # espeak's fastest native rate: a third of the audio, and of the work, at normal speed
BOOK = " ".join(f"Sentence {i} of the book tells the reader something new about foxes and dogs." for i in range(400))


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[GatewayProcess]]:
    server = RedisServer()
    server.start()
    config: dict[str, Any] = {
        "redis_url": server.url,
        "auth": {
            "admin_token": ADMIN_TOKEN,
            "tenants": [
                {"name": "acme", "api_key_sha256": [hash_api_key(ACME)]},
                {"name": "globex", "api_key_sha256": [hash_api_key(GLOBEX)]},
                {
                    "name": "small",
                    "api_key_sha256": [hash_api_key(SMALL)],
                    "limits": {"job_input_characters": 1000, "job_storage_bytes": 0},
                },
            ],
        },
        "engines": {"espeak": {"kind": "espeak", "workers": 1}, "tones": TONES, "slow": SLOW},
        "aliases": {"tts-1": ["espeak"]},
        "jobs": {"heartbeat_s": 2, "sweep_s": 1, "poll_s": 0.1, "segment_chars": SEGMENT_CHARS},
    }
    processes = [GatewayProcess(config, tmp_path_factory.mktemp(f"jobs{i}")) for i in range(2)]
    try:
        start_together(processes)
        yield processes
    finally:
        stop_together(processes)
        server.remove()


def create(replica: GatewayProcess, key: str = ACME, **body: Any) -> httpx.Response:
    fields = {"model": "tts-1", "voice": "alloy", "response_format": "mp3", **body}
    return httpx.post(f"{replica.base_url}{JOBS}", json=fields, headers=bearer(key), timeout=30)


def job_of(replica: GatewayProcess, job_id: str, key: str = ACME) -> dict[str, Any]:
    response = httpx.get(f"{replica.base_url}{JOBS}/{job_id}", headers=bearer(key), timeout=10)
    assert response.status_code == 200, response.text
    return dict(response.json())


def content(replica: GatewayProcess, job_id: str, key: str = ACME, **headers: str) -> httpx.Response:
    return httpx.get(f"{replica.base_url}{JOBS}/{job_id}/content", headers={**bearer(key), **headers}, timeout=120)


def events(replica: GatewayProcess, job_id: str) -> list[dict[str, Any]]:
    """Every event of the job's stream, to its end."""
    seen = []
    url = f"{replica.base_url}{JOBS}/{job_id}/events"
    with httpx.stream("GET", url, headers=bearer(ACME), timeout=120) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: "):
                seen.append(json.loads(line.removeprefix("data: ")))
    return seen


def runner_of(replicas: list[GatewayProcess], job_id: str) -> GatewayProcess:
    """The replica whose queue worker took the job (SAQ logs each job it processes)."""
    found: list[GatewayProcess] = []

    def taken() -> bool:
        found[:] = [r for r in replicas if "Processing Job<function: speak_job" in _log(r) and job_id in _log(r)]
        return bool(found)

    wait_until(taken, timeout_s=15, what="a replica taking the job")
    return found[0]


def _log(replica: GatewayProcess) -> str:
    return replica.log_path.read_text(errors="replace")


def test_a_long_job_made_on_one_replica_is_followed_and_fetched_on_the_other(replicas: list[GatewayProcess]) -> None:
    one, other = replicas
    text = BOOK[:20_000]
    started = time.perf_counter()
    created = create(one, input=text, speed=SPEED, metadata={"book": "foxes"})
    assert created.status_code == 202, created.text
    job = created.json()
    assert (job["object"], job["status"], job["metadata"]) == ("audio.speech.job", "queued", {"book": "foxes"})
    assert job["progress"] == {"characters_done": 0, "characters_total": 20_000, "audio_seconds": 0.0}
    audio = content(other, job["id"])  # asked for at once: it follows the job to its end
    assert audio.status_code == 200, audio.text
    took = time.perf_counter() - started
    seen = events(other, job["id"])
    assert seen[-1]["type"] == "audio.speech.job.completed"
    assert seen[-1]["job"]["progress"]["characters_done"] == 20_000
    done = [event["job"]["progress"]["characters_done"] for event in seen]
    assert done == sorted(done)
    whole = decode_audio(audio.content, "mp3")
    pieces = [
        httpx.post(
            f"{one.base_url}/v1/audio/speech",
            json={"model": "tts-1", "voice": "alloy", "input": piece, "response_format": "mp3", "speed": SPEED},
            headers=bearer(ACME),
            timeout=60,
        )
        for piece in split_text(text, SEGMENT_CHARS)
    ]
    spoken_in_pieces = sum(decode_audio(piece.content, "mp3").duration for piece in pieces)
    assert whole.duration >= 0.9 * spoken_in_pieces, (whole.duration, spoken_in_pieces)
    assert job_of(other, job["id"])["progress"]["audio_seconds"] == pytest.approx(whole.duration, rel=0.02)
    print(f"20,000 characters: {whole.duration:.0f} s of audio, fetched {took:.2f} s after the job was made")


def test_the_segments_are_in_order_none_missing_or_doubled(replicas: list[GatewayProcess]) -> None:
    """A pcm job is byte for byte its segments, each spoken alone (espeak says the same words the same way)."""
    one, other = replicas
    text = BOOK[:1500]
    job = create(one, input=text, response_format="pcm").json()
    audio = content(other, job["id"]).content
    alone = [
        httpx.post(
            f"{other.base_url}/v1/audio/speech",
            json={"model": "tts-1", "voice": "alloy", "input": segment, "response_format": "pcm"},
            headers=bearer(ACME),
            timeout=60,
        ).content
        for segment in split_text(text, SEGMENT_CHARS)
    ]
    assert audio == b"".join(alone)
    ranged = content(other, job["id"], range="bytes=1000-1999")
    assert ranged.status_code == 206
    assert ranged.headers["content-range"] == f"bytes 1000-1999/{len(audio)}"
    assert ranged.content == audio[1000:2000]
    assert content(other, job["id"], range=f"bytes={len(audio)}-").status_code == 416


def test_ranges_of_a_running_job_come_as_they_are_committed(replicas: list[GatewayProcess]) -> None:
    """RFC 8673's way: a range within what is committed at once with its length, one past it as its bytes come; the
    length is ``*`` while the job runs. The bytes are the completed file's, and decode."""
    one, other = replicas
    text = BOOK[:2400]  # eight segments of 0.75 s of engine work, 15 s of audio each (720,000 bytes of PCM)
    job = create(one, input=text, model="tones", response_format="wav").json()
    wait_until(lambda: job_of(other, job["id"])["progress"]["characters_done"] > 0, what="a first segment")
    early = content(other, job["id"], range="bytes=100-199")
    assert (early.status_code, early.headers["x-job-status"]) == (206, "running")
    assert (early.headers["content-range"], early.headers["content-length"]) == ("bytes 100-199/*", "100")
    url = f"{other.base_url}{JOBS}/{job['id']}/content"
    with (
        httpx.Client(headers=bearer(ACME), timeout=60) as client,
        client.stream("GET", url, headers={"range": "bytes=44-"}) as open_range,
        client.stream("GET", url, headers={"range": "bytes=2000000-2999999"}) as past,  # not committed yet
    ):
        for response in (open_range, past):
            assert (response.status_code, response.headers["x-job-status"]) == (206, "running")
            assert "content-length" not in response.headers  # the job may end before the range's last byte
        assert open_range.headers["content-range"] == f"bytes 44-{2**53 - 1}/*"
        assert past.headers["content-range"] == "bytes 2000000-2999999/*"
        pcm, later = open_range.read(), past.read()  # each follows the job: to its end, and to byte 2,999,999
    assert job_of(other, job["id"])["status"] == "completed"
    whole = content(one, job["id"]).content
    assert (early.content, later, pcm) == (whole[100:200], whole[2_000_000:3_000_000], whole[44:])
    expected_s = sum(0.05 * len(segment) for segment in split_text(text, SEGMENT_CHARS))
    assert decode_audio(pcm, "pcm").duration == pytest.approx(expected_s, abs=0.01)


def test_a_job_whose_replica_is_killed_completes_elsewhere_whole(replicas: list[GatewayProcess]) -> None:
    text = BOOK[:1500]  # five segments of 0.75 s of engine work each
    job = create(replicas[0], input=text, model="tones", response_format="wav").json()
    running = runner_of(replicas, job["id"])
    survivor = next(r for r in replicas if r is not running)
    wait_until(lambda: job_of(survivor, job["id"])["progress"]["characters_done"] > 0, what="a first segment")
    try:
        running.stop(signal.SIGKILL)
        wait_until(lambda: job_of(survivor, job["id"])["status"] == "completed", timeout_s=60, what="the takeover")
        audio = content(survivor, job["id"])
        decoded = decode_audio(audio.content, "wav")
        expected_s = sum(0.05 * len(segment) for segment in split_text(text, SEGMENT_CHARS))
        assert decoded.duration == pytest.approx(expected_s, abs=0.01)  # no segment missing or doubled
        assert job_of(survivor, job["id"])["progress"]["audio_seconds"] == pytest.approx(expected_s, abs=0.01)
    finally:
        running.start()


def test_a_cancel_frees_the_engine_at_once(replicas: list[GatewayProcess]) -> None:
    job = create(replicas[0], input=BOOK[:1200], model="slow").json()
    running = runner_of(replicas, job["id"])
    wait_until(lambda: "speak_job" in _log(running) and job_of(running, job["id"])["status"] == "running")
    time.sleep(0.3)  # well into its first segment (6 s of engine work on the engine's one worker)
    cancelled = httpx.delete(f"{running.base_url}{JOBS}/{job['id']}", headers=bearer(ACME), timeout=10)
    assert cancelled.status_code == 200
    assert cancelled.json()["status"] == "cancelled"
    started = time.perf_counter()
    body = {"model": "slow", "voice": "alloy", "input": "Now.", "response_format": "pcm"}
    with httpx.stream(
        "POST", f"{running.base_url}/v1/audio/speech", json=body, headers=bearer(GLOBEX), timeout=30
    ) as response:
        next(response.iter_bytes())
        first_byte_s = time.perf_counter() - started
    # The job's segment would have held the worker for 5.7 s more; a busy machine may take a second or two anyway.
    assert first_byte_s < 3.0, first_byte_s
    assert content(running, job["id"]).status_code == 409
    deleted = httpx.delete(f"{running.base_url}{JOBS}/{job['id']}", headers=bearer(ACME), timeout=10)
    assert deleted.json() == {"id": job["id"], "object": "audio.speech.job.deleted", "deleted": True}
    assert httpx.get(f"{running.base_url}{JOBS}/{job['id']}", headers=bearer(ACME)).status_code == 404


def test_another_tenant_and_made_up_ids_get_404(replicas: list[GatewayProcess]) -> None:
    one, other = replicas
    job = create(one, input="A short job of its own.").json()
    for path in ("", "/content", "/events"):
        assert httpx.get(f"{other.base_url}{JOBS}/{job['id']}{path}", headers=bearer(GLOBEX)).status_code == 404
        made_up = httpx.get(f"{other.base_url}{JOBS}/job_0123456789abcdef{path}", headers=bearer(ACME))
        assert made_up.status_code == 404
        assert made_up.json()["error"]["code"] == "not_found"
    assert httpx.delete(f"{other.base_url}{JOBS}/{job['id']}", headers=bearer(GLOBEX)).status_code == 404
    listed = httpx.get(f"{other.base_url}{JOBS}", headers=bearer(GLOBEX)).json()
    assert job["id"] not in [item["id"] for item in listed["data"]]
    mine = httpx.get(f"{other.base_url}{JOBS}", params={"limit": 100}, headers=bearer(ACME)).json()
    assert job["id"] in [item["id"] for item in mine["data"]]


@pytest.mark.parametrize(
    ("key", "body", "status", "code"),
    [
        (SMALL, {"input": "x" * 1001}, 400, "string_above_max_length"),
        (SMALL, {"input": "Within the cap."}, 429, "job_storage_quota"),
        (ACME, {"input": "Hello.", "response_format": "opus"}, 400, "unsupported_value"),
        (ACME, {"input": "Hello.", "stream_format": "sse"}, 400, "unsupported_value"),
        (ACME, {"input": "Hello.", "voice": "nobody"}, 400, None),
        (ACME, {"input": "   "}, 400, None),
    ],
    ids=["over-the-tenant-cap", "storage-quota", "opus", "sse", "unknown-voice", "blank"],
)
def test_caps_and_quotas_give_clear_4xx(
    replicas: list[GatewayProcess], key: str, body: dict[str, Any], status: int, code: str | None
) -> None:
    response = create(replicas[0], key=key, **body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["message"]
    if code is not None:
        assert error["code"] == code


def test_deleting_a_tenant_stops_its_jobs_everywhere_and_a_new_one_of_its_name_has_none(
    replicas: list[GatewayProcess],
) -> None:
    """The probe's case: tenant ``eps`` with a finished job and a running one, deleted on the replica that does not
    run the job. Before, the job went on speaking, and a new ``eps`` listed both jobs and fetched the old audio. Now
    the job's engine work stops at once, the new tenant has no jobs (the old ids are 404 on both replicas), and what
    the jobs spoke is in the deleted tenant's retired usage, none of it in the new tenant's."""
    admins = [Admin(replica.base_url) for replica in replicas]
    admin = admins[0]
    try:
        admin.tenant("eps")
        old = admin.key("eps")["key"]
        finished = create(replicas[0], key=old, input="A finished job of the old tenant.", model="tones").json()
        wait_until(lambda: job_of(replicas[0], finished["id"], old)["status"] == "completed", what="the short job")
        running = create(replicas[0], key=old, input=BOOK[:3000], model="slow").json()  # 6 s a segment
        runner = runner_of(replicas, running["id"])
        spoken = wait_for_a_segment(runner, running["id"], old)
        before = httpx.get(f"{runner.base_url}/v1/usage", headers=bearer(old)).json()

        admins[1 - replicas.index(runner)].delete_tenant("eps")  # on the replica that does not run the job

        # Its segment had 5 s or more to go: the engine is free within a second or so, and stays so.
        wait_until(lambda: active_engine_jobs(runner, "slow") == 0, timeout_s=2, what="the job's engine work stopped")
        time.sleep(1.0)
        assert active_engine_jobs(runner, "slow") == 0
        admin.tenant("eps")
        new = admin.key("eps")["key"]
        for replica in replicas:
            assert httpx.get(f"{replica.base_url}{JOBS}", headers=bearer(new)).json()["data"] == []
            for job in (finished["id"], running["id"]):
                for path in ("", "/content", "/events"):
                    found = httpx.get(f"{replica.base_url}{JOBS}/{job}{path}", headers=bearer(new), timeout=10)
                    assert found.status_code == 404, found.text
        retired = wait_for_retired_requests(admin, "eps", before["requests"] + 1)
        assert spoken <= retired["input_characters"] - before["input_characters"] <= spoken + SEGMENT_CHARS
        assert httpx.get(f"{runner.base_url}/v1/usage", headers=bearer(new)).json()["requests"] == 0
    finally:
        admin.http.delete("/admin/tenants/eps")
        for each in admins:
            each.close()


def wait_for_a_segment(replica: GatewayProcess, job_id: str, key: str) -> int:
    """The job's characters done, once its first segment is committed."""
    done: list[int] = []

    def committed() -> bool:
        done[:] = [job_of(replica, job_id, key)["progress"]["characters_done"]]
        return done[0] > 0

    wait_until(committed, timeout_s=30, what="the job's first segment")
    return done[0]


def active_engine_jobs(replica: GatewayProcess, engine: str) -> float:
    """``tts_engine_active_jobs`` of the engine on the replica: what its workers are speaking now."""
    metrics = httpx.get(f"{replica.base_url}/metrics", timeout=10).text
    line = next(
        line for line in metrics.splitlines() if line.startswith(f'tts_engine_active_jobs{{engine="{engine}"}}')
    )
    return float(line.rsplit(" ", 1)[1])


def wait_for_retired_requests(admin: Admin, tenant: str, requests: int) -> dict[str, Any]:
    """The usage of the tenant's last deletion, once it counts ``requests`` (the ledger writes in the background)."""
    retired: list[dict[str, Any]] = []

    def counted() -> bool:
        retired[:] = admin.http.get(f"/admin/retired-usage/{tenant}").json()["data"][-1:]
        return bool(retired) and retired[0]["requests"] >= requests

    wait_until(counted, timeout_s=10, what="the deleted tenant's usage")
    assert retired[0]["requests"] == requests
    return retired[0]
