"""The voice stacks' own ElevenLabs clients through two tiers, with authentication on and off (issue #34), and
espeak-ng's word marks across the hop.

Three real processes: an engine node (the synthetic tones and espeak-ng), and two front gateways whose engines are
``kind: openai`` engines on that node: one with a tenant and its API key (authentication on), one without tenants
(authentication off: any key or none). Every client test runs against both fronts: the ``elevenlabs`` SDK (its
dialogue with timestamps too), Pipecat's ``ElevenLabsTTSService`` (WebSocket), ``ElevenLabsHttpTTSService`` and
``ElevenLabsDialogueTTSService`` (the Text-to-Dialogue socket), and LiveKit's ``elevenlabs.TTS`` in an agent session,
each decoding what it got with PyAV (or as raw PCM) and checking its length (``SECONDS_PER_CHAR`` a character) and the
timestamps that came with it. The node's espeak-ng words reach the front's clients as espeak-ng
placed them: within 50 ms of its own word events, after the front's time-stretch and encoder, and after a cache hit at
the front.
"""

from __future__ import annotations

import base64
import json
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import aiohttp
import httpx
import pytest
from elevenlabs import DialogueInput, ElevenLabs
from elevenlabs.types import CharacterAlignmentResponseModel
from websockets.asyncio.client import connect

from auth.keys import generate_api_key, hash_api_key
from engines.timing import word_spans
from harness.gateway_process import GatewayProcess
from tests.audio_decode import decode_audio
from tests.espeak_events import TOLERANCE_S, espeak_events, first_events
from tests.livekit_agent import say_through_an_agent_session
from tests.pipecat_runner import (
    elevenlabs_dialogue_service,
    elevenlabs_socket_service,
    pipecat_elevenlabs,
    run_pipeline,
)
from tests.realtime_client import Session

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


SECONDS_PER_CHAR = 0.02
SERVICE_TOKEN = "svc-" + uuid.uuid4().hex * 2
KEY = generate_api_key()
VOICE = "alloy"
MP3_FRAME_S = 1152 / 44100
"""One mp3 frame at 44.1 kHz: how far past the decoded audio a last character's end may reach (padding)."""


def remote(node: GatewayProcess, model: str) -> dict[str, Any]:
    options = {"endpoints": [f"{node.base_url}/v1"], "model": model, "api_key": SERVICE_TOKEN, "probe_interval_s": 0.2}
    return {"kind": "openai", "options": options}


class Tiers:
    """The engine node and its two fronts."""

    def __init__(self, workdir: Path) -> None:
        for folder in ("node", "keyed", "open"):
            (workdir / folder).mkdir()
        tones = {"kind": "synthetic", "workers": 2, "options": {"seconds_per_char": SECONDS_PER_CHAR}}
        node = {
            "server": {"profile": "engine"},
            "auth": {"service_token": SERVICE_TOKEN},
            "engines": {"tones": tones, "espeak": {"kind": "espeak"}},
        }
        self.node = GatewayProcess(node, workdir / "node")
        front = {
            "engines": {"tones": remote(self.node, "tones"), "espeak": remote(self.node, "espeak")},
            # ElevenLabs' model, and its dialogue models (Pipecat's dialogue default, LiveKit's v3): the node's tones
            "aliases": {name: ["tones"] for name in ("eleven_multilingual_v2", "eleven_v3", "eleven_v4_turbo")},
        }
        keyed = {"auth": {"tenants": [{"name": "acme", "api_key_sha256": [hash_api_key(KEY)]}]}}
        self.fronts = {
            "auth-on": GatewayProcess(front | keyed, workdir / "keyed"),
            "auth-off": GatewayProcess(front, workdir / "open"),
        }

    def start(self) -> None:
        processes = [self.node, *self.fronts.values()]
        with ThreadPoolExecutor(len(processes)) as starting:
            list(starting.map(GatewayProcess.start, processes))
        for front in self.fronts.values():
            for engine in ("tones", "espeak"):
                front.wait_engine(engine, state="ready")

    def stop(self) -> None:
        for process in (*self.fronts.values(), self.node):
            if process.process is not None:
                process.stop()


@pytest.fixture(scope="module")
def tiers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tiers]:
    running = Tiers(tmp_path_factory.mktemp("elevenlabs-two-tiers"))
    try:
        running.start()
        yield running
    finally:
        running.stop()


@pytest.fixture(params=["auth-on", "auth-off"])
def front(request: pytest.FixtureRequest, tiers: Tiers) -> GatewayProcess:
    return tiers.fronts[request.param]


@pytest.fixture
def key(front: GatewayProcess, tiers: Tiers) -> str:
    """The tenant's key on the front with authentication; on the other, any key at all works."""
    return KEY if front is tiers.fronts["auth-on"] else "any-key-at-all"


def sdk(front: GatewayProcess, key: str, http: httpx.Client) -> ElevenLabs:
    return ElevenLabs(api_key=key, base_url=front.base_url, httpx_client=http)


def assert_aligned(alignment: CharacterAlignmentResponseModel | None, text: str, duration: float) -> None:
    """The characters joined are the text; their times never go back; every end lies within the audio."""
    assert alignment is not None
    assert "".join(alignment.characters) == text
    starts, ends = alignment.character_start_times_seconds, alignment.character_end_times_seconds
    assert starts == sorted(starts) and ends == sorted(ends)
    assert all(0 <= start <= end for start, end in zip(starts, ends, strict=True))
    assert ends[-1] <= duration + MP3_FRAME_S


def assert_words_where_espeak_says(starts: list[float], text: str, speed: float = 1.0) -> None:
    """Each word's first character (``starts``: every character's start) starts within 50 ms of espeak-ng's own
    event for it, the time stretched by ``speed``."""
    spans = word_spans(text)
    for index, seconds in first_events(text, espeak_events(text, "nova", 1.0)).items():
        start = starts[spans[index][0]]
        assert abs(start - seconds / speed) <= TOLERANCE_S, (text[slice(*spans[index])], start, seconds / speed)


def streamed(chunks: list[Any]) -> tuple[bytes, CharacterAlignmentResponseModel]:
    """The audio and the characters of ``stream_with_timestamps``, joined as a client joins them."""
    audio, characters, starts, ends = b"", [], [], []
    for chunk in chunks:
        audio += base64.b64decode(chunk.audio_base_64)
        if (alignment := chunk.alignment) is not None:
            characters += alignment.characters
            starts += alignment.character_start_times_seconds
            ends += alignment.character_end_times_seconds
    return audio, CharacterAlignmentResponseModel(
        characters=characters, character_start_times_seconds=starts, character_end_times_seconds=ends
    )


# ----------------------------------------------------------------------------------------------------------------
# the clients


def test_the_sdk_speaks_and_times_through_two_tiers(front: GatewayProcess, key: str) -> None:
    text = "The SDK speaks through two tiers, with every character timed."
    with httpx.Client(timeout=20) as http:
        client = sdk(front, key, http)
        assert VOICE in {voice.voice_id for voice in client.voices.get_all().voices}
        with client.text_to_speech.with_raw_response.convert(
            VOICE, text=text, model_id="eleven_multilingual_v2", output_format="mp3_44100_128"
        ) as response:
            engine, mp3 = response.headers["x-engine"], b"".join(response.data)
        pcm = b"".join(client.text_to_speech.stream(VOICE, text=text, output_format="pcm_24000"))
        whole = client.text_to_speech.convert_with_timestamps(VOICE, text=text, output_format="pcm_16000")
        chunks = list(client.text_to_speech.stream_with_timestamps(VOICE, text=text, output_format="pcm_22050"))

    assert engine == "tones"
    seconds = len(text) * SECONDS_PER_CHAR
    assert decode_audio(mp3, "mp3").duration == pytest.approx(seconds, abs=0.1)
    assert len(pcm) / 2 / 24000 == pytest.approx(seconds, abs=0.03)
    duration = len(base64.b64decode(whole.audio_base_64)) / 2 / 16000
    assert duration == pytest.approx(seconds, abs=0.03)
    assert_aligned(whole.alignment, text, duration)
    audio, alignment = streamed(chunks)
    assert len(audio) / 2 / 22050 == pytest.approx(seconds, abs=0.03)
    assert_aligned(alignment, text, len(audio) / 2 / 22050)


def assert_pipecat_spoke(down: list[Any], frames: Any, text: str) -> None:
    """Its audio as long as the text; its word frames the text, their times in order within the audio."""
    audio = b"".join(f.audio for f in down if isinstance(f, frames.TTSAudioRawFrame))
    seconds = len(audio) / 2 / 24000
    assert seconds == pytest.approx(len(text) * SECONDS_PER_CHAR, abs=0.15)
    words = [f for f in down if isinstance(f, frames.TTSTextFrame)]
    assert " ".join(f.text for f in words) == text
    times = [(f.pts - words[0].pts) / 1e9 for f in words]
    assert times == sorted(times) and times[-1] < seconds
    assert not any(isinstance(f, frames.ErrorFrame) for f in down)


async def test_pipecats_websocket_service_through_two_tiers(front: GatewayProcess, key: str) -> None:
    frames, _, utils = pipecat_elevenlabs()
    text = "Hello from Pipecat. It speaks through two tiers."
    tts = elevenlabs_socket_service(front.base_url, key, VOICE)
    down = await run_pipeline(tts, [frames.TTSSpeakFrame(text), utils.SleepFrame(2)])
    assert_pipecat_spoke(down, frames, text)
    assert any(isinstance(f, frames.TTSStoppedFrame) for f in down)


async def test_pipecats_http_service_through_two_tiers(front: GatewayProcess, key: str) -> None:
    frames, elevenlabs, utils = pipecat_elevenlabs()
    text = "Hello from Pipecat. It speaks through two tiers."
    async with aiohttp.ClientSession() as session:
        tts = elevenlabs.ElevenLabsHttpTTSService(
            api_key=key,
            aiohttp_session=session,
            base_url=front.base_url,
            settings=elevenlabs.ElevenLabsHttpTTSService.Settings(voice=VOICE, model="eleven_multilingual_v2"),
            sample_rate=24000,
        )
        down = await run_pipeline(tts, [frames.TTSSpeakFrame(text), utils.SleepFrame(1)])
    assert_pipecat_spoke(down, frames, text)


async def test_pipecats_dialogue_service_through_two_tiers(front: GatewayProcess, key: str) -> None:
    """Pipecat's ``ElevenLabsDialogueTTSService`` (``/v1/text-to-dialogue/multi-stream-input``, its default model
    ``eleven_v4_turbo``): the same audio and word frames as its text-to-speech service through the hop."""
    frames, _, utils = pipecat_elevenlabs()
    text = "Hello from Pipecat. Its dialogue speaks through two tiers."
    tts = elevenlabs_dialogue_service(front.base_url, key, VOICE)
    down = await run_pipeline(tts, [frames.TTSSpeakFrame(text), utils.SleepFrame(2)])
    assert_pipecat_spoke(down, frames, text)
    assert any(isinstance(f, frames.TTSStoppedFrame) for f in down)


def test_the_sdks_dialogue_with_timestamps_through_two_tiers(front: GatewayProcess, key: str) -> None:
    premade = "JBFqnCBsd6RMkjVDRZzb"  # ElevenLabs' George, as the SDKs' READMEs send it: a built-in voice here
    turns = [DialogueInput(text="Good morning, everyone.", voice_id=VOICE), DialogueInput(text="Hi!", voice_id=premade)]
    with httpx.Client(timeout=20) as http:
        whole = sdk(front, key, http).text_to_dialogue.convert_with_timestamps(
            inputs=turns, model_id="eleven_v3", output_format="pcm_24000"
        )
    seconds = len(base64.b64decode(whole.audio_base_64)) / 2 / 24000
    text = "Good morning, everyone. Hi!"
    assert seconds == pytest.approx(len(text) * SECONDS_PER_CHAR, abs=0.1)
    assert whole.alignment is not None
    assert "".join(whole.alignment.characters) == text
    assert [(s.dialogue_input_index, s.voice_id) for s in whole.voice_segments] == [(0, VOICE), (1, premade)]
    assert whole.voice_segments[-1].end_time_seconds <= seconds + 0.01


def test_the_subscription_answers_through_two_tiers(front: GatewayProcess, key: str) -> None:
    """What ElevenLabs' apps ask at start, answered by the front (the node knows no tenants)."""
    with httpx.Client(timeout=20) as http:
        subscription = sdk(front, key, http).user.subscription.get()
    assert subscription.status == "active"
    assert subscription.character_limit > 0 and subscription.character_count >= 0


async def test_a_livekit_agent_session_through_two_tiers(front: GatewayProcess, key: str) -> None:
    """LiveKit Agents' ``AgentSession`` with ``elevenlabs.TTS(base_url=…)`` (its ``multi-stream-input`` WebSocket),
    its audio and transcript outputs the test's own sinks (no LiveKit server is reachable here), the transcript
    aligned to the audio by the gateway's timestamps."""
    text = "Hello from a LiveKit agent. It speaks through two tiers."
    frames, words = await say_through_an_agent_session(front.base_url, key, VOICE, text, "mp3_44100_128")
    assert {frame.sample_rate for frame in frames} == {44100}  # MP3, decoded by LiveKit with PyAV
    seconds = sum(frame.duration for frame in frames)
    assert seconds == pytest.approx(len(text) * SECONDS_PER_CHAR, abs=0.2)  # each sentence's MP3 has its padding
    assert "".join(str(word) for word in words).split() == text.split()
    starts = [word.start_time for word in words]
    assert all(0 <= start < seconds for start in starts)


# ----------------------------------------------------------------------------------------------------------------
# espeak-ng's words across the hop

ESPEAK_TEXT = "Exact words cross the hop. The front reports where espeak placed them."


def test_espeak_words_cross_the_hop_exactly_and_stay_after_a_cache_hit(tiers: Tiers) -> None:
    """ElevenLabs' REST stream with timestamps from the front: espeak-ng's words, placed on the node, within 50 ms of
    espeak-ng's own events, in MP3; the same request again is the front's cache hit, with the same times."""
    front = tiers.fronts["auth-on"]
    timed: dict[str, Any] = {"text": ESPEAK_TEXT, "model_id": "espeak", "output_format": "mp3_44100_64"}
    with httpx.Client(timeout=20) as http:
        client = sdk(front, KEY, http)
        chunks = list(client.text_to_speech.stream_with_timestamps("nova", **timed))
        response = client.text_to_speech.with_raw_response.convert_with_timestamps("nova", **timed)
    audio, alignment = streamed(chunks)
    duration = decode_audio(audio, "mp3").duration
    assert_aligned(alignment, ESPEAK_TEXT, duration)
    assert_words_where_espeak_says(alignment.character_start_times_seconds, ESPEAK_TEXT)
    assert response.headers["x-cache"] == "hit"
    assert response.data.alignment == alignment


@pytest.mark.parametrize("speed", [1.0, 1.25])
def test_the_fronts_timestamps_event_says_exact_after_its_time_stretch(tiers: Tiers, speed: float) -> None:
    """OpenAI's SSE from the front with its ``speech.audio.timestamps`` extension: ``kind`` ``exact``, the words
    where espeak-ng placed them over ``speed`` (the front stretches the node's speed-1 audio), miss and hit alike."""
    body = {"model": "espeak", "input": ESPEAK_TEXT, "voice": "nova", "response_format": "pcm", "speed": speed}
    body |= {"stream_format": "sse", "word_timestamps": True}
    answers = []
    with httpx.Client(base_url=tiers.fronts["auth-off"].base_url, timeout=20) as http:
        for _ in range(2):
            with http.stream("POST", "/v1/audio/speech", json=body) as response:
                assert response.status_code == 200
                events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
            answers.append((response.headers["x-cache"], events))
    assert [cache for cache, _ in answers] == ["miss", "hit"]
    for _, events in answers:
        timestamps = [event for event in events if event["type"] == "speech.audio.timestamps"]
        assert {event["kind"] for event in timestamps} == {"exact"}
        words = [word for event in timestamps for word in event["words"]]
        assert [(w["char_start"], w["char_end"]) for w in words] == word_spans(ESPEAK_TEXT)
        starts = [0.0] * len(ESPEAK_TEXT)
        for word in words:
            starts[word["char_start"]] = word["start"]
        assert_words_where_espeak_says(starts, ESPEAK_TEXT, speed)
        pcm = b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta")
        assert all(word["end"] <= len(pcm) / 2 / 24000 + 0.001 for word in words)


def cache_hits(front: GatewayProcess) -> float:
    """The front's audio cache hits so far."""
    lines = httpx.get(f"{front.base_url}/metrics", timeout=5).text.splitlines()
    hits = [line for line in lines if line.startswith("tts_cache_requests_total{") and 'result="hit"' in line]
    return sum(float(line.split()[-1]) for line in hits)


async def realtime_words(front: GatewayProcess, text: str) -> list[tuple[str, list[dict[str, Any]], int]]:
    """Our realtime WebSocket with word events: each segment's text, its words and its audio's 20 ms frames."""
    async with connect(front.base_url.replace("http://", "ws://") + "/v1/audio/speech/stream") as socket:
        session = Session(socket)
        await session.send(type="session.update", session={"model": "espeak", "voice": "nova", "word_timestamps": True})
        await session.next("session.updated")
        await session.send(type="input.append", text=text)
        await session.send(type="session.close")
        await session.until_closed()
    words = session.of("audio.words")
    return [
        (done["text"], [w for e in words if e["segment_id"] == done["segment_id"] for w in e["words"]],
         done["usage"]["output_tokens"])
        for done in session.of("audio.done")
    ]  # fmt: skip


async def stream_input_alignment(front: GatewayProcess, text: str) -> tuple[bytes, list[dict[str, Any]]]:
    """ElevenLabs' ``stream-input`` WebSocket: the audio, and each message's alignment."""
    base = front.base_url.replace("http://", "ws://")
    url = f"{base}/v1/text-to-speech/nova/stream-input?model_id=espeak&output_format=pcm_24000"
    messages: list[dict[str, Any]] = []
    async with connect(url) as socket:
        for part in (" ", text, ""):
            await socket.send(json.dumps({"text": part}))
        messages += [json.loads(message) async for message in socket]  # until the server closes the socket
    audio = b"".join(base64.b64decode(m["audio"]) for m in messages if m.get("audio"))
    return audio, [m["alignment"] for m in messages if m.get("alignment")]


async def test_the_websockets_keep_espeaks_words_after_a_cache_hit_at_the_front(tiers: Tiers) -> None:
    """Our realtime WebSocket's ``audio.words``, spoken twice: the second time from the front's cache (each sentence a
    segment, each a hit), with the same words, still where espeak-ng placed them; then ElevenLabs' ``stream-input``,
    its segments the same cache entries, with every character aligned."""
    front = tiers.fronts["auth-off"]
    text = "A socket hears the words. The cache keeps them."
    before = cache_hits(front)
    first = await realtime_words(front, text)
    again = await realtime_words(front, text)
    assert cache_hits(front) - before == len(first) == 2
    assert again == first
    for spoken, words, frames in first:
        assert [w["text"] for w in words] == [spoken[a:b] for a, b in word_spans(spoken)]
        starts = [0.0] * len(spoken)
        for word, (char, _) in zip(words, word_spans(spoken), strict=True):
            starts[char] = word["start_ms"] / 1000
        assert_words_where_espeak_says(starts, spoken)
        assert all(w["start_ms"] <= w["end_ms"] <= frames * 20 + 20 for w in words)
    audio, alignment = await stream_input_alignment(front, text)
    audio_again, alignment_again = await stream_input_alignment(front, text)
    assert cache_hits(front) - before == 6  # the same sentences in the same PCM: stream-input is answered by the cache
    assert audio_again == audio and alignment_again == alignment
    assert "".join(c for a in alignment for c in a["chars"]) == "A socket hears the words. The cache keeps them. "
