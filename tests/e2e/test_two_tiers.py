"""Tenants and custom voices across the hop: one engine node, two front gateways on one redis-server, one box beside
them for comparison, and an OpenAI-like server that is not an engine node; every one a real process on loopback.

The node's synthetic engines pitch each custom speaker differently, so the PCM says who spoke; ``paced`` has one
worker whose jobs last their audio's length, so the order in which requests get their first byte is the node's
scheduling decision.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import random
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from websockets.asyncio.client import connect

from auth.keys import generate_api_key, hash_api_key
from engines.synthetic import voice_frequency
from harness.gateway_process import GatewayProcess
from tests.audio_decode import decode_audio, dominant_frequency
from tests.openai_like import OpenAILike
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator
    from pathlib import Path

    from tests.redis_server import RedisServer

SERVICE_TOKEN = "svc-" + "fedcba9876543210" * 3
SERVICE = {"authorization": f"Bearer {SERVICE_TOKEN}"}  # an engine node's metrics need it (a front ignores it)
PACED_CHARS, PACED_SECONDS_PER_CHAR = 8, 0.05  # every paced job: 0.4 s of audio, spoken at real time
TENANTS: dict[str, dict[str, Any]] = {
    "acme": {},
    "beta": {},
    "vip": {"priority": "high"},
    "lowly": {"priority": "low"},
    "heavy": {"weight": 3},
    "capped": {"max_queued": 1},
}
KEYS = {name: generate_api_key() for name in TENANTS}
# A speaker as ChatTTS writes one: base16384 text, non-ASCII (3 bytes a character in UTF-8), too large for a header.
SPEAKER = "".join(chr(0x4E00 + (i * 7919) % 0x3FFF) for i in range(6000))


def tones(**options: Any) -> dict[str, Any]:
    return {"kind": "synthetic", "workers": 1, "options": {"seconds_per_char": 0.02, **options}}


def remote(endpoint: str, model: str) -> dict[str, Any]:
    options = {"endpoints": [endpoint], "model": model, "api_key": SERVICE_TOKEN, "probe_interval_s": 0.2}
    return {"kind": "openai", "options": options}


def tenants() -> list[dict[str, Any]]:
    return [
        {"name": name, "api_key_sha256": [hash_api_key(KEYS[name])], "scheduling": scheduling}
        for name, scheduling in TENANTS.items()
    ]


class Tiers:
    """Everything this module runs."""

    def __init__(self, workdir: Path, redis_url: str, upstream: OpenAILike) -> None:
        node = {
            "server": {"profile": "engine"},
            "auth": {"service_token": SERVICE_TOKEN},
            "engines": {
                "tones": tones(),
                "paced": tones(rtf=1.0, seconds_per_char=PACED_SECONDS_PER_CHAR) | {"reserved_slots": 0},
            },
        }
        self.node = GatewayProcess(node, _subdir(workdir, "node"))
        endpoint = f"{self.node.base_url}/v1"
        front = {
            "redis_url": redis_url,
            "auth": {"tenants": tenants()},
            "engines": {
                "tones": remote(endpoint, "tones"),
                "paced": remote(endpoint, "paced"),
                "openai-like": remote(upstream.url, "tts-1"),
            },
        }
        self.fronts = [GatewayProcess(front, _subdir(workdir, f"front{i}")) for i in range(2)]
        self.one_box = GatewayProcess({"auth": {"tenants": tenants()}, "engines": {"tones": tones()}}, workdir)

    def start(self) -> None:
        with ThreadPoolExecutor(4) as starting:
            list(starting.map(GatewayProcess.start, [self.node, self.one_box, *self.fronts]))
        for front in self.fronts:
            for engine in ("tones", "paced", "openai-like"):
                front.wait_engine(engine, state="ready")

    def stop(self) -> None:
        for process in [*self.fronts, self.node, self.one_box]:
            if process.process is not None:
                process.stop()


def _subdir(parent: Path, name: str) -> Path:
    path = parent / name
    path.mkdir()
    return path


@pytest.fixture(scope="module")
def upstream() -> Iterator[OpenAILike]:
    server = OpenAILike()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def tiers(tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer, upstream: OpenAILike) -> Iterator[Tiers]:
    redis_server.flush()
    running = Tiers(tmp_path_factory.mktemp("tiers"), redis_server.url, upstream)
    try:
        running.start()
        yield running
    finally:
        running.stop()


def auth(tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[tenant]}"}


def create_voice(gateway: GatewayProcess, name: str, model: str = "tones", **speaker: Any) -> str:
    response = httpx.post(
        f"{gateway.base_url}/v1/audio/voices", headers=auth("acme"), json={"name": name, "model": model, **speaker}
    )
    assert response.status_code == 201, response.text
    voice_id: str = response.json()["id"]
    return voice_id


def speak(gateway: GatewayProcess, voice: str | dict[str, str], text: str, **extra: Any) -> httpx.Response:
    body = {"model": "tones", "input": text, "voice": voice, "response_format": "pcm", **extra}
    return httpx.post(f"{gateway.base_url}/v1/audio/speech", headers=auth("acme"), json=body, timeout=30)


def metric(gateway: GatewayProcess, name: str, **labels: str) -> float:
    """The value of one sample of ``name`` with exactly these labels (0 when absent)."""
    text = httpx.get(f"{gateway.base_url}/metrics", headers=SERVICE, timeout=5).text
    wanted = ",".join(f'{key}="{value}"' for key, value in labels.items())
    for line in text.splitlines():
        if line.startswith(f"{name}{{{wanted}}} "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def tenants_in_metrics(gateway: GatewayProcess) -> set[str]:
    metrics = httpx.get(f"{gateway.base_url}/metrics", headers=SERVICE, timeout=5).text
    return set(re.findall(r'tenant="([^"]*)"', metrics))


def paced_text(chars: int = PACED_CHARS) -> str:
    """A text no request asked for before (no single flight, no cache hit) whose cost is every other's of its
    length: letters with one vowel group, so the scheduler's estimate of its speech is the same for all."""
    return "a" + "".join(random.choices("bcdfghjklmnpqrstvwxz", k=chars - 1))


async def wait_queued(node: GatewayProcess, count: int) -> None:
    await asyncio.to_thread(
        wait_until, lambda: node.engine("paced")["queued"] == count, 10, f"{count} requests queued on the node"
    )


@contextlib.asynccontextmanager
async def worker_held(tiers: Tiers) -> AsyncIterator[None]:
    """Hold ``paced``'s one worker with a request of ten seconds while the block runs, then hang it up: what queued
    meanwhile starts in the order the node's scheduler chooses, however slowly the requests reached the node."""
    holder = asyncio.create_task(first_byte_at(tiers.fronts[0], "beta", chars=200))  # one segment of 10 s
    await asyncio.to_thread(
        wait_until, lambda: tiers.node.engine("paced")["active_jobs"] == 1, 10, "the holder running"
    )
    try:
        yield
    finally:
        holder.cancel()  # the client hangs up: the front cancels its request to the node, which frees the worker
        with contextlib.suppress(asyncio.CancelledError):
            await holder


async def first_byte_at(
    front: GatewayProcess, tenant: str, headers: dict[str, str] | None = None, chars: int = PACED_CHARS
) -> float:
    """Ask ``paced`` for a clip as ``tenant``; when its first byte came (read to the end, so the job runs whole)."""
    body = {"model": "paced", "input": paced_text(chars), "voice": "alloy", "response_format": "pcm"}
    first = None
    async with (
        httpx.AsyncClient(base_url=front.base_url, timeout=30) as http,
        http.stream("POST", "/v1/audio/speech", json=body, headers=auth(tenant) | (headers or {})) as response,
    ):
        assert response.status_code == 200, await response.aread()
        async for _ in response.aiter_raw():
            first = first or time.monotonic()
    assert first is not None
    return first


# ----------------------------------------------------------------------------------------------------------------
# custom voices through the hop


@pytest.mark.parametrize("source", [{"speaker": SPEAKER}, {"seed": 4242}], ids=["spk_emb", "seed"])
def test_a_custom_voice_sounds_the_same_through_two_tiers_as_in_one_box(tiers: Tiers, source: dict[str, Any]) -> None:
    name = f"mine-{next(iter(source))}"
    created_on_front = create_voice(tiers.fronts[0], name, **source)
    created_in_box = create_voice(tiers.one_box, name, **source)
    text = "The same voice on either side of the hop."

    in_box = speak(tiers.one_box, name, text)
    by_name = speak(tiers.fronts[0], name, text)
    by_id = speak(tiers.fronts[1], {"id": created_on_front}, text)  # the other front: the voice is in Redis

    assert in_box.status_code == by_name.status_code == by_id.status_code == 200, by_name.text
    assert by_name.content == in_box.content
    assert by_id.content == in_box.content
    assert speak(tiers.one_box, {"id": created_in_box}, text).content == in_box.content
    speaker = source.get("speaker") or f"seed:{source['seed']}"
    assert dominant_frequency(decode_audio(by_id.content, "pcm")) == pytest.approx(
        voice_frequency("alloy", speaker), rel=0.03
    )


def test_the_largest_speaker_with_the_longest_instructions_reaches_the_node(tiers: Tiers) -> None:
    # 16,384 three-byte characters of speaker (48 KiB) and 4,096 four-byte characters of instructions (16 KiB): more
    # than a gateway's default 64 KiB body, which an engine node raises to what a front may send it.
    speaker = "\u4e00" * 16384
    create_voice(tiers.fronts[0], "largest", speaker=speaker)
    reply = speak(tiers.fronts[0], "largest", "Every field at its largest.", instructions="\U0001f600" * 4096)
    assert reply.status_code == 200, reply.text
    assert dominant_frequency(decode_audio(reply.content, "pcm")) == pytest.approx(
        voice_frequency("alloy", speaker), rel=0.03
    )


def test_a_custom_voice_over_sse_is_the_pcm_of_one_box(tiers: Tiers) -> None:
    create_voice(tiers.fronts[0], "events", speaker="seed:77")
    create_voice(tiers.one_box, "events", speaker="seed:77")

    def events_pcm(gateway: GatewayProcess) -> bytes:
        response = speak(gateway, "events", "Events through the tiers.", stream_format="sse")
        assert response.status_code == 200, response.text
        events = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]
        return b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta")

    two_tiers = events_pcm(tiers.fronts[1])
    assert two_tiers == events_pcm(tiers.one_box)
    assert dominant_frequency(decode_audio(two_tiers, "pcm")) == pytest.approx(voice_frequency("", "seed:77"), rel=0.03)


async def test_a_custom_voice_in_a_realtime_session_is_the_pcm_of_one_box(tiers: Tiers) -> None:
    on_front = await asyncio.to_thread(create_voice, tiers.fronts[0], "live", speaker="seed:5")
    in_box = await asyncio.to_thread(create_voice, tiers.one_box, "live", speaker="seed:5")

    async def session_pcm(gateway: GatewayProcess, voice_id: str) -> bytes:
        url = gateway.base_url.replace("http://", "ws://") + "/v1/audio/speech/stream"
        session = {"model": "tones", "voice": {"id": voice_id}, "response_format": "pcm"}
        audio = b""
        async with connect(url, additional_headers=auth("acme")) as socket_:
            await socket_.send(json.dumps({"type": "session.update", "session": session}))
            await socket_.send(json.dumps({"type": "input.append", "text": "One sentence here. And another one."}))
            await socket_.send(json.dumps({"type": "session.close"}))
            async with asyncio.timeout(20):
                async for message in socket_:
                    event = json.loads(message)
                    assert event["type"] != "error", event
                    if event["type"] == "audio.delta":
                        audio += base64.b64decode(event["audio"])
        return audio

    two_tiers = await session_pcm(tiers.fronts[0], on_front)
    assert two_tiers
    assert two_tiers == await session_pcm(tiers.one_box, in_box)
    assert dominant_frequency(decode_audio(two_tiers, "pcm")) == pytest.approx(voice_frequency("", "seed:5"), rel=0.03)


def test_an_upstream_that_is_no_engine_node_refuses_custom_voices_and_learns_no_tenant(
    tiers: Tiers,
    upstream: OpenAILike,
) -> None:
    front = tiers.fronts[0]
    voice = {"name": "elsewhere", "model": "openai-like", "speaker": "seed:9"}
    refused = httpx.post(f"{front.base_url}/v1/audio/voices", headers=auth("acme"), json=voice, timeout=10)
    body = {"model": "openai-like", "input": "Hello there.", "voice": "alloy", "response_format": "pcm"}
    built_in = httpx.post(f"{front.base_url}/v1/audio/speech", headers=auth("acme"), json=body, timeout=10)

    assert refused.status_code == 400  # when made, not on every later use
    assert refused.json()["error"]["param"] == "model"
    assert "not a chattts-gateway engine node" in refused.json()["error"]["message"]
    assert built_in.status_code == 200
    assert len(upstream.seen) == 1
    assert not [header for header in upstream.seen[0]["headers"] if header.startswith("x-tts")]
    assert "acme" not in json.dumps(upstream.seen[0])


def test_a_front_refuses_a_speaker_its_nodes_engine_cannot_use(tiers: Tiers) -> None:
    voice = {"name": "unprintable", "model": "tones", "speaker": "bell\x07"}
    refused = httpx.post(f"{tiers.fronts[0].base_url}/v1/audio/voices", headers=auth("acme"), json=voice, timeout=10)
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["param"] == "speaker"
    assert "printable" in refused.json()["error"]["message"]  # the node's synthetic engine said so


# ----------------------------------------------------------------------------------------------------------------
# tenants through the hop


def test_the_nodes_metrics_carry_the_tenants_of_both_fronts(tiers: Tiers) -> None:
    node = tiers.node
    before = {
        t: metric(node, "tts_engine_queue_wait_seconds_count", engine="tones", tenant=t) for t in ("acme", "beta")
    }
    for front, tenant in zip(tiers.fronts, ("acme", "beta"), strict=True):
        body = {"model": "tones", "input": f"Counted for {tenant} {time.time()}.", "voice": "alloy"}
        response = httpx.post(f"{front.base_url}/v1/audio/speech", headers=auth(tenant), json=body, timeout=10)
        assert response.status_code == 200

    for tenant in ("acme", "beta"):
        wait = metric(node, "tts_engine_queue_wait_seconds_count", engine="tones", tenant=tenant)
        assert wait == before[tenant] + 1
        assert metric(node, "tts_tenant_requests_total", tenant=tenant) >= 1


def test_a_front_of_an_older_version_is_served_as_the_service(tiers: Tiers) -> None:
    node = tiers.node
    before = metric(node, "tts_engine_queue_wait_seconds_count", engine="tones", tenant="service")
    body = {"model": "tones", "input": f"No context {time.time()}.", "voice": "alloy"}
    token = {"Authorization": f"Bearer {SERVICE_TOKEN}"}
    response = httpx.post(f"{node.base_url}/v1/audio/speech", headers=token, json=body, timeout=10)

    assert response.status_code == 200
    assert response.headers["x-tts-engine-node"] == "1"
    assert metric(node, "tts_engine_queue_wait_seconds_count", engine="tones", tenant="service") == before + 1


@pytest.mark.parametrize(
    ("header", "value"),
    [("x-tts-tenant", "Not A Name"), ("x-tts-tenant-weight", "-1"), ("x-tts-tenant-priority", "urgent")],
)
def test_a_malformed_context_is_a_400_naming_its_header(tiers: Tiers, header: str, value: str) -> None:
    headers = {"Authorization": f"Bearer {SERVICE_TOKEN}", "x-tts-tenant": "acme", header: value}
    body = {"model": "tones", "input": "Malformed.", "voice": "alloy"}
    response = httpx.post(f"{tiers.node.base_url}/v1/audio/speech", headers=headers, json=body, timeout=10)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == header


async def test_a_high_priority_tenant_of_another_front_goes_before_a_normal_ones_queue(tiers: Tiers) -> None:
    async with worker_held(tiers):
        flood = [asyncio.create_task(first_byte_at(tiers.fronts[0], "acme")) for _ in range(3)]
        await wait_queued(tiers.node, 3)
        vip = asyncio.create_task(first_byte_at(tiers.fronts[1], "vip"))
        await wait_queued(tiers.node, 4)
    assert await vip < min(await asyncio.gather(*flood)), "vip must get the worker that frees next"


async def test_weights_hold_through_the_hop(tiers: Tiers) -> None:
    async with worker_held(tiers):
        light = [asyncio.create_task(first_byte_at(tiers.fronts[0], "acme")) for _ in range(3)]
        heavy = [asyncio.create_task(first_byte_at(tiers.fronts[1], "heavy")) for _ in range(3)]
        await wait_queued(tiers.node, 6)
    acme, heavy_starts = sorted(await asyncio.gather(*light)), await asyncio.gather(*heavy)
    # Weight 3 against 1: all three of heavy's before acme's second (equal weights would alternate).
    assert max(heavy_starts) < acme[1]


async def test_a_queue_cap_holds_through_the_hop_without_opening_the_breaker(tiers: Tiers) -> None:
    front = tiers.fronts[0]
    body = {"model": "paced", "input": paced_text(), "voice": "alloy", "response_format": "pcm"}
    async with worker_held(tiers), httpx.AsyncClient(base_url=front.base_url, timeout=30) as http:
        queued = asyncio.create_task(first_byte_at(front, "capped"))
        await wait_queued(tiers.node, 1)  # its cap
        over = await http.post("/v1/audio/speech", json=body, headers=auth("capped"))
        other = asyncio.create_task(first_byte_at(front, "beta"))  # another tenant still queues
        await wait_queued(tiers.node, 2)
    await asyncio.gather(queued, other)

    assert over.status_code == 503
    assert over.json()["error"]["code"] == "engine_overloaded"
    assert "retry-after" in over.headers
    assert front.engine("paced")["endpoints"][0]["breaker"] == "closed"


# ----------------------------------------------------------------------------------------------------------------
# a spoofed context


async def test_a_tenant_claiming_a_context_at_the_front_gains_nothing(tiers: Tiers) -> None:
    spoof = {
        "x-tts-tenant": "ghost",
        "x-tts-tenant-priority": "high",
        "x-tts-tenant-weight": "1000000",
        "x-tts-engine-node": "1",
    }
    async with worker_held(tiers):
        flood = [asyncio.create_task(first_byte_at(tiers.fronts[0], "acme")) for _ in range(3)]
        await wait_queued(tiers.node, 3)
        lowly = asyncio.create_task(first_byte_at(tiers.fronts[1], "lowly", spoof))
        await wait_queued(tiers.node, 4)
    acme = await asyncio.gather(*flood)

    # Honoured, "high" would have gone next; lowly is of the low class and goes after acme's whole queue.
    assert await lowly > max(acme)
    assert "ghost" not in tenants_in_metrics(tiers.node)
    assert metric(tiers.node, "tts_tenant_requests_total", tenant="lowly") >= 1


def test_a_speaker_sent_to_a_front_is_refused(tiers: Tiers) -> None:
    response = speak(tiers.fronts[0], "alloy", "Mine now.", x_tts_speaker="seed:1")
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "x_tts_speaker"


@pytest.mark.parametrize("credential", [None, "tenant key"], ids=["no-token", "a-tenant-key"])
def test_a_context_sent_to_a_node_without_the_service_token_is_refused(tiers: Tiers, credential: str | None) -> None:
    headers = {"x-tts-tenant": "ghost", "x-tts-tenant-priority": "high"}
    if credential is not None:
        headers["Authorization"] = f"Bearer {KEYS['acme']}"
    body = {"model": "tones", "input": "Let me in.", "voice": "alloy", "x_tts_speaker": "seed:1"}
    response = httpx.post(f"{tiers.node.base_url}/v1/audio/speech", headers=headers, json=body, timeout=10)

    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_api_key"
    assert "ghost" not in tenants_in_metrics(tiers.node)
    assert "ghost" not in tiers.node.log()
