"""Fairness through two tiers: one engine node, two front gateways on one redis-server, real processes on loopback.

The node's ``paced`` engine has two synthetic workers that speak at real time (``rtf`` 1, like a model at real
time). Tenant ``b`` floods through front 1 with six long streams: two run on the node, four wait there. Tenant ``a``
then asks once through front 2. The fronts tell the node whose request each one is, so the node's scheduler gives
``a`` the next free worker, as one box does; were every request the fronts' own (``service``), ``a`` would wait
behind ``b``'s four queued streams, two of its jobs.

The ``solo`` engine has one worker (the usual GPU set-up): ``b`` streams long inputs, which the front sends to the
node segment by segment, so ``a`` waits for one segment at most, not for a whole input.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from auth.keys import generate_api_key, hash_api_key
from harness.gateway_process import GatewayProcess
from tests.redis_server import RedisServer
from tests.starting import running_together

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterator
    from pathlib import Path

SERVICE_TOKEN = "svc-" + "fedcba9876543210" * 3
SECONDS_PER_CHAR = 0.05
LONG_CHARS, SHORT_CHARS = 60, 10  # 3 s of audio at real time (one of b's jobs), and 0.5 s
LONG_S = LONG_CHARS * SECONDS_PER_CHAR
MAX_SEGMENT_CHARS = 100
SOLO_SECONDS_PER_CHAR = 0.01  # a segment of two sentences (89 characters) takes 0.89 s at real time
SEGMENT_S = MAX_SEGMENT_CHARS * SOLO_SECONDS_PER_CHAR
KEYS = {name: generate_api_key() for name in ("a", "b")}
SERVICE = {"authorization": f"Bearer {SERVICE_TOKEN}"}  # what a front sends an engine node


def unique_text(chars: int) -> str:
    """Text no other request has asked for: identical requests would share one synthesis, or hit the cache."""
    return (uuid.uuid4().hex * (chars // 32 + 1))[:chars]


def node_config() -> dict[str, Any]:
    engine = {"kind": "synthetic", "workers": 2, "queue_size": 16, "reserved_slots": 0}
    solo = {"kind": "synthetic", "workers": 1, "queue_size": 16}
    return {
        "server": {"profile": "engine"},
        "auth": {"service_token": SERVICE_TOKEN},
        "engines": {
            "paced": engine | {"options": {"rtf": 1.0, "seconds_per_char": SECONDS_PER_CHAR}},
            "solo": solo | {"options": {"rtf": 1.0, "seconds_per_char": SOLO_SECONDS_PER_CHAR}},
            "tight": solo | {"queue_size": 1, "options": {"rtf": 1.0, "seconds_per_char": SOLO_SECONDS_PER_CHAR}},
            # An engine that cannot load: the node's /readyz answers 503, yet its other engines serve.
            "broken": {"kind": "synthetic", "options": {"unavailable": "no weights here"}},
        },
    }


def remote(node: GatewayProcess, model: str) -> dict[str, Any]:
    options = {
        "endpoints": [f"{node.base_url}/v1"],
        "model": model,
        "api_key": SERVICE_TOKEN,
        "probe_interval_s": 0.2,
        "first_byte_timeout_s": 30,
    }
    return {"kind": "openai", "queue_size": 16, "options": options}


def front_config(node: GatewayProcess, redis_url: str) -> dict[str, Any]:
    tenants = [
        {"name": "a", "api_key_sha256": [hash_api_key(KEYS["a"])]},
        {"name": "b", "api_key_sha256": [hash_api_key(KEYS["b"])], "limits": {"concurrent_streams": 6}},
    ]
    return {
        "redis_url": redis_url,
        "auth": {"tenants": tenants},
        "engines": {"paced": remote(node, "paced"), "solo": remote(node, "solo"), "broken": remote(node, "broken")},
        "speech": {"max_segment_chars": MAX_SEGMENT_CHARS},
    }


@pytest.fixture(scope="module")
def tiers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[GatewayProcess, list[GatewayProcess]]]:
    redis = RedisServer()
    redis.start()
    workdir = tmp_path_factory.mktemp("two-tier-fairness")
    try:
        node = GatewayProcess(node_config(), mkdir(workdir, "node"))
        fronts = [GatewayProcess(front_config(node, redis.url), mkdir(workdir, f"front{i}")) for i in (1, 2)]
        with running_together([node, *fronts]):
            for front in fronts:
                front.wait_engine("paced", 60, state="ready")  # a front may have settled before its node
            yield node, fronts
    finally:
        redis.remove()


def mkdir(parent: Path, name: str) -> Path:
    (parent / name).mkdir()
    return parent / name


def long_text(sentences: int) -> str:
    """Sentences of 44 characters no other request has asked for (identical requests would share a synthesis)."""
    tag = uuid.uuid4().hex[:8]
    return " ".join(f"Sentence {n:03d} of stream {tag} speaks here." for n in range(sentences))


async def first_byte_s(http: httpx.AsyncClient, who: str, text: str, engine: str = "paced") -> float:
    """Seconds from asking to the first audio byte of ``text`` (read to its end)."""
    body = {"model": engine, "input": text, "voice": "alloy", "response_format": "pcm"}
    asked = time.monotonic()
    headers = {"authorization": f"Bearer {KEYS[who]}"}
    async with http.stream("POST", "/v1/audio/speech", json=body, headers=headers) as response:
        assert response.status_code == 200, await response.aread()
        first: float | None = None
        async for _ in response.aiter_raw():
            first = first or time.monotonic() - asked
    assert first is not None
    return first


async def wait_until(
    node: httpx.AsyncClient, condition: Callable[[dict[str, Any]], bool], engine: str = "paced"
) -> None:
    """Poll the node's ``/readyz`` until ``condition(the engine)`` holds (generous: the machine may be busy)."""
    deadline = time.monotonic() + 20
    while not condition((await node.get("/readyz")).json()["engines"][engine]):
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.05)


@pytest.fixture
async def clients(
    tiers: tuple[GatewayProcess, list[GatewayProcess]],
) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient, httpx.AsyncClient]]:
    node, (front1, front2) = tiers
    async with (
        httpx.AsyncClient(base_url=node.base_url, timeout=60, headers=SERVICE) as node_http,
        httpx.AsyncClient(base_url=front1.base_url, timeout=60) as http1,
        httpx.AsyncClient(base_url=front2.base_url, timeout=60) as http2,
    ):
        await wait_until(node_http, lambda engine: engine["active_jobs"] == 0 and engine["queued"] == 0)
        yield node_http, http1, http2


async def test_a_light_tenant_on_another_front_gets_the_next_worker_of_the_node(
    clients: tuple[httpx.AsyncClient, httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    node, front1, front2 = clients
    flood = [asyncio.create_task(first_byte_s(front1, "b", unique_text(LONG_CHARS))) for _ in range(6)]
    await wait_until(node, lambda engine: engine["active_jobs"] == 2 and engine["queued"] == 4)
    assert (await node.get("/readyz")).json()["engines"]["paced"]["queued"] == 4
    light = await first_byte_s(front2, "a", unique_text(SHORT_CHARS))
    # Within one of b's jobs (the next worker to free) and a second; behind b's queue it would be two jobs or more.
    assert light < LONG_S + 1.0
    for stream in flood:  # the rest of b's six jobs is not waited for; the next test waits for an idle node
        stream.cancel()
    await asyncio.gather(*flood, return_exceptions=True)
    metrics = (await node.get("/metrics")).text
    waited = [line for line in metrics.splitlines() if line.startswith("tts_engine_queue_wait_seconds_count{")]
    assert any('tenant="a"' in line for line in waited), waited  # the node scheduled the front's tenants by name
    assert not any('tenant="service"' in line for line in waited), waited


async def test_long_inputs_through_two_tiers_hold_the_node_for_one_segment_at_a_time(
    clients: tuple[httpx.AsyncClient, httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    node, front1, front2 = clients
    # Three inputs of 4,094 characters (41 s of speech each): one job each would hold the worker that long.
    flood = [asyncio.create_task(first_byte_s(front1, "b", long_text(91), "solo")) for _ in range(3)]
    await wait_until(node, lambda engine: engine["active_jobs"] == 1 and engine["queued"] == 2, "solo")
    light = await first_byte_s(front2, "a", unique_text(SHORT_CHARS), "solo")
    assert light < SEGMENT_S + 1.0  # the segment in progress, then a's turn
    for stream in flood:
        stream.cancel()
    await asyncio.gather(*flood, return_exceptions=True)


async def test_a_node_queues_the_later_segment_of_a_stream_though_its_queue_is_full(
    clients: tuple[httpx.AsyncClient, httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    node = clients[0]
    service = {"authorization": f"Bearer {SERVICE_TOKEN}", "x-tts-tenant": "b"}

    async def speak(chars: int, **extension: object) -> int:
        body = {"model": "tight", "input": unique_text(chars), "voice": "alloy", "response_format": "pcm"}
        response = await node.post("/v1/audio/speech", json=body | extension, headers=service)
        return response.status_code

    running = asyncio.create_task(speak(50))
    await wait_until(node, lambda engine: engine["active_jobs"] == 1, "tight")
    queued = asyncio.create_task(speak(10))
    await wait_until(node, lambda engine: engine["queued"] == 1, "tight")  # its queue of one is full
    assert await speak(10) == 503
    continuing = asyncio.create_task(speak(10, x_tts_continuing=True))
    await wait_until(node, lambda engine: engine["queued"] == 2, "tight")
    assert list(await asyncio.gather(running, queued, continuing)) == [200, 200, 200]


def test_a_front_judges_a_node_by_the_engine_it_asks_for(tiers: tuple[GatewayProcess, list[GatewayProcess]]) -> None:
    node, (front, _) = tiers
    assert httpx.get(f"{node.base_url}/readyz", timeout=5).status_code == 503  # its "broken" engine cannot load
    assert front.engine("paced")["state"] == "ready"
    broken = front.wait_engine("broken", state="unavailable")
    assert "the node's engine 'broken' is unavailable" in broken["reason"]


@pytest.mark.parametrize("path", ["/metrics", "/docs", "/docs/openapi.json", "/v1/models", "/v1/audio/voices"])
def test_an_engine_node_answers_nothing_but_its_probes_without_the_service_token(
    tiers: tuple[GatewayProcess, list[GatewayProcess]], path: str
) -> None:
    """Before: /metrics, /docs and the OpenAPI document answered anyone."""
    node = tiers[0]
    token = {"authorization": f"Bearer {SERVICE_TOKEN}"}
    before = node.refusals(token)
    refused = httpx.get(f"{node.base_url}{path}", timeout=5)
    assert refused.status_code == 401, refused.text
    assert refused.json()["error"]["code"] == "invalid_api_key"
    assert node.refusals(token) - before == {("service_token", 401, "invalid_api_key"): 1}
    with_token = httpx.get(f"{node.base_url}{path}", headers={"authorization": f"Bearer {SERVICE_TOKEN}"}, timeout=5)
    assert with_token.status_code != 401


def test_an_engine_nodes_probes_reveal_no_internals_without_the_token(
    tiers: tuple[GatewayProcess, list[GatewayProcess]],
) -> None:
    node = tiers[0]
    assert httpx.get(f"{node.base_url}/healthz", timeout=5).status_code == 200
    anonymous = httpx.get(f"{node.base_url}/readyz", timeout=5).json()
    assert all(engine["pids"] == [] and engine["reason"] is None for engine in anonymous["engines"].values())
    assert "no weights here" not in json.dumps(anonymous)  # the broken engine's reason stays inside
    front = httpx.get(f"{node.base_url}/readyz", headers={"authorization": f"Bearer {SERVICE_TOKEN}"}, timeout=5)
    assert front.json()["engines"]["paced"]["pids"]
    assert front.json()["engines"]["broken"]["reason"] == "no weights here"


@pytest.mark.parametrize("query", ["", f"?token={SERVICE_TOKEN}"], ids=["no-credentials", "token-in-the-url"])
async def test_an_engine_node_refuses_a_websocket_without_the_token_in_its_header(
    tiers: tuple[GatewayProcess, list[GatewayProcess]], query: str
) -> None:
    """Before: the upgrade was accepted and held for auth_timeout_s, and ?token= carried the tier's credential."""
    node = tiers[0]
    url = f"ws://127.0.0.1:{node.port}/v1/audio/speech/stream{query}"
    token = {"authorization": f"Bearer {SERVICE_TOKEN}"}
    before = await asyncio.to_thread(node.refusals, token)
    with pytest.raises(InvalidStatus) as refused:
        async with connect(url, open_timeout=5):
            pass
    assert refused.value.response.status_code == 403
    assert await asyncio.to_thread(node.refusals, token) - before == {("service_token", 403, "invalid_api_key"): 1}
    async with connect(url.partition("?")[0], additional_headers={"authorization": f"Bearer {SERVICE_TOKEN}"}) as ws:
        assert ws.protocol.state.name == "OPEN"
