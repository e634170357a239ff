"""Speech jobs without Redis (the embedded default): the accepting process speaks them itself (not durable), its
audio comes back whole in each format the jobs take, a WAV file carries its true sizes once complete, a cancel
stops the job's engine work, and deleting a tenant stops and deletes its jobs."""

from __future__ import annotations

import asyncio
import struct
from typing import TYPE_CHECKING, Any, cast

import pytest
from litestar.testing import AsyncTestClient

from gateway.jobs.records import JobRecord, now_s
from gateway.jobs.runner import JobRunner
from gateway.jobs.turns import TenantTurns
from gateway.speech.segments import split_text
from gateway.state import gateway_state
from storage import sortable_id
from tests.audio_decode import decode_audio
from tests.inprocess import in_process_app
from tests.tenancy import ADMIN_TOKEN, bearer
from tests.waiting import wait_for

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from tests.inprocess import ThreadBackend

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


PACED_S_PER_CHAR = 0.005
"""A 100-character segment keeps the engine busy for 0.5 s."""


@pytest.fixture
async def tenancy() -> AsyncIterator[AsyncTestClient[Any]]:
    """Tenants made by the admin API, jobs in this process's memory, one engine that speaks at the pace of speech."""
    config = {
        "auth": {"admin_token": ADMIN_TOKEN, "tenants": [{"name": "acme"}]},
        "engines": {
            "paced": {"kind": "synthetic", "workers": 1, "options": {"seconds_per_char": PACED_S_PER_CHAR, "rtf": 1.0}}
        },
        "aliases": {"tts-1": ["paced"]},
        "jobs": {"segment_chars": SEGMENT_CHARS, "poll_s": 0.02},
    }
    async with AsyncTestClient(app=in_process_app(config)) as test_client:
        test_client.headers.update(bearer(ADMIN_TOKEN))  # a tenant's calls send their own key
        yield test_client


async def new_tenant(client: AsyncTestClient[Any], name: str) -> dict[str, str]:
    """Create the tenant; the headers of a new key of it."""
    assert (await client.post("/admin/tenants", json={"name": name})).status_code == 201
    created = await client.post(f"/admin/tenants/{name}/keys")
    assert created.status_code == 201, created.text
    return bearer(created.json()["key"])


async def test_deleting_a_tenant_stops_and_deletes_its_jobs(tenancy: AsyncTestClient[Any]) -> None:
    """The probe's case: a deleted tenant's running job went on speaking, and a tenant created again under its name
    listed the old jobs and fetched their audio. Now the job's engine work stops, the new tenant has no jobs (the old
    ids are 404), and what the old tenant's jobs spoke is in its retired usage, not the new one's."""
    old = await new_tenant(tenancy, "eps")
    body = {"model": "tts-1", "voice": "alloy", "input": "Done.", "response_format": "pcm"}
    finished = (await tenancy.post(JOBS, headers=old, json=body)).json()
    assert (await tenancy.get(f"{JOBS}/{finished['id']}/content", headers=old)).status_code == 200  # to its end
    body["input"] = TEXT
    pool = cast("ThreadBackend", gateway_state(tenancy.app).router.pools["paced"])
    running = (await tenancy.post(JOBS, headers=old, json=body)).json()  # 12 segments: 6 s of engine work
    await wait_for(lambda: pool.served == 2, 5.0, "the job's first segment")
    spoken = (await tenancy.get(f"{JOBS}/{running['id']}", headers=old)).json()["progress"]["characters_done"]
    assert spoken > 0
    before = (await tenancy.get("/v1/usage", headers=old)).json()

    assert (await tenancy.delete("/admin/tenants/eps")).status_code == 200

    await wait_for(lambda: pool.status().active_jobs == 0, 1.0, "the job's engine work stopped")
    served = pool.served
    await asyncio.sleep(2 * SEGMENT_CHARS * PACED_S_PER_CHAR)  # two segments' time: the job speaks no more
    assert (pool.status().active_jobs, pool.served) == (0, served)
    new = await new_tenant(tenancy, "eps")
    assert (await tenancy.get(JOBS, headers=new)).json()["data"] == []
    for job in (finished["id"], running["id"]):
        for path in ("", "/content", "/events"):
            assert (await tenancy.get(f"{JOBS}/{job}{path}", headers=new)).status_code == 404
    retired = (await tenancy.get("/admin/retired-usage/eps")).json()["data"]
    assert retired[-1]["requests"] == before["requests"] + 1 == 2
    assert spoken <= retired[-1]["input_characters"] - before["input_characters"] <= spoken + SEGMENT_CHARS
    assert (await tenancy.get("/v1/usage", headers=new)).json()["requests"] == 0


async def test_a_job_left_by_a_race_with_the_deletion_is_not_the_new_tenants(tenancy: AsyncTestClient[Any]) -> None:
    """A job the deleted tenant made as it was deleted (a replica that had not heard of the deletion yet) outlives
    the deletion's sweep; it belongs to the deleted tenant's generation, so the tenant created again under the name
    neither sees it nor has it spoken on its account: its runner cancels it before its first segment."""
    new = await new_tenant(tenancy, "eps")
    state = gateway_state(tenancy.app)
    assert state.jobs is not None
    store, pool = state.jobs.store, cast("ThreadBackend", state.router.pools["paced"])
    request = {"model": "tts-1", "voice": "alloy", "response_format": "pcm"}
    left = JobRecord(sortable_id("job_"), "eps", request, 6, 1, int(now_s()), generation="a-deleted-tenants")
    assert await store.create(left, ["Left."], quota_bytes=10**6, max_jobs=1) is None
    assert (await tenancy.get(f"{JOBS}/{left.id}", headers=new)).status_code == 404
    assert (await tenancy.get(JOBS, headers=new)).json() == {
        "object": "list",
        "data": [],
        "first_id": None,
        "last_id": None,
        "has_more": False,
    }
    runner = JobRunner(store, state.speech, state.auth_store, TenantTurns(1), segment_attempts=1)
    await runner.run("eps", left.id)
    ended = await store.get("eps", left.id)
    assert ended is not None
    assert (ended.status, pool.served) == ("cancelled", 0)
    made = await tenancy.post(JOBS, headers=new, json={**request, "input": "Mine."})  # its quota: max_jobs 1000
    assert made.status_code == 202, made.text
