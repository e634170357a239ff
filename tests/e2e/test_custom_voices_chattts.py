"""A custom voice from a recording on ChatTTS, end to end: a real gateway whose ``chattts`` engine loads the project's
tiny random-weight assets, so the speaker prompt is the real DVAE's output; the official OpenAI SDK; espeak's speech
as the recordings (made with PyAV into mp3 and wav, as a caller would upload them)."""

from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING, Any

import httpx
import openai
import pytest
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
