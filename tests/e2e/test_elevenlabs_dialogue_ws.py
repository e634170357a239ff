"""ElevenLabs' Text-to-Dialogue WebSockets (``/v1/text-to-dialogue/multi-stream-input`` and ``…/stream-input``), end
to end against the embedded espeak: a ``websockets`` client sending the SDK's messages, and the voice stacks' own
clients unchanged but for their base URL: Pipecat's ``ElevenLabsDialogueTTSService`` (its default ``eleven_v4_turbo``)
and LiveKit's ``elevenlabs.TTS`` with ``eleven_v3`` (``synthesize()`` posts ``/v1/text-to-dialogue/stream``)."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
from typing import TYPE_CHECKING, Any

import aiohttp
import httpx
import pytest
from elevenlabs import AsyncElevenLabs
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from auth.keys import generate_api_key, hash_api_key
from harness.gateway_process import GatewayProcess
from tests.pipecat_runner import elevenlabs_dialogue_service, pipecat_elevenlabs, run_pipeline

if TYPE_CHECKING:
    from collections.abc import Iterator

KEY = generate_api_key()
HOST, GUEST = "alloy", "ash"
RATE = 24000
LONG_TEXT = "This turn is long enough to be cut short: it goes on and on, sentence after sentence. " * 3


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    config = {
        "auth": {"tenants": [{"name": "acme", "api_key_sha256": [hash_api_key(KEY)]}]},
        "engines": {"espeak": {"kind": "espeak"}},
        "aliases": {name: ["espeak"] for name in ("eleven_v3", "eleven_v4_turbo", "eleven_multilingual_v2")},
    }
    with GatewayProcess(config, tmp_path_factory.mktemp("elevenlabs-dialogue-ws")) as process:
        yield process


OWED_SLACK_S = 0.25  # more than one streamed message's audio (100 ms chunks)


def ws_base(gateway: GatewayProcess) -> str:
    return gateway.base_url.replace("http://", "ws://")


def connect_to(gateway: GatewayProcess, path: str = "multi-stream-input", query: str = "") -> connect:
    target = f"{ws_base(gateway)}/v1/text-to-dialogue/{path}?model_id=eleven_v3&output_format=pcm_24000{query}"
    return connect(target, additional_headers={"xi-api-key": KEY}, max_size=None)


async def send(socket: ClientConnection, **message: Any) -> None:
    await socket.send(json.dumps(message))


async def until_final(socket: ClientConnection, context_id: str, timeout_s: float = 30.0) -> list[dict[str, Any]]:
    received: list[dict[str, Any]] = []
    async with asyncio.timeout(timeout_s):
        while True:
            received.append(json.loads(await socket.recv()))
            if received[-1].get("is_final") is True and received[-1].get("context_id") == context_id:
                return received


def audio_messages(received: list[dict[str, Any]], context_id: str | None) -> list[dict[str, Any]]:
    return [m for m in received if "audio" in m and m.get("context_id") == context_id]


def assert_alignment_spans_the_audio(messages: list[dict[str, Any]]) -> None:
    """Each alignment restarts at zero, counted from the end of the one before (Pipecat adds each alignment's end to
    its clock), and ends within its message's audio: on that clock the characters go forward and stay within the
    audio; LiveKit's clock (the audio's bytes before the message) is never behind it."""
    heard_ms = clock_ms = 0.0
    heard: list[float] = []
    for message in messages:
        alignment = message["alignment"]
        before_ms, heard_ms = heard_ms, heard_ms + len(base64.b64decode(message["audio"])) / 2 / RATE * 1000
        if alignment is None:
            continue
        starts, durations = alignment["char_start_times_ms"], alignment["char_durations_ms"]
        assert min(durations) >= 0 and clock_ms <= before_ms + 1
        heard += [clock_ms + start for start in starts]
        clock_ms += starts[-1] + durations[-1]
        assert clock_ms <= heard_ms + 1
    assert heard == sorted(heard) and heard[-1] < heard_ms


async def test_a_dialogue_in_two_voices_is_spoken_with_its_alignment(gateway: GatewayProcess) -> None:
    lines = [(HOST, "Welcome to the show. "), (GUEST, "Thanks for having me. "), (HOST, "Let us begin.")]
    async with connect_to(gateway) as socket:
        await send(socket, context_id="talk", voices=[HOST, GUEST], voice_settings={"stability": 0.5})
        for voice, text in lines:
            await send(socket, context_id="talk", inputs=[{"text": text, "voice_id": voice, "new_turn": True}])
        await send(socket, context_id="talk", flush=True)
        await send(socket, context_id="talk", close_context=True)
        received = await until_final(socket, "talk")
    messages = audio_messages(received, "talk")
    audio = b"".join(base64.b64decode(m["audio"]) for m in messages)
    assert len(audio) / 2 / RATE > 1.5
    chars = "".join("".join(m["alignment"]["chars"]) for m in messages if m["alignment"])
    assert chars.split() == "".join(text for _, text in lines).split()
    assert_alignment_spans_the_audio(messages)
    turns = [m for m in received if m.get("is_final_audio_for_turn") is True]
    assert len(turns) == 3 and all(m["context_id"] == "talk" for m in turns)  # a piece per voice's line


async def test_bad_messages_name_their_context_and_the_session_goes_on(gateway: GatewayProcess) -> None:
    async with connect_to(gateway) as socket:
        await send(socket, context_id="ghost", inputs=[{"text": "Hello.", "voice_id": HOST}])
        unregistered = json.loads(await socket.recv())
        await send(socket, context_id="a", voices=["nobody-speaks-so"])
        unknown_voice = json.loads(await socket.recv())
        await send(socket, context_id="a", voices=[HOST])
        await send(socket, context_id="a", voices=[HOST])
        registered_twice = json.loads(await socket.recv())
        await send(socket, context_id="a", inputs=[{"text": "Hi.", "voice_id": GUEST}])
        not_its_voice = json.loads(await socket.recv())
        await send(socket, context_id="a", inputs=[{"text": "Still here.", "voice_id": HOST}], flush=True)
        await send(socket, context_id="a", close_context=True)
        received = await until_final(socket, "a")
    assert unregistered["context_id"] == "ghost" and unregistered["error"] == "context_not_registered"
    assert unknown_voice["context_id"] == "a" and unknown_voice["code"] in {400, 404}
    assert registered_twice["error"] == "context_exists"
    assert not_its_voice["error"] == "voice_not_registered"
    assert b"".join(base64.b64decode(m["audio"]) for m in audio_messages(received, "a"))


async def test_a_sixth_context_ends_the_socket_as_on_the_text_to_speech_socket(gateway: GatewayProcess) -> None:
    """The same limit of 5 as ElevenLabs' text-to-speech socket, and the same end: ``max_active_conversations``
    (``code`` the close code that follows, as the SDK's ``TextToDialogueWebsocketError`` says it is), then 1008."""
    async with connect_to(gateway) as socket:
        for context_id in "abcde":
            await send(socket, context_id=context_id, voices=[HOST])
        await send(socket, context_id="f", voices=[HOST])
        error = json.loads(await asyncio.wait_for(socket.recv(), 5))
        assert (error["error"], error["code"]) == ("max_active_conversations", 1008)
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(socket.recv(), 5)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008


async def test_an_idle_context_is_finalized_and_keep_alives_hold_it(gateway: GatewayProcess) -> None:
    """ElevenLabs finalizes a context idle for the inactivity timeout (20 s unless asked), speaking what it holds;
    ``keep_alive`` restarts its clock (LiveKit's client sends one every 10 s)."""
    async with connect_to(gateway, query="&inactivity_timeout=2") as socket:
        await send(socket, context_id="kept", voices=[HOST])
        await send(socket, context_id="idle", voices=[GUEST])
        await send(socket, context_id="idle", inputs=[{"text": "Left without a flush", "voice_id": GUEST}])
        finals: list[str] = []
        async with asyncio.timeout(10):
            while "idle" not in finals:
                await send(socket, context_id="kept", keep_alive=True)
                try:
                    message = json.loads(await asyncio.wait_for(socket.recv(), 0.5))
                except TimeoutError:
                    continue
                if message.get("is_final") is True:
                    finals.append(message["context_id"])
        assert finals == ["idle"]  # spoken, then final; "kept" was held by its keep-alives


async def test_stream_input_is_one_context_opened_by_its_voices(gateway: GatewayProcess) -> None:
    async with connect_to(gateway, "stream-input") as socket:
        await send(socket, voices=[HOST, GUEST])
        await send(socket, inputs=[{"text": "One voice. ", "voice_id": HOST}, {"text": "Another.", "voice_id": GUEST}])
        await send(socket, close_socket=True)
        received: list[dict[str, Any]] = []
        with pytest.raises(ConnectionClosed) as closed:
            async with asyncio.timeout(30):
                while True:
                    received.append(json.loads(await socket.recv()))
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1000
    assert received[-1] == {"is_final": True}
    assert all("context_id" not in m for m in received)
    assert_alignment_spans_the_audio(audio_messages(received, None))


@pytest.mark.parametrize("auth", ["header", "query", "first_message"])
async def test_every_auth_form(gateway: GatewayProcess, auth: str) -> None:
    url = f"{ws_base(gateway)}/v1/text-to-dialogue/multi-stream-input?output_format=pcm_16000"
    headers = {"xi-api-key": KEY} if auth == "header" else {}
    first = {"xi_api_key": KEY} if auth == "first_message" else {}
    async with connect(url + (f"&authorization={KEY}" if auth == "query" else ""), additional_headers=headers) as ws:
        await send(ws, context_id="c", voices=[HOST], **first)
        await send(ws, context_id="c", inputs=[{"text": "Hello.", "voice_id": HOST}], flush=True)
        await send(ws, context_id="c", close_context=True)
        received = await until_final(ws, "c")
    assert b"".join(base64.b64decode(m["audio"]) for m in audio_messages(received, "c"))


async def test_a_wrong_key_is_refused(gateway: GatewayProcess) -> None:
    url = f"{ws_base(gateway)}/v1/text-to-dialogue/multi-stream-input"
    with pytest.raises(Exception, match="401"):
        async with connect(url, additional_headers={"xi-api-key": "wrong"}):
            pass


async def test_pipecats_dialogue_service_speaks_and_barges_in(gateway: GatewayProcess) -> None:
    """Pipecat 1.14's ``ElevenLabsDialogueTTSService`` (default model ``eleven_v4_turbo``), pointed at the gateway
    with ``url``: its audio, its word frames and the ``TTSStoppedFrame`` its ``is_final`` brings; then an interruption,
    which closes the turn's context (barge-in), and a next turn that still speaks."""
    frames, _, utils = pipecat_elevenlabs()
    text = "Hello from Pipecat. It speaks a dialogue through the gateway."
    tts = elevenlabs_dialogue_service(gateway.base_url, KEY, HOST)
    after = "A new turn after the interruption."
    sent = [
        frames.TTSSpeakFrame(text),
        utils.SleepFrame(4),
        frames.TTSSpeakFrame(LONG_TEXT),
        utils.SleepFrame(0.3),
        frames.InterruptionFrame(),  # Pipecat closes the turn's context
        frames.TTSSpeakFrame(after),
        utils.SleepFrame(4),
    ]
    down = await run_pipeline(tts, sent)
    cut = next(i for i, f in enumerate(down) if isinstance(f, frames.InterruptionFrame))
    first, rest = down[:cut], down[cut:]
    audio = b"".join(f.audio for f in first if isinstance(f, frames.TTSAudioRawFrame))
    assert len(audio) / 2 / RATE > 2.0
    words = " ".join(f.text for f in first if isinstance(f, frames.TTSTextFrame)).split()
    assert words[: len(text.split())] == text.split()
    assert any(isinstance(f, frames.TTSStoppedFrame) for f in first)
    assert " ".join(f.text for f in rest if isinstance(f, frames.TTSTextFrame)).split() == after.split()
    assert any(isinstance(f, frames.TTSAudioRawFrame) for f in rest)
    assert not any(isinstance(f, frames.ErrorFrame) for f in down)


async def test_pipecats_dialogue_word_times_are_the_rest_alignments(gateway: GatewayProcess) -> None:
    """Pipecat's ``ElevenLabsDialogueTTSService`` completes a word at the space after it, as its text-to-speech
    service does: each piece's alignment ends with one, so the turn's last word gets its own time too. Every word's
    time is the REST alignment's of its sentence (a piece each), after the sentences before it."""
    frames, _, utils = pipecat_elevenlabs()
    sentences = ["Hello from Pipecat.", "It speaks a dialogue through the gateway."]
    tts = elevenlabs_dialogue_service(gateway.base_url, KEY, HOST)
    down = await run_pipeline(tts, [frames.TTSSpeakFrame(" ".join(sentences)), utils.SleepFrame(1)])
    words = [f for f in down if isinstance(f, frames.TTSTextFrame)]
    heard = [(f.text, (f.pts - words[0].pts) / 1e9) for f in words]

    expected: list[tuple[str, float]] = []
    offset_s = 0.0  # the audio of the sentences before
    async with httpx.AsyncClient(timeout=30) as http:
        client = AsyncElevenLabs(api_key=KEY, base_url=gateway.base_url, httpx_client=http)
        for sentence in sentences:
            timed = await client.text_to_speech.convert_with_timestamps(
                HOST, text=sentence, model_id="eleven_v4_turbo", output_format="pcm_24000"
            )
            assert timed.alignment is not None
            characters, starts = timed.alignment.characters, timed.alignment.character_start_times_seconds
            firsts = [i for i, c in enumerate(characters) if c != " " and (i == 0 or characters[i - 1] == " ")]
            expected += [(word, offset_s + starts[i]) for word, i in zip(sentence.split(), firsts, strict=True)]
            offset_s += len(base64.b64decode(timed.audio_base_64)) / 2 / RATE
    assert [word for word, _ in heard] == [word for word, _ in expected]
    assert [at for _, at in heard] == pytest.approx([at for _, at in expected], abs=0.005)  # whole milliseconds


async def test_livekit_with_eleven_v3_synthesizes_and_streams(gateway: GatewayProcess) -> None:
    """LiveKit's ``elevenlabs.TTS(model="eleven_v3")``: ``synthesize()`` posts ``/v1/text-to-dialogue/stream``,
    ``stream()`` opens the dialogue ``multi-stream-input``; the streamed frames carry the words' times, on the audio's
    clock."""
    from livekit.plugins import elevenlabs

    text = "Hello from LiveKit. It speaks a dialogue through the gateway."
    async with aiohttp.ClientSession() as session:
        tts = elevenlabs.TTS(
            api_key=KEY,
            base_url=f"{gateway.base_url}/v1",
            voice_id=HOST,
            model="eleven_v3",
            encoding="pcm_24000",
            http_session=session,
        )
        try:
            synthesized = [event.frame async for event in tts.synthesize(text)]
            stream = tts.stream()
            stream.push_text(text)
            stream.end_input()
            streamed = [event.frame async for event in stream]
        finally:
            await tts.aclose()
    for frames in (synthesized, streamed):
        assert sum(frame.samples_per_channel for frame in frames) / RATE > 2.0
    seconds = sum(frame.samples_per_channel for frame in streamed) / RATE
    words = [word for frame in streamed for word in frame.userdata.get("lk.timed_transcripts", [])]
    assert "".join(str(word) for word in words).split() == text.split()
    starts = [word.start_time for word in words]
    # LiveKit's clock is the audio's: a message's words may be placed late there by the audio sent before their marks
    # were known (owed to the next alignment, docs/elevenlabs.md), so a later message's first word, owed less, may
    # come that much earlier than the word before it; never by more than one message's audio.
    assert all(later >= earlier - OWED_SLACK_S for earlier, later in itertools.pairwise(starts))
    assert starts[-1] < seconds


def test_the_sdks_dialogue_with_timestamps_names_both_turns(gateway: GatewayProcess) -> None:
    """``text_to_dialogue.convert_with_timestamps`` and ``stream_with_timestamps`` (SDK 2.78): the audio, every
    character's time, and a voice segment per turn (``dialogue_input_index``, its voice, its characters and times)."""
    from elevenlabs import DialogueInput, ElevenLabs

    turns = [DialogueInput(text="Good morning, everyone.", voice_id=HOST), DialogueInput(text="Hi!", voice_id=GUEST)]
    with httpx.Client(timeout=30) as http:
        client = ElevenLabs(api_key=KEY, base_url=gateway.base_url, httpx_client=http)
        whole = client.text_to_dialogue.convert_with_timestamps(inputs=turns, output_format="pcm_24000")
        lines = list(client.text_to_dialogue.stream_with_timestamps(inputs=turns, output_format="pcm_24000"))
    seconds = len(base64.b64decode(whole.audio_base_64)) / 2 / RATE
    assert whole.alignment is not None
    characters = whole.alignment.characters
    assert "".join(characters) == "Good morning, everyone. Hi!"
    segments = whole.voice_segments
    assert [(s.dialogue_input_index, s.voice_id) for s in segments] == [(0, HOST), (1, GUEST)]
    assert ["".join(characters[s.character_start_index : s.character_end_index]) for s in segments] == [
        "Good morning, everyone.",
        "Hi!",
    ]
    first, second = segments
    assert 0 <= first.start_time_seconds < first.end_time_seconds <= second.start_time_seconds
    assert second.start_time_seconds < second.end_time_seconds <= seconds + 0.01
    # The stream: the same characters, line after line, each line's segments within its characters.
    streamed = [c for line in lines if line.alignment for c in line.alignment.characters]
    assert "".join(streamed) == "".join(characters)
    assert {s.dialogue_input_index for line in lines for s in line.voice_segments} == {0, 1}
    assert sum(len(base64.b64decode(line.audio_base_64)) for line in lines) / 2 / RATE == pytest.approx(seconds)
