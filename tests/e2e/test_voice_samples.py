"""Voices from samples across the hop: a real engine-node process (synthetic tones and tiny ChatTTS) asked by a front's
remote engines, beside one box's worker pools of the same engines, and an OpenAI-like server that is no engine node.

One box and two tiers must give the same speaker for the same sample, and speak it the same."""

from __future__ import annotations

import asyncio
import math
import threading
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np
import pytest

from engines.base import InvalidSynthesisRequestError, SynthesisRequest
from engines.pool import EnginePool
from engines.remote.backend import RemoteEngine
from engines.settings import RemoteEngineSettings, engine_settings, local_engine_settings
from harness.gateway_process import GatewayProcess
from tests.chattts_assets import chattts_engine_options
from tests.openai_like import OpenAILike

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

SERVICE_TOKEN = "svc-" + "0123456789abcdef" * 3
RATE = 24000
TRANSCRIPT = "Hello, this is how I sound."
ENGINES: dict[str, dict[str, Any]] = {
    "tones": {"kind": "synthetic", "workers": 1, "options": {"seconds_per_char": 0.02}},
    # A seed of the engine's own: a request's seed does not travel across the hop (OpenAI's API has none).
    "chattts": {"kind": "chattts", "workers": 1, "start_timeout_s": 120, "options": chattts_engine_options(seed=3)},
    "mute": {"kind": "synthetic", "workers": 1, "options": {"clones_voices": False}},
}


def recording(seconds: float = 2.0, frequency: float = 180.0) -> bytes:
    t = np.arange(int(seconds * RATE)) / RATE
    wave = sum(0.3 / k * np.sin(2 * math.pi * k * frequency * t) for k in range(1, 6))
    wave += np.random.default_rng(int(frequency)).normal(0, 0.02, t.size)
    return (wave * 32767).astype("<i2").tobytes()


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    config = {"server": {"profile": "engine"}, "auth": {"service_token": SERVICE_TOKEN}, "engines": ENGINES}
    with GatewayProcess(config, tmp_path_factory.mktemp("node")) as process:
        yield process


@pytest.fixture(scope="module")
def openai_like() -> Iterator[OpenAILike]:
    server = OpenAILike()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


async def remote_engine(url: str, model: str) -> RemoteEngine:
    options = {"endpoints": [url], "model": model, "api_key": SERVICE_TOKEN, "probe_interval_s": 0.2}
    settings = engine_settings(kind="openai", options=options)
    assert isinstance(settings, RemoteEngineSettings)
    engine = RemoteEngine(model, settings)
    await engine.start()
    for _ in range(200):
        if engine.status().state == "ready":
            return engine
        await asyncio.sleep(0.05)
    raise AssertionError(f"remote engine {model} never ready: {engine.status()}")


@pytest.fixture(scope="module")
async def front(node: GatewayProcess) -> AsyncIterator[dict[str, RemoteEngine]]:
    engines = {name: await remote_engine(f"{node.base_url}/v1", name) for name in ENGINES}
    yield engines
    for engine in engines.values():
        await engine.stop()


@pytest.fixture(scope="module")
async def one_box() -> AsyncIterator[dict[str, EnginePool]]:
    pools = {name: EnginePool(name, local_engine_settings(**ENGINES[name])) for name in ("tones", "chattts")}
    for pool in pools.values():
        await pool.start()
        assert await pool.wait_ready(120), pool.status().reason
    yield pools
    for pool in pools.values():
        await pool.stop()


async def speak(backend: Any, request: SynthesisRequest) -> np.ndarray:
    async with backend.open_stream(request) as stream:
        return np.frombuffer(b"".join([chunk async for chunk in stream]), "<i2")


@pytest.mark.parametrize("model", ["tones", "chattts"])
async def test_two_tiers_make_and_speak_the_voice_one_box_does(
    front: dict[str, RemoteEngine], one_box: dict[str, EnginePool], model: str
) -> None:
    assert front[model].info.clones_voices, "every endpoint is an engine node"
    sample = recording()
    speaker = await front[model].speaker_from_sample(sample, RATE, TRANSCRIPT)
    assert speaker == await one_box[model].speaker_from_sample(sample, RATE, TRANSCRIPT)
    assert speaker.startswith("sample:" if model == "tones" else "smp:")

    request = SynthesisRequest("Now I say something else.", "voice_1", speaker=speaker)
    remote, local = await speak(front[model], request), await speak(one_box[model], request)
    assert len(remote) == len(local) > 0
    assert np.allclose(remote, local, atol=2), "the node spoke with the voice the front keeps"


async def test_the_nodes_refusals_reach_the_front(front: dict[str, RemoteEngine]) -> None:
    with pytest.raises(InvalidSynthesisRequestError, match="cannot make a voice") as refused:
        await front["mute"].speaker_from_sample(recording(), RATE, TRANSCRIPT)
    assert refused.value.param == "audio_sample"
    with pytest.raises(InvalidSynthesisRequestError, match=r"must last 1 to 30 s") as refused:
        await front["chattts"].speaker_from_sample(recording(31.0), RATE, TRANSCRIPT)
    assert refused.value.param == "audio_sample"


async def test_the_node_route_needs_the_service_token(node: GatewayProcess) -> None:
    body = {"model": "tones", "transcript": TRANSCRIPT, "sample_rate": RATE, "pcm": ""}
    async with httpx.AsyncClient(base_url=node.base_url) as client:
        answer = await client.post("/v1/engine/speaker_from_sample", json=body)
    assert answer.status_code == 401


async def test_an_upstream_that_is_no_engine_node_refuses_samples(openai_like: OpenAILike) -> None:
    engine = await remote_engine(openai_like.url, "tts-1")
    try:
        assert not engine.info.clones_voices
        with pytest.raises(InvalidSynthesisRequestError, match="not a chattts-gateway engine node") as refused:
            await engine.speaker_from_sample(recording(), RATE, TRANSCRIPT)
        assert refused.value.param == "audio_sample"
        assert openai_like.seen == [], "nothing was sent to it"
    finally:
        await engine.stop()
