"""Reproducible speech and telephone-ready audio (issue #50): ``seed`` and ``sample_rate`` on the speech request, G.711
response formats, with ChatTTS on tiny random-weight assets, the cache off (every answer is synthesized), driven by
the real OpenAI and ElevenLabs SDKs, and across the hop to an engine node (a front gateway whose ``far`` engine is the
node's ChatTTS)."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import math
import wave
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import httpx
import openai
import pytest
from elevenlabs import ElevenLabs
from websockets.asyncio.client import connect

from harness.gateway_process import GatewayProcess
from tests.audio_decode import decode_g711
from tests.chattts_assets import TEST_TOKENS, chattts_engine_options
from tests.realtime_client import Session

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

# Two ChatTTS processes start with the module (each imports torch and ChatTTS: 3.5 s alone, minutes on a busy
# machine): more than the suite's 120 s a test for the first one.
pytestmark = pytest.mark.timeout(900)

SERVICE_TOKEN = "svc-" + "0123456789abcdef" * 3
TEXT = "Say it again."
SEGMENT_SAMPLES = TEST_TOKENS * 512 - 256  # one sentence: exactly TEST_TOKENS tokens of ChatTTS here


def chattts() -> dict[str, Any]:
    return {"kind": "chattts", "workers": 1, "start_timeout_s": 120, "options": chattts_engine_options()}


class Tiers:
    """An engine node with ChatTTS, and a front with ChatTTS of its own and the node's as ``far``."""

    def __init__(self, workdir: Path) -> None:
        (workdir / "node").mkdir()
        node = {"server": {"profile": "engine"}, "auth": {"service_token": SERVICE_TOKEN},
                "cache": {"enabled": False}, "engines": {"chattts": chattts()}}  # fmt: skip
        self.node = GatewayProcess(node, workdir / "node")
        far = {"kind": "openai", "options": {"endpoints": [f"{self.node.base_url}/v1"], "model": "chattts",
                                             "api_key": SERVICE_TOKEN, "probe_interval_s": 0.2}}  # fmt: skip
        front = {"cache": {"enabled": False}, "engines": {"chattts": chattts(), "far": far}}
        self.front = GatewayProcess(front, workdir)

    def start(self) -> None:
        with ThreadPoolExecutor(2) as starting:
            list(starting.map(lambda process: process.start(timeout_s=300), [self.node, self.front]))
        self.front.wait_engine("far", timeout_s=60, state="ready")

    def stop(self) -> None:
        for process in (self.front, self.node):
            if process.process is not None:
                process.stop()


@pytest.fixture(scope="module")
def tiers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tiers]:
    running = Tiers(tmp_path_factory.mktemp("seed-rate"))
    try:
        running.start()
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def front(tiers: Tiers) -> GatewayProcess:
    return tiers.front


@pytest.fixture(scope="module")
def client(front: GatewayProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{front.base_url}/v1", api_key="anything", max_retries=0) as sdk:
        yield sdk


def speak(client: openai.OpenAI, model: str = "chattts", response_format: Any = "pcm", **extensions: Any) -> bytes:
    """What OpenAI's SDK gets, the gateway's extensions sent as the SDK sends any (``extra_body``)."""
    response = client.audio.speech.create(
        model=model, voice="alloy", input=TEXT, response_format=response_format, extra_body=extensions
    )
    return response.content


def test_the_same_seed_gives_the_same_pcm_and_another_seed_other_pcm(client: openai.OpenAI) -> None:
    first, again, other = speak(client, seed=7), speak(client, seed=7), speak(client, seed=8)

    assert len(first) == 2 * SEGMENT_SAMPLES
    assert first == again
    assert other != first


def test_elevenlabs_honours_the_seed_as_openais_route_does(front: GatewayProcess, client: openai.OpenAI) -> None:
    with httpx.Client(timeout=60) as http:
        eleven = ElevenLabs(api_key="anything", base_url=front.base_url, httpx_client=http)

        def convert(seed: int) -> bytes:
            chunks = eleven.text_to_speech.convert(
                "alloy", text=TEXT, model_id="chattts", output_format="pcm_24000", seed=seed,
                request_options={"max_retries": 0},
            )  # fmt: skip
            return b"".join(chunks)

        first, again, other = convert(7), convert(7), convert(8)

    assert first == again == speak(client, seed=7)  # one request, one seed: the same audio on either API
    assert other != first


def test_the_seed_crosses_the_hop_to_an_engine_node(client: openai.OpenAI) -> None:
    far = speak(client, model="far", seed=7)

    assert far == speak(client, model="far", seed=7)
    assert far == speak(client, model="chattts", seed=7)  # the node's ChatTTS: same weights, same seed, same audio
    assert speak(client, model="far", seed=8) != far


def test_pcm_at_8000_hz_is_a_third_of_24000_hz_for_the_same_seed(client: openai.OpenAI) -> None:
    at_24000, at_8000 = speak(client, seed=7), speak(client, seed=7, sample_rate=8000)

    assert len(at_8000) // 2 == math.ceil(len(at_24000) / 2 / 3)  # a third of the samples (a part of one counts)
    assert speak(client, seed=7, sample_rate=24000) == at_24000  # the format's own rate, asked for or not


def test_a_wav_at_16000_hz_declares_it_and_lasts_as_long(client: openai.OpenAI) -> None:
    with wave.open(io.BytesIO(speak(client, response_format="wav", seed=7, sample_rate=16000))) as wav:
        assert (wav.getframerate(), wav.getnchannels(), wav.getsampwidth()) == (16000, 1, 2)
        frames = len(wav.readframes(-1)) // 2  # the streamed header's sizes say "unknown": read to the end
    assert frames == math.ceil(SEGMENT_SAMPLES / 24000 * 16000)


@pytest.mark.parametrize("law", ["pcmu", "pcma"])
def test_g711_is_8000_hz_one_byte_a_sample(front: GatewayProcess, law: str) -> None:
    body = {"model": "chattts", "voice": "alloy", "input": TEXT, "response_format": law, "seed": 7}
    response = httpx.post(f"{front.base_url}/v1/audio/speech", json=body, timeout=60)

    assert response.status_code == 200
    assert response.headers["content-type"] == f"audio/{law}"
    assert len(response.content) == math.ceil(SEGMENT_SAMPLES / 3)
    assert decode_g711(response.content, "pcmu" if law == "pcmu" else "pcma").rms > 0.001


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"sample_rate": 12345}, "sample_rate"),
        ({"response_format": "opus", "sample_rate": 24000}, "sample_rate"),
        ({"response_format": "pcmu", "sample_rate": 16000}, "sample_rate"),
        ({"seed": -1}, "seed"),
        ({"seed": 2**32}, "seed"),
        ({"seed": 1.5}, "seed"),
    ],
    ids=str,
)
def test_a_rate_or_seed_out_of_bounds_is_a_400_naming_it(
    client: openai.OpenAI, fields: dict[str, Any], param: str
) -> None:
    extensions = {name: value for name, value in fields.items() if name != "response_format"}
    with pytest.raises(openai.BadRequestError) as refused:
        speak(client, response_format=fields.get("response_format", "pcm"), **extensions)

    assert refused.value.param == param


# ----------------------------------------------------------------- sockets: a session's seed seeds every segment
def ws(front: GatewayProcess, path: str) -> str:
    return front.base_url.replace("http://", "ws://") + path


async def our_socket(front: GatewayProcess, seed: int) -> bytes:
    """``/v1/audio/speech/stream`` with the seed in ``session.update``."""
    async with connect(ws(front, "/v1/audio/speech/stream")) as socket:
        session = Session(socket)
        await session.next("session.created")
        await session.send(type="session.update", session={"model": "chattts", "seed": seed})
        await session.next("session.updated")
        await session.send(type="input.append", text=TEXT)
        await session.send(type="input.flush")
        await session.next("audio.done", timeout_s=120)
    return session.audio()


async def elevenlabs_socket(front: GatewayProcess, seed: int) -> bytes:
    """ElevenLabs' single-context socket, the seed in its URL as ElevenLabs takes it."""
    query = f"?model_id=chattts&output_format=pcm_24000&seed={seed}"
    audio = b""
    async with connect(ws(front, f"/v1/text-to-speech/alloy/stream-input{query}")) as socket:
        for message in ({"text": " "}, {"text": TEXT + " ", "flush": True}, {"text": ""}):
            await socket.send(json.dumps(message))
        async with asyncio.timeout(120):
            while not (answer := json.loads(await socket.recv())).get("isFinal"):
                audio += base64.b64decode(answer.get("audio") or "")
    return audio


async def openai_realtime(front: GatewayProcess, seed: int) -> bytes:
    """OpenAI's Realtime API, the seed an extension field of the session."""
    audio = b""
    async with connect(ws(front, "/v1/realtime?model=chattts")) as socket:
        session = {"type": "realtime", "seed": seed}
        message = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": TEXT}]}
        await socket.send(json.dumps({"type": "session.update", "session": session}))
        await socket.send(
            json.dumps({"type": "response.create", "response": {"conversation": "none", "input": [message]}})
        )
        async with asyncio.timeout(120):
            while (event := json.loads(await socket.recv()))["type"] != "response.done":
                assert event["type"] != "error", event
                if event["type"] == "response.output_audio.delta":
                    audio += base64.b64decode(event["delta"])
    return audio


@pytest.mark.parametrize("dialect", [our_socket, elevenlabs_socket, openai_realtime], ids=lambda d: d.__name__)
async def test_a_sessions_seed_gives_the_http_routes_audio(
    front: GatewayProcess, client: openai.OpenAI, dialect: Any
) -> None:
    first, again, other = [await dialect(front, seed) for seed in (7, 7, 8)]

    assert first == again == await asyncio.to_thread(speak, client, seed=7)
    assert other != first
