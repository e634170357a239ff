"""A custom voice from a recording on ChatTTS, end to end: a real gateway whose ``chattts`` engine loads the project's
tiny random-weight assets, so the speaker prompt is the real DVAE's output; the official OpenAI SDK; espeak's speech
as the recordings (made with PyAV into mp3 and wav, as a caller would upload them). Then voices from a speaker string
or a seed (the gateway's JSON form), written by ChatTTS's own encoder: checked against the engine when made."""

from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np
import openai
import pytest
import torch
from ChatTTS.model.speaker import Speaker
from openai.types.audio.voice import Voice
from websockets.sync.client import connect

from harness.gateway_process import GatewayProcess
from harness.recordings import recording, speech
from tests.audio_decode import SPEECH_FORMATS, decode_audio
from tests.chattts_assets import TEST_TOKENS, chattts_engine_options

if TYPE_CHECKING:
    from collections.abc import Iterator

SEGMENT_S = (TEST_TOKENS * 512 - 256) / 24000  # one sentence is exactly TEST_TOKENS tokens here
CONSENT_PHRASE = "I am the owner of this voice and I consent to its use for synthetic speech."
SAMPLE_TEXT = "The quick brown fox jumps over the lazy dog, again and again, all day long."
TINY_DIM = 32  # the tiny preset's speaker embedding: its hidden size (engines/chattts/assets.py)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    chattts = {"kind": "chattts", "workers": 1, "start_timeout_s": 120, "options": chattts_engine_options()}
    config: dict[str, Any] = {"engines": {"chattts": chattts, "espeak": {"kind": "espeak"}}, "aliases": {}}
    process = GatewayProcess(config, tmp_path_factory.mktemp("chattts-voices")).start(timeout_s=90)
    yield process
    process.stop()


@pytest.fixture(scope="module")
def client(gateway: GatewayProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key="anything", max_retries=0, timeout=60) as sdk:
        yield sdk


@pytest.fixture(scope="module")
def consent(client: openai.OpenAI) -> str:
    pcm, rate = speech(CONSENT_PHRASE)
    recorded = ("consent.mp3", recording("mp3", pcm, rate), "audio/mpeg")
    return client.audio.voice_consents.create(name="Ada", language="en-US", recording=recorded).id


def sample() -> tuple[str, bytes, str]:
    pcm, rate = speech(SAMPLE_TEXT)
    return "sample.wav", recording("wav", pcm, rate), "audio/wav"


def test_a_chattts_voice_from_a_sample_speaks_everywhere_until_deleted(
    client: openai.OpenAI, consent: str, gateway: GatewayProcess
) -> None:
    voice = client.audio.voices.create(
        name="ada", audio_sample=sample(), consent=consent, extra_body={"transcript": SAMPLE_TEXT, "model": "chattts"}
    )
    assert (voice.object, voice.type, voice.name) == ("audio.voice", "audio_sample", "ada")
    text = "Hello from a cloned voice."
    for fmt in SPEECH_FORMATS:
        spoken = client.audio.speech.create(model="chattts", voice={"id": voice.id}, input=text, response_format=fmt)
        audio = decode_audio(spoken.read(), fmt)
        assert audio.duration == pytest.approx(SEGMENT_S, abs=0.1), fmt
        assert audio.rms > 0.001, fmt
    builtin = client.audio.speech.create(model="chattts", voice="alloy", input=text, response_format="pcm").read()
    assert builtin != client.audio.speech.create(model="chattts", voice="ada", input=text, response_format="pcm").read()

    with httpx.stream(
        "POST",
        f"{gateway.base_url}/v1/audio/speech",
        json={
            "model": "chattts",
            "voice": {"id": voice.id},
            "input": text,
            "response_format": "pcm",
            "stream_format": "sse",
        },
        timeout=60,
    ) as response:
        assert response.status_code == 200
        events = [json.loads(line[5:]) for line in response.iter_lines() if line.startswith("data:")]
    pcm = b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta")
    assert decode_audio(pcm, "pcm").duration == pytest.approx(SEGMENT_S, abs=0.05)

    url = gateway.base_url.replace("http://", "ws://") + "/v1/audio/speech/stream"
    live = b""
    with connect(url) as socket:
        session = {"model": "chattts", "voice": {"id": voice.id}, "response_format": "pcm"}
        for event in (
            {"type": "session.update", "session": session},
            {"type": "input.append", "text": text},
            {"type": "session.close"},
        ):
            socket.send(json.dumps(event))
        for message in socket:
            event = json.loads(message)
            assert event["type"] != "error", event
            if event["type"] == "audio.delta":
                live += base64.b64decode(event["audio"])
    assert decode_audio(live, "pcm").duration == pytest.approx(SEGMENT_S, abs=0.4)  # a segment's end adds silence

    assert client.audio.voices.delete(voice.id).deleted
    with pytest.raises(openai.NotFoundError):
        client.audio.speech.create(model="chattts", voice={"id": voice.id}, input=text)


def test_a_chattts_sample_without_its_transcript_is_refused_naming_it(client: openai.OpenAI, consent: str) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.audio.voices.create(name="mute", audio_sample=sample(), consent=consent, extra_body={"model": "chattts"})
    error = refused.value.response.json()["error"]
    assert (error["param"], error["type"]) == ("transcript", "invalid_request_error")
    assert "transcript" in error["message"]


def test_espeak_cannot_clone_beside_chattts(client: openai.OpenAI, consent: str) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.audio.voices.create(
            name="robot",
            audio_sample=sample(),
            consent=consent,
            extra_body={"transcript": SAMPLE_TEXT, "model": "espeak"},
        )
    assert refused.value.response.json()["error"]["code"] == "voice_cloning_unsupported"


def test_the_measured_batch_size_is_shown_with_the_model(client: openai.OpenAI, gateway: GatewayProcess) -> None:
    # max_batch: auto (the default here) times the decode step at load; the choice, logged and in /readyz's details
    # ("8 (auto; step at 1: ...)"), is in the model list too, for callers sizing their concurrency.
    detail = gateway.engine("chattts")["details"]["max_batch"]
    chosen, how = detail.split(" ", 1)
    assert how.startswith("(auto; step at 1: ")
    model = client.models.retrieve("chattts")
    assert model.model_extra == {"engine": {"name": "chattts", "max_batch": int(chosen)}}
    assert int(chosen) in (1, 2, 4, 8, 16)
    listed = {entry.id: entry.model_extra for entry in client.models.list()}
    assert listed["chattts"] == model.model_extra


# ------------------------------------------------------------------ voices from a speaker string or a seed
def spk_emb(values: list[float]) -> str:
    """A speaker embedding as ChatTTS writes one (``Chat.sample_random_speaker``)."""
    encoded: str = Speaker._encode(torch.tensor(values, dtype=torch.float16))
    return encoded


def json_voice(client: openai.OpenAI, **body: Any) -> Voice:
    """The gateway's JSON form of ``POST /v1/audio/voices`` (the SDK's ``create`` sends OpenAI's form), sent through
    the SDK's own request path, so that its errors are the SDK's."""
    return client.post("/audio/voices", body=body, cast_to=Voice)


BAD_VOICES = {
    "garbage": ({"model": "chattts", "speaker": "not a speaker"}, "speaker", "not a valid spk_emb string"),
    "published-size": (
        {"model": "chattts", "speaker": spk_emb([0.5] * 768)},
        "speaker",
        "has 768 values; these weights need 32",
    ),
    "nan": ({"model": "chattts", "speaker": spk_emb([float("nan")] * TINY_DIM)}, "speaker", "not finite"),
    "cut-short": ({"model": "chattts", "speaker": spk_emb([0.5] * TINY_DIM)[:-2]}, "speaker", "cut short"),
    "seed-word": ({"model": "chattts", "speaker": "seed:seven"}, "speaker", "integer"),
    "espeak-seed": ({"model": "espeak", "seed": 7}, "model", "espeak-ng takes no custom voices"),
    "espeak-speaker": ({"model": "espeak", "speaker": spk_emb([0.5] * TINY_DIM)}, "model", "no custom voices"),
}


@pytest.mark.parametrize(("body", "param", "message"), BAD_VOICES.values(), ids=BAD_VOICES.keys())
def test_a_voice_its_engine_could_never_speak_is_refused_when_made(
    client: openai.OpenAI, gateway: GatewayProcess, body: dict[str, Any], param: str, message: str
) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        json_voice(client, name="unspeakable", **body)
    assert refused.value.status_code == 400
    error = refused.value.response.json()["error"]
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", param, "invalid_value")
    assert message in error["message"]
    listed = httpx.get(f"{gateway.base_url}/v1/audio/voices", timeout=10).json()["data"]
    assert "unspeakable" not in [voice["name"] for voice in listed]


@pytest.mark.parametrize(
    "source",
    [{"speaker": spk_emb(np.random.default_rng(3).normal(0.0, 1.0, TINY_DIM).tolist())}, {"seed": 7}],
    ids=["spk_emb", "seed"],
)
def test_a_chattts_voice_from_a_speaker_or_a_seed_is_made_and_speaks(
    client: openai.OpenAI, source: dict[str, Any]
) -> None:
    voice = json_voice(client, name=f"own-{next(iter(source))}", model="chattts", **source)
    assert (voice.object, voice.type) == ("audio.voice", next(iter(source)))
    text = "Hello from a voice of my own."
    for fmt in ("wav", "mp3"):  # soundfile and PyAV decode them
        spoken = client.audio.speech.create(model="chattts", voice={"id": voice.id}, input=text, response_format=fmt)
        audio = decode_audio(spoken.read(), fmt)
        assert audio.duration == pytest.approx(SEGMENT_S, abs=0.1), fmt
        assert audio.rms > 0.001, fmt
