"""Fair scheduling across tenants: real gateway processes, real worker processes, real clients.

Tenant ``b`` saturates an engine of two workers with four long streams (its concurrency limit): two run, two wait.
Tenant ``a`` then asks for one short clip. With fair scheduling ``a`` gets the first worker that frees; with the FIFO
baseline it waits behind both of ``b``'s queued streams.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from typing import TYPE_CHECKING, Any

import httpx
import openai
import pytest
import redis

from auth.keys import generate_api_key, hash_api_key
from harness.gateway_process import GatewayProcess

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterator
    from pathlib import Path

SECONDS_PER_CHAR = 0.05
LONG_CHARS, SHORT_CHARS = 80, 20  # 4 s of audio, spoken at real time (one of b's jobs), and 1 s
LONG_S, SHORT_S = LONG_CHARS * SECONDS_PER_CHAR, SHORT_CHARS * SECONDS_PER_CHAR
KEYS = {name: generate_api_key() for name in ("a", "b", "capped")}
ADMIN_TOKEN = "admin-" + uuid.uuid4().hex


def unique_text(chars: int) -> str:
    """Text no other request has asked for: identical requests would share one synthesis, or hit the cache."""
    return (uuid.uuid4().hex * (chars // 32 + 1))[:chars]


def paced_engine(**settings: Any) -> dict[str, Any]:
    return {
        "kind": "synthetic",
        "workers": 2,
        "queue_size": 8,
        "options": {"rtf": 1.0, "seconds_per_char": SECONDS_PER_CHAR},
        **settings,
    }


def tenant(name: str, **settings: Any) -> dict[str, Any]:
    return {"name": name, "api_key_sha256": [hash_api_key(KEYS[name])], **settings}


CONFIG: dict[str, Any] = {
    "auth": {
        "tenants": [
            tenant("a"),
            tenant("b", limits={"concurrent_streams": 4}),
            tenant("capped", limits={"concurrent_streams": 4}, scheduling={"max_queued": 1}),
        ],
    },
    # No reserved slot: these tests show the fair queue alone (a tenant may hold every worker, as the flood does);
    # the reservation has its own tests in tests/unit/engines/test_scheduling.py and its benchmark.
    # "reserving" keeps the default reservation: a tenant below its fair share finds a slot free.
    "engines": {
        "shared": paced_engine(reserved_slots=0),
        "fifo": paced_engine(scheduling="fifo"),
        "reserving": paced_engine(reservation_window_s=6),
    },
}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with GatewayProcess(CONFIG, tmp_path_factory.mktemp("fairness")) as process:
        yield process


@pytest.fixture
async def http(gateway: GatewayProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=gateway.base_url, timeout=60) as client:
        await wait_until(
            client, lambda engines: all(e["active_jobs"] == 0 and e["queued"] == 0 for e in engines.values())
        )
        yield client


async def wait_until(http: httpx.AsyncClient, condition: Callable[[dict[str, Any]], bool]) -> None:
    """Poll ``/readyz`` until ``condition(engines)`` holds (generous bound: the machine may be busy)."""
    deadline = time.monotonic() + 20
    while not condition((await http.get("/readyz")).json()["engines"]):
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.05)


async def speak(http: httpx.AsyncClient, who: str, engine: str, chars: int) -> float:
    """One whole clip of ``chars`` characters; returns when its last byte arrived (monotonic)."""
    body = {"model": engine, "input": unique_text(chars), "voice": "alloy", "response_format": "pcm"}
    headers = {"authorization": f"Bearer {KEYS[who]}"}
    async with http.stream("POST", "/v1/audio/speech", json=body, headers=headers) as response:
        audio = await response.aread()
        assert response.status_code == 200, audio
    assert len(audio) == round(chars * SECONDS_PER_CHAR * 24000) * 2
    return time.monotonic()


async def a_behind_a_saturating_b(http: httpx.AsyncClient, engine: str) -> tuple[float, float, list[float]]:
    """b's four streams (two run, two wait), then a's clip: (a's latency, when a finished, when b's finished)."""
    b_streams = [asyncio.create_task(speak(http, "b", engine, LONG_CHARS)) for _ in range(4)]
    await wait_until(http, lambda engines: engines[engine]["active_jobs"] == 2 and engines[engine]["queued"] == 2)
    asked = time.monotonic()
    a_finished = await speak(http, "a", engine, SHORT_CHARS)
    return a_finished - asked, a_finished, sorted(await asyncio.gather(*b_streams))


def metric(text: str, name: str, **labels: str) -> float:
    wanted = ",".join(f'{key}="{value}"' for key, value in sorted(labels.items()))
    for line in text.splitlines():
        if match := re.fullmatch(rf"{name}\{{(.*)\}} (\S+)", line):
            found = ",".join(sorted(match.group(1).split(",")))
            if found == wanted:
                return float(match.group(2))
    return 0.0


async def test_a_light_tenant_gets_the_next_worker_while_another_holds_them_all(http: httpx.AsyncClient) -> None:
    latency, a_finished, b_finished = await a_behind_a_saturating_b(http, "shared")
    # b's two queued streams started after a: they end after it, by most of a long job.
    assert a_finished < b_finished[2] < b_finished[3]
    # a waited for one of b's running jobs at most, then spoke its own clip (slack for a busy 2-core machine).
    assert latency < LONG_S + SHORT_S + 2.0
    metrics = (await http.get("/metrics")).text
    assert metric(metrics, "tts_engine_queue_wait_seconds_count", engine="shared", tenant="a") == 1
    assert 0.5 < metric(metrics, "tts_engine_queue_wait_seconds_sum", engine="shared", tenant="a") < LONG_S + 2.0


async def test_the_fifo_baseline_makes_the_light_tenant_wait_behind_the_flood(http: httpx.AsyncClient) -> None:
    # The same traffic on an engine with `scheduling: fifo`: what the fair scheduler fixes.
    _, a_finished, b_finished = await a_behind_a_saturating_b(http, "fifo")
    assert a_finished > b_finished[2]


async def test_by_default_a_light_tenant_starts_at_once_beside_a_flood(http: httpx.AsyncClient) -> None:
    for pause in (1.0, 0.0):  # a asks every 2 s or so: it is expected back within about 4 s, and has a share
        await speak(http, "a", "reserving", SHORT_CHARS)
        await asyncio.sleep(pause)
    b_streams = [asyncio.create_task(speak(http, "b", "reserving", LONG_CHARS)) for _ in range(4)]
    # b holds its share (one of two workers); the other is kept for a, who is not waiting yet.
    await wait_until(http, lambda engines: engines["reserving"]["active_jobs"] == 1)
    await wait_until(http, lambda engines: engines["reserving"]["queued"] == 3)
    asked = time.monotonic()
    a_finished = await speak(http, "a", "reserving", SHORT_CHARS)
    assert a_finished - asked < SHORT_S + 1.5  # not behind one of b's 4 s jobs (slack for a busy machine)
    # b's streams are not waited for (up to 12 s more): cancelled, and the next test's fixture waits for the engines
    # to be idle again.
    for stream in b_streams:
        stream.cancel()
    await asyncio.gather(*b_streams, return_exceptions=True)


async def test_queued_requests_show_per_tenant_while_they_wait(http: httpx.AsyncClient) -> None:
    b_streams = [asyncio.create_task(speak(http, "b", "shared", SHORT_CHARS)) for _ in range(4)]
    await wait_until(http, lambda engines: engines["shared"]["queued"] == 2)
    metrics = (await http.get("/metrics")).text
    assert metric(metrics, "tts_engine_tenant_queue_depth", engine="shared", tenant="b") == 2
    assert metric(metrics, "tts_engine_tenant_queue_depth", engine="shared", tenant="a") == 0
    await asyncio.gather(*b_streams)


async def test_a_tenant_over_its_queue_cap_gets_503_while_others_still_queue(
    http: httpx.AsyncClient,
    gateway: GatewayProcess,
) -> None:
    running = [asyncio.create_task(speak(http, "capped", "shared", SHORT_CHARS * 2)) for _ in range(2)]
    await wait_until(http, lambda engines: engines["shared"]["active_jobs"] == 2)
    queued = asyncio.create_task(speak(http, "capped", "shared", SHORT_CHARS))
    await wait_until(http, lambda engines: engines["shared"]["queued"] == 1)
    async with openai.AsyncOpenAI(base_url=f"{gateway.base_url}/v1", api_key=KEYS["capped"], max_retries=0) as sdk:
        with pytest.raises(openai.InternalServerError) as refused:
            await sdk.audio.speech.create(
                model="shared", input=unique_text(SHORT_CHARS), voice="alloy", response_format="pcm"
            )
    assert refused.value.status_code == 503
    assert refused.value.code == "engine_overloaded"
    assert refused.value.response.headers["retry-after"] == "1"
    # The shared queue still has room for everyone else: a queues behind capped's waiter and is served.
    await speak(http, "a", "shared", SHORT_CHARS)
    await asyncio.gather(*running, queued)


# ----------------------------------------------------------------------------------------- settings through Redis
@pytest.fixture
def admin_gateway(redis_url: str, tmp_path: Path) -> Iterator[GatewayProcess]:
    config = {
        "redis_url": redis_url,
        "auth": {"admin_token": ADMIN_TOKEN},
        "engines": {"synthetic": {"kind": "synthetic", "options": {"seconds_per_char": 0.01}}},
    }
    with GatewayProcess(config, tmp_path) as process:
        yield process


def test_tenant_scheduling_goes_through_the_admin_api_and_old_records_still_load(
    admin_gateway: GatewayProcess,
    redis_url: str,
) -> None:
    # A tenant record as gateways wrote them before scheduling settings existed.
    client = redis.Redis.from_url(redis_url)
    # A tenant stored before scheduling settings existed.
    client.hset("tts:{auth}:tenants", "legacy", json.dumps({"limits": {"requests_per_minute": 100}, "models": None}))
    client.zadd("tts:{auth}:tenant-names", {"legacy": 0})
    client.connection_pool.disconnect()
    admin = httpx.Client(base_url=admin_gateway.base_url, headers={"authorization": f"Bearer {ADMIN_TOKEN}"})
    with admin:
        scheduling = {"weight": 2.5, "priority": "high", "max_queued": 3}
        created = admin.post("/admin/tenants", json={"name": "vip", "scheduling": scheduling})
        assert created.status_code == 201, created.text
        assert created.json()["scheduling"] == scheduling
        listed = {tenant["name"]: tenant for tenant in admin.get("/admin/tenants").json()["data"]}
        assert listed["vip"]["scheduling"] == scheduling
        assert listed["legacy"]["scheduling"] == {"weight": 1.0, "priority": "normal", "max_queued": None}
        for bad in ({"weight": 0}, {"priority": "urgent"}, {"max_queued": 0}):
            refused = admin.post("/admin/tenants", json={"name": "bad", "scheduling": bad})
            assert refused.status_code == 400, refused.text
            assert "error" in refused.json()
        key = admin.post("/admin/tenants/legacy/keys").json()["key"]
    with openai.OpenAI(base_url=f"{admin_gateway.base_url}/v1", api_key=key, max_retries=0) as sdk:
        audio = sdk.audio.speech.create(model="synthetic", input="old record", voice="alloy", response_format="pcm")
        assert len(audio.content) == round(10 * 0.01 * 24000) * 2
