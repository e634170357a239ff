"""The official OpenAI SDK, unchanged, against a real gateway: every format, sync and async, streamed and not."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from engines.synthetic import voice_frequency
from tests.audio_decode import DURATION_TOLERANCE_S, SPEECH_FORMATS, SpeechFormat, decode_audio, dominant_frequency
from tests.e2e.conftest import SECONDS_PER_CHAR

if TYPE_CHECKING:
    import openai

    from harness.gateway_process import GatewayProcess

EXPECTED_CODEC = {
    "mp3": "mp3float",
    "opus": "opus",
    "aac": "aac",
    "flac": "flac",
    "wav": "pcm_s16le",
    "pcm": "pcm_s16le",
}
EXPECTED_RATE = {"opus": 48000}

TEXT = "Synthetic speech for every format, " * 3


def expected_seconds(text: str) -> float:
    return len(text.strip()) * SECONDS_PER_CHAR


def check_audio(data: bytes, response_format: SpeechFormat, text: str, voice: str) -> None:
    audio = decode_audio(data, response_format)
    assert audio.codec == EXPECTED_CODEC[response_format]
    assert audio.channels == 1
    assert audio.sample_rate == EXPECTED_RATE.get(response_format, 24000)
    assert audio.duration == pytest.approx(expected_seconds(text), abs=DURATION_TOLERANCE_S)
    assert dominant_frequency(audio) == pytest.approx(voice_frequency(voice), abs=5)


@pytest.mark.parametrize("response_format", SPEECH_FORMATS)
def test_sync_sdk_every_format(client: openai.OpenAI, response_format: SpeechFormat) -> None:
    response = client.audio.speech.create(model="synthetic", voice="coral", input=TEXT, response_format=response_format)
    check_audio(response.content, response_format, TEXT, "coral")


@pytest.mark.parametrize("response_format", SPEECH_FORMATS)
def test_sync_sdk_streaming_every_format(client: openai.OpenAI, response_format: SpeechFormat) -> None:
    with client.audio.speech.with_streaming_response.create(
        model="synthetic",
        voice="onyx",
        input=TEXT,
        response_format=response_format,
    ) as response:
        assert response.headers["transfer-encoding"] == "chunked"
        assert response.headers["x-engine"] == "synthetic"
        data = b"".join(response.iter_bytes())
    check_audio(data, response_format, TEXT, "onyx")


@pytest.mark.parametrize("response_format", SPEECH_FORMATS)
async def test_async_sdk_every_format(async_client: openai.AsyncOpenAI, response_format: SpeechFormat) -> None:
    response = await async_client.audio.speech.create(
        model="synthetic", voice="alloy", input=TEXT, response_format=response_format
    )
    check_audio(response.content, response_format, TEXT, "alloy")


@pytest.mark.parametrize("response_format", SPEECH_FORMATS)
async def test_async_sdk_streaming_every_format(
    async_client: openai.AsyncOpenAI, response_format: SpeechFormat
) -> None:
    async with async_client.audio.speech.with_streaming_response.create(
        model="synthetic",
        voice="verse",
        input=TEXT,
        response_format=response_format,
    ) as response:
        data = b"".join([chunk async for chunk in response.iter_bytes()])
    check_audio(data, response_format, TEXT, "verse")


@pytest.mark.parametrize(
    ("response_format", "content_type"),
    [
        ("mp3", "audio/mpeg"),
        ("opus", "audio/ogg"),
        ("aac", "audio/aac"),
        ("flac", "audio/flac"),
        ("wav", "audio/wav"),
        ("pcm", "audio/pcm"),
    ],
)
def test_content_types(client: openai.OpenAI, response_format: SpeechFormat, content_type: str) -> None:
    response = client.audio.speech.create(model="synthetic", voice="ash", input="hi", response_format=response_format)
    assert response.response.headers["content-type"] == content_type


def test_default_format_is_mp3(client: openai.OpenAI) -> None:
    response = client.audio.speech.create(model="synthetic", voice="ash", input=TEXT)
    assert response.response.headers["content-type"] == "audio/mpeg"
    check_audio(response.content, "mp3", TEXT, "ash")


@pytest.mark.parametrize("model", ["tts-1", "tts-1-hd", "gpt-4o-mini-tts"])
def test_openai_model_names_fall_back_to_espeak_real_speech(client: openai.OpenAI, model: str) -> None:
    response = client.audio.speech.create(
        model=model,
        voice="nova",
        input="Hello from the speech gateway.",
        response_format="wav",
        instructions="Speak cheerfully.",
    )
    assert response.response.headers["x-engine"] == "espeak"  # chattts is not ready here
    audio = decode_audio(response.content, "wav")
    assert audio.sample_rate == 24000  # espeak's 22050 Hz resampled to what the format needs
    assert 1.0 < audio.duration < 5.0
    assert audio.rms > 0.01


@pytest.mark.parametrize("model", ["synthetic", "espeak"])
@pytest.mark.parametrize("speed", [0.5, 2.0])
def test_speed_changes_duration(client: openai.OpenAI, model: str, speed: float) -> None:
    # synthetic has no rate control (the gateway time-stretches); espeak changes its own rate.
    text = "Speed changes how long it takes to say this sentence out loud."

    def seconds(at: float) -> float:
        response = client.audio.speech.create(model=model, voice="echo", input=text, response_format="flac", speed=at)
        return decode_audio(response.content, "flac").duration

    assert seconds(speed) / seconds(1.0) == pytest.approx(1 / speed, rel=0.2)


def test_extreme_speeds_are_stretched_beyond_the_engine(client: openai.OpenAI) -> None:
    def seconds(at: float) -> float:
        response = client.audio.speech.create(
            model="espeak", voice="fable", input=TEXT, response_format="wav", speed=at
        )
        return decode_audio(response.content, "wav").duration

    normal = seconds(1.0)
    assert seconds(0.25) / normal == pytest.approx(4.0, rel=0.25)
    assert seconds(4.0) / normal == pytest.approx(0.25, rel=0.25)


def test_every_voice_of_every_model_is_listed_and_usable(client: openai.OpenAI, gateway: GatewayProcess) -> None:
    import httpx

    listing = httpx.get(f"{gateway.base_url}/v1/audio/voices", params={"model": "espeak"}).json()
    voices = [voice["id"] for voice in listing["data"]]
    assert all(voice["models"] == ["espeak"] and not voice["custom"] for voice in listing["data"])
    assert len(voices) >= 13
    durations = set()
    for voice in voices:
        response = client.audio.speech.create(
            model="espeak", voice=voice, input="Testing voices.", response_format="pcm"
        )
        audio = decode_audio(response.content, "pcm")
        assert audio.rms > 0.01
        durations.add(round(audio.duration, 3))
    assert len(durations) > 3  # distinct voices speak at distinct lengths
