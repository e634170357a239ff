"""ElevenLabs' text-to-speech WebSockets (``multi-stream-input`` and ``stream-input``), end to end: a real gateway, a
``websockets`` client sending what Pipecat's ``ElevenLabsTTSService`` sends (context init ``{"text": " "}``, text,
flush, close_context, keep-alive), and the voice stacks' own ElevenLabs clients, unchanged but for their base URL:
the SDK's ``convert_realtime``, Pipecat's ``ElevenLabsTTSService`` and ``ElevenLabsHttpTTSService`` (the REST stream
with timestamps), LiveKit's ``elevenlabs.TTS``. The audio is the synthetic engine's tone, its length the text's
(``SECONDS_PER_CHAR`` a character)."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from typing import TYPE_CHECKING, Any

import aiohttp
import httpx
import numpy as np
import pytest
from elevenlabs import AsyncElevenLabs, ElevenLabs
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from auth.keys import generate_api_key, hash_api_key
from harness.gateway_process import GatewayProcess
from tests.audio_decode import decode_audio, decode_g711
from tests.livekit_agent import say_through_an_agent_session
from tests.pipecat_runner import elevenlabs_socket_service, pipecat_elevenlabs, run_pipeline
from tests.tls_proxy import TlsProxy

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


SECONDS_PER_CHAR = 0.02
KEY = generate_api_key()
VOICE = "alloy"
TEXT = "Hello from the gateway. It speaks ElevenLabs over a socket."
LONG_TEXT = "This sentence takes several seconds to say at real-time pace, which leaves time to cut in"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    config = {
        "server": {"send_timeout_s": 2.0},
        "auth": {"tenants": [{"name": "acme", "api_key_sha256": [hash_api_key(KEY)]}]},
        "engines": {
            "tones": {"kind": "synthetic", "workers": 2, "options": {"seconds_per_char": SECONDS_PER_CHAR}},
            "paced": {"kind": "synthetic", "workers": 1, "options": {"rtf": 1.0, "seconds_per_char": 0.05}},
        },
        "aliases": {"eleven_multilingual_v2": ["tones"], "eleven_flash_v2_5": ["paced"]},
    }
    with GatewayProcess(config, tmp_path_factory.mktemp("elevenlabs-ws")) as process:
        yield process


def url(
    gateway: GatewayProcess,
    query: str = "model_id=eleven_multilingual_v2&output_format=pcm_24000",
    *,
    auto_mode: bool = True,
) -> str:
    base = gateway.base_url.replace("http://", "ws://")
    return f"{base}/v1/text-to-speech/{VOICE}/multi-stream-input?{query}&auto_mode={str(auto_mode).lower()}"


def single_url(gateway: GatewayProcess, query: str = "model_id=eleven_multilingual_v2&output_format=pcm_24000") -> str:
    base = gateway.base_url.replace("http://", "ws://")
    return f"{base}/v1/text-to-speech/{VOICE}/stream-input?{query}"


def connect_to(gateway: GatewayProcess, query: str | None = None, key: str = KEY, *, auto_mode: bool = True) -> connect:
    target = url(gateway, auto_mode=auto_mode) if query is None else url(gateway, query, auto_mode=auto_mode)
    return connect(target, additional_headers={"xi-api-key": key}, max_size=None)


async def send(socket: ClientConnection, **message: Any) -> None:
    await socket.send(json.dumps(message))


async def until_final(socket: ClientConnection, context_id: str, timeout_s: float = 10.0) -> list[dict[str, Any]]:
    """Every message up to the context's ``isFinal`` (other contexts' too)."""
    received: list[dict[str, Any]] = []
    async with asyncio.timeout(timeout_s):
        while True:
            received.append(json.loads(await socket.recv()))
            if received[-1].get("isFinal") is True and received[-1].get("contextId") == context_id:
                return received


async def until_closed(socket: ClientConnection, timeout_s: float = 10.0) -> list[dict[str, Any]]:
    """Every message until the server closes the socket, which it must do with 1000."""
    received: list[dict[str, Any]] = []
    with pytest.raises(ConnectionClosed) as closed:
        async with asyncio.timeout(timeout_s):
            while True:
                received.append(json.loads(await socket.recv()))
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1000
    return received


def audio_of(received: list[dict[str, Any]], context_id: str | None) -> bytes:
    """The audio of a context (``None``: of ``stream-input``'s messages, which name none)."""
    return b"".join(
        base64.b64decode(m["audio"]) for m in received if m.get("contextId") == context_id and m.get("audio")
    )


def chars_of(received: list[dict[str, Any]], context_id: str | None) -> str:
    return "".join(
        "".join(m["alignment"]["chars"]) for m in received if m.get("contextId") == context_id and m.get("alignment")
    )


async def speak(socket: ClientConnection, context_id: str, *parts: str) -> None:
    """As Pipecat speaks a turn: open the context, send the text as it comes, flush, close the context."""
    await send(socket, text=" ", context_id=context_id, voice_settings={"stability": 0.5, "speed": 1.0})
    for part in parts:
        await send(socket, text=part, context_id=context_id)
    await send(socket, context_id=context_id, flush=True)
    await send(socket, context_id=context_id, close_context=True)


async def test_a_turn_is_spoken_with_its_alignment(gateway: GatewayProcess) -> None:
    async with connect_to(gateway) as socket:
        await send(socket, text="")  # Pipecat's keep-alive before any context
        await speak(socket, "turn-1", "Hello from the gateway. ", "It speaks ElevenLabs ", "over a socket.")
        received = await until_final(socket, "turn-1")

    audio = np.frombuffer(audio_of(received, "turn-1"), dtype="<i2")
    assert len(audio) / 24000 == pytest.approx(len(TEXT) * SECONDS_PER_CHAR, abs=0.15)
    assert chars_of(received, "turn-1") == "Hello from the gateway. It speaks ElevenLabs over a socket. "
    messages = [m for m in received if "audio" in m]  # words known only at the end come with no audio
    assert all(set(m) == {"audio", "isFinal", "contextId", "alignment", "normalizedAlignment"} for m in messages)
    # Pipecat's clock: each message's times from zero, its last end added to the clock, is the audio's duration.
    clock = 0.0
    for message in messages:
        if (alignment := message["alignment"]) is not None:
            starts, durations = alignment["charStartTimesMs"], alignment["charDurationsMs"]
            assert len(starts) == len(durations) == len(alignment["chars"])
            assert min(starts) >= 0 and min(durations) >= 0
            assert starts == sorted(starts)
            clock += (starts[-1] + durations[-1]) / 1000
    assert clock == pytest.approx(len(audio) / 24000, abs=0.05)
    assert received[-1] == {"isFinal": True, "contextId": "turn-1"}


async def test_ulaw_and_two_contexts(gateway: GatewayProcess) -> None:
    query = "model_id=eleven_multilingual_v2&output_format=ulaw_8000"
    async with connect_to(gateway, query) as socket:
        await speak(socket, "a", "First context speaks. ")
        await speak(socket, "b", "The second one, longer than the first. ")
        received = await until_final(socket, "a")
        if not any(m.get("isFinal") and m["contextId"] == "b" for m in received):
            received += await until_final(socket, "b")
    for context_id, text in (("a", "First context speaks."), ("b", "The second one, longer than the first.")):
        decoded = decode_g711(audio_of(received, context_id), "pcmu")
        assert decoded.sample_rate == 8000
        assert decoded.duration == pytest.approx(len(text) * SECONDS_PER_CHAR, abs=0.15)
        assert chars_of(received, context_id) == text + " "


async def test_the_alignment_clock_keeps_to_compressed_audio(gateway: GatewayProcess) -> None:
    """In MP3 each sentence's end pads the audio with the encoder's delay; the space after the sentence lasts as
    long, so that Pipecat's clock (each message's last end added up) stays the audio's. What is left is the tail
    after the last sentence (the encoder's flush), whatever the sentences, where it grew by 0.11 s a sentence
    before."""
    sentences = ["One sentence here.", "Another one follows it.", "And a third."]
    async with connect_to(gateway, "model_id=eleven_multilingual_v2&output_format=mp3_22050_32") as socket:
        await send(socket, text=" ", context_id="m")
        for sentence in sentences:
            await send(socket, text=sentence + " ", context_id="m", flush=True)
        await send(socket, context_id="m", close_context=True)
        received = await until_final(socket, "m")
    alignments = [m["alignment"] for m in received if m.get("alignment")]
    clock = sum((a["charStartTimesMs"][-1] + a["charDurationsMs"][-1]) / 1000 for a in alignments)
    assert chars_of(received, "m") == "".join(f"{sentence} " for sentence in sentences)
    assert 0 <= decode_audio(audio_of(received, "m"), "mp3").duration - clock < 0.25


async def test_close_context_cuts_the_speech_short(gateway: GatewayProcess) -> None:
    query = "model_id=eleven_flash_v2_5&output_format=pcm_24000"
    async with connect_to(gateway, query) as socket:
        await send(socket, text=" ", context_id="long")
        await send(socket, text=LONG_TEXT + ". And more text that is never flushed", context_id="long")
        first = json.loads(await asyncio.wait_for(socket.recv(), 10))
        assert first["contextId"] == "long" and first["audio"]
        await asyncio.sleep(0.5)
        closed_at = time.perf_counter()
        await send(socket, context_id="long", close_context=True)
        received = await until_final(socket, "long", timeout_s=2.0)
        assert time.perf_counter() - closed_at < 1.0
        engine = await asyncio.to_thread(gateway.wait_engine, "paced", 3.0, active_jobs=0, queued=0)
        assert engine["active_jobs"] == 0
        heard = (len(base64.b64decode(first["audio"])) + len(audio_of(received, "long"))) / 2 / 24000
        assert heard < len(LONG_TEXT) * 0.05 / 2  # well short of the sentence

        # The socket goes on: a context of the same name is a new one.
        await speak(socket, "long", "Short again.")
        again = await until_final(socket, "long")
        assert chars_of(again, "long") == "Short again. "


async def test_messages_without_a_context_id_speak_in_the_default_context(gateway: GatewayProcess) -> None:
    async with connect_to(gateway) as socket:
        await send(socket, text=" ")
        await send(socket, text="No context named.", flush=True)
        await send(socket, context_id="default", close_context=True)
        received = await until_final(socket, "default")
    assert chars_of(received, "default") == "No context named. "


async def test_bad_messages_are_answered_and_the_session_goes_on(gateway: GatewayProcess) -> None:
    async with connect_to(gateway) as socket:
        await socket.send("not json")
        error = json.loads(await socket.recv())
        assert set(error) == {"message", "error", "code"} and error["code"] == 400
        await send(socket, text=" ", context_id="x", voice_settings={"speed": 9})
        assert json.loads(await socket.recv())["error"] == "invalid_message"
        await send(socket, context_id="nope", flush=True)
        assert "not open" in json.loads(await socket.recv())["message"]
        await speak(socket, "ok", "Still fine.")
        assert chars_of(await until_final(socket, "ok"), "ok") == "Still fine. "


async def test_a_sixth_context_ends_the_socket_as_elevenlabs_does(gateway: GatewayProcess) -> None:
    """ElevenLabs' server answers a context over its 5 with ``max_active_conversations``, ``code`` 1008, and closes the
    socket with 1008 (as LiveKit's agents-js issue #1985 quotes it); the session does not go on."""
    async with connect_to(gateway) as socket:
        for context_id in "abcde":
            await send(socket, text=" ", context_id=context_id)
        await send(socket, text=" ", context_id="f")
        error = json.loads(await asyncio.wait_for(socket.recv(), 5))
        assert (error["error"], error["code"]) == ("max_active_conversations", 1008)
        assert set(error) == {"message", "error", "code"}
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(socket.recv(), 5)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008


async def test_close_socket_speaks_what_every_context_holds_then_closes(gateway: GatewayProcess) -> None:
    """``close_socket`` "flushes all contexts and closes the entire WebSocket connection" (the SDK's
    ``WebsocketTtsClientMessageMulti``): a context's text no flush covered is spoken too, without ``auto_mode``."""
    async with connect_to(gateway, auto_mode=False) as socket:
        await send(socket, text=" ", context_id="c")
        await send(socket, text="Said before the socket closes.", context_id="c", flush=True)
        await send(socket, text=" ", context_id="a")
        await send(socket, text="Hello there my friend.", context_id="a")
        await send(socket, close_socket=True)
        received = await until_closed(socket)
    assert chars_of(received, "c") == "Said before the socket closes. "
    assert chars_of(received, "a") == "Hello there my friend. "
    assert len(audio_of(received, "a")) / 2 / 24000 == pytest.approx(22 * SECONDS_PER_CHAR, abs=0.1)
    assert sorted(m["contextId"] for m in received if m.get("isFinal")) == ["a", "c"]
    assert received[-1]["isFinal"] is True


async def test_a_wrong_key_is_refused_at_the_handshake(gateway: GatewayProcess) -> None:
    with pytest.raises(InvalidStatus) as refused:
        async with connect_to(gateway, key="sk-wrong"):
            pass
    assert refused.value.response.status_code == 401
    assert json.loads(refused.value.response.body or b"")["detail"]["status"] == "invalid_api_key"


async def test_without_a_header_the_credentials_come_in_the_first_message(gateway: GatewayProcess) -> None:
    """As ElevenLabs takes them: ``xi-api-key`` (or ``authorization``) in the first message, or refused then."""
    async with connect(url(gateway)) as socket:
        await send(socket, text=" ", context_id="c")
        error = json.loads(await asyncio.wait_for(socket.recv(), 5))
        assert error["error"] == "needs_authorization" and error["code"] == 401
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(socket.recv(), 2)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
    async with connect(single_url(gateway)) as socket:
        await socket.send(json.dumps({"text": " ", "xi-api-key": KEY}))
        await send(socket, text="Keyed in the message.")
        await send(socket, text="")
        received = await until_closed(socket)
    assert chars_of(received, None) == "Keyed in the message. "
    async with connect(single_url(gateway, "output_format=pcm_16000&authorization=" + KEY)) as socket:
        await send(socket, text="Keyed in the query.", flush=True)
        await send(socket, text="")
        assert chars_of(await until_closed(socket), None) == "Keyed in the query. "


async def test_a_key_in_a_query_parameter_the_gateway_does_not_read_stays_out_of_the_log(
    gateway: GatewayProcess,
) -> None:
    for name in ("xi-api-key", "api_key"):  # names a client may guess: refused, but uvicorn logs the line first
        async with connect(single_url(gateway, f"output_format=pcm_16000&{name}={KEY}")) as socket:
            await send(socket, text=" ")
            error = json.loads(await asyncio.wait_for(socket.recv(), 5))
        assert error["error"] == "needs_authorization"
    assert "output_format=pcm_16000&xi-api-key=[redacted]" in gateway.log()
    assert KEY not in gateway.log()


async def test_an_unknown_voice_or_format_is_refused(gateway: GatewayProcess) -> None:
    base = gateway.base_url.replace("http://", "ws://")
    with pytest.raises(InvalidStatus) as refused:
        async with connect(
            f"{base}/v1/text-to-speech/nobody/multi-stream-input", additional_headers={"xi-api-key": KEY}
        ):
            pass
    assert refused.value.response.status_code == 404
    assert json.loads(refused.value.response.body or b"")["detail"]["status"] == "voice_not_found"
    with pytest.raises(InvalidStatus) as bad_format:
        async with connect_to(gateway, "output_format=pcm_12345"):
            pass
    assert bad_format.value.response.status_code == 422


async def test_a_seed_in_the_query_is_read_as_fastapi_reads_a_query(gateway: GatewayProcess) -> None:
    """A query's values are strings: FastAPI (ElevenLabs' server) reads ``seed=7`` as 7 and refuses ``seed=true``,
    which is no integer's string (where a JSON body's ``"seed": true`` is seed 1: ``docs/elevenlabs.md``)."""
    async with connect_to(gateway, "output_format=pcm_16000&seed=7") as socket:
        await speak(socket, "s", "Seeded.")
        assert chars_of(await until_final(socket, "s"), "s") == "Seeded. "
    with pytest.raises(InvalidStatus) as refused:
        async with connect_to(gateway, "output_format=pcm_16000&seed=true"):
            pass
    assert refused.value.response.status_code == 422
    assert json.loads(refused.value.response.body or b"")["detail"]["status"] == "invalid_seed"


async def test_an_idle_socket_is_closed_after_its_inactivity_timeout(gateway: GatewayProcess) -> None:
    async with connect_to(gateway, "output_format=pcm_16000&inactivity_timeout=1") as socket:
        error = json.loads(await asyncio.wait_for(socket.recv(), 3))
        assert error["error"] == "session_idle_timeout"
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(socket.recv(), 2)


async def test_a_tag_split_across_messages_is_read_whole(gateway: GatewayProcess) -> None:
    """A language model's tokens split a tag anywhere: the context holds an open ``<…`` until a message closes it,
    so the break is an exact silence, never text spoken, and the alignment holds no character the client did not
    send."""
    async with connect_to(gateway, auto_mode=False) as socket:
        await speak(socket, "br", "Sure, here", " <br", 'eak time="1s"/>', " is the next part.")
        received = await until_final(socket, "br")
        await speak(socket, "enter", "Press the", " <Enter", "> key to continue now.")
        entered = await until_final(socket, "enter")
    spoken = len("Sure, here") + len("is the next part.")
    assert len(audio_of(received, "br")) / 2 / 24000 == pytest.approx(spoken * SECONDS_PER_CHAR + 1.0, abs=0.1)
    # The tag read, not said; each piece ends with a space (before the break, and after the last piece).
    assert chars_of(received, "br") == "Sure, here  is the next part. "
    assert chars_of(entered, "enter") == "Press the <Enter> key to continue now. "


async def test_a_context_that_hears_nothing_is_closed_after_the_inactivity_timeout(gateway: GatewayProcess) -> None:
    """Each context has its own inactivity clock, which a message for it (a keep-alive ``{"text": "", "context_id"}``
    included) restarts: b, silent, is closed after ``inactivity_timeout`` while a is kept alive; when the socket itself
    times out, every context still open gets its ``isFinal`` before the close."""
    async with connect_to(gateway, "output_format=pcm_16000&inactivity_timeout=2", auto_mode=False) as socket:
        await send(socket, text=" ", context_id="a")
        await send(socket, text=" ", context_id="b")
        await send(socket, text="Said by b.", context_id="b", flush=True)
        opened = time.perf_counter()
        received: list[dict[str, Any]] = []
        async with asyncio.timeout(4):
            while not received or not received[-1].get("isFinal"):
                try:
                    received.append(json.loads(await asyncio.wait_for(socket.recv(), 0.5)))
                except TimeoutError:
                    await send(socket, text="", context_id="a")
        assert received[-1] == {"isFinal": True, "contextId": "b"}
        assert 1.9 < time.perf_counter() - opened < 3.5
        assert chars_of(received, "b") == "Said by b. "
        messages = await until_closed(socket)
    assert messages[0] == {"isFinal": True, "contextId": "a"}
    assert messages[1]["error"] == "session_idle_timeout"


async def test_pipecats_own_service_speaks_through_the_gateway(gateway: GatewayProcess) -> None:
    """Pipecat 1.14's ``ElevenLabsTTSService`` (``pipecat-ai`` is in the test extra), pointed at the gateway with
    ``url``: its audio, its word frames and the ``TTSStoppedFrame`` its ``isFinal`` brings."""
    frames, _, utils = pipecat_elevenlabs()
    text = "Hello from Pipecat. It speaks through the gateway."
    tts = elevenlabs_socket_service(gateway.base_url, KEY, VOICE)
    down = await run_pipeline(tts, [frames.TTSSpeakFrame(text), utils.SleepFrame(2)])
    audio = b"".join(f.audio for f in down if isinstance(f, frames.TTSAudioRawFrame))
    assert len(audio) / 2 / 24000 == pytest.approx(len(text) * SECONDS_PER_CHAR, abs=0.15)
    assert " ".join(f.text for f in down if isinstance(f, frames.TTSTextFrame)) == text
    assert any(isinstance(f, frames.TTSStoppedFrame) for f in down)
    assert not any(isinstance(f, frames.ErrorFrame) for f in down)


async def test_pipecats_word_times_are_the_rest_alignments(gateway: GatewayProcess) -> None:
    """Pipecat's ``ElevenLabsTTSService`` completes a word at the space after it: ElevenLabs ends each generation's
    socket alignment with one, so the turn's last word gets its own time too, the one the REST alignment gives it."""
    frames, _, utils = pipecat_elevenlabs()
    text = "Seven quick zebras jumped over forty lazy dogs today."
    tts = elevenlabs_socket_service(gateway.base_url, KEY, VOICE)
    down = await run_pipeline(tts, [frames.TTSSpeakFrame(text), utils.SleepFrame(1)])
    words = [f for f in down if isinstance(f, frames.TTSTextFrame)]
    heard = [(f.text, round((f.pts - words[0].pts) / 1e9, 2)) for f in words]

    async with httpx.AsyncClient(timeout=30) as http:
        client = AsyncElevenLabs(api_key=KEY, base_url=gateway.base_url, httpx_client=http)
        timed = await client.text_to_speech.convert_with_timestamps(VOICE, text=text, model_id="eleven_multilingual_v2")
    assert timed.alignment is not None
    characters, starts = timed.alignment.characters, timed.alignment.character_start_times_seconds
    firsts = [i for i, c in enumerate(characters) if c != " " and (i == 0 or characters[i - 1] == " ")]
    assert heard == [(w, round(starts[i], 2)) for w, i in zip(text.split(), firsts, strict=True)]


async def test_stream_input_speaks_what_was_sent_then_final_then_closes(gateway: GatewayProcess) -> None:
    """``stream-input``: one context that needs no name; ``{"text": ""}`` ends the input."""
    async with connect(single_url(gateway), additional_headers={"xi-api-key": KEY}) as socket:
        opening = {"text": " ", "voice_settings": {"speed": 1.0}, "generation_config": {"chunk_length_schedule": [50]}}
        await socket.send(json.dumps(opening))
        for part in ("Hello from the gateway. ", "It speaks ElevenLabs ", "over a socket. "):
            await send(socket, text=part, try_trigger_generation=True)
        await send(socket, text="")
        received = await until_closed(socket)
    audio = np.frombuffer(audio_of(received, None), dtype="<i2")
    assert len(audio) / 24000 == pytest.approx(len(TEXT) * SECONDS_PER_CHAR, abs=0.15)
    assert chars_of(received, None) == TEXT + " "
    assert all(set(m) == {"audio", "isFinal", "alignment", "normalizedAlignment"} for m in received[:-1])
    assert received[-1] == {"isFinal": True}


async def test_stream_input_in_auto_mode_speaks_each_message_at_once(gateway: GatewayProcess) -> None:
    """``auto_mode=true``: a message's text is spoken when it comes, its sentence unfinished (without it, the
    gateway waits for the sentence's end, or a flush)."""
    query = "model_id=eleven_multilingual_v2&output_format=pcm_24000&auto_mode=true"
    async with connect(single_url(gateway, query), additional_headers={"xi-api-key": KEY}) as socket:
        await send(socket, text=" ")
        await send(socket, text="No full stop yet ")
        first = json.loads(await asyncio.wait_for(socket.recv(), 5))
        assert first["audio"]
        await send(socket, text="")
        received = [first, *await until_closed(socket)]
    assert chars_of(received, None) == "No full stop yet "


# The SDK reads the close code by websockets' deprecated ConnectionClosed.code.
@pytest.mark.filterwarnings("ignore:ConnectionClosed.code is deprecated:DeprecationWarning")
async def test_the_sdks_convert_realtime_speaks_through_tls(
    gateway: GatewayProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ``elevenlabs`` SDK's own ``stream-input`` client: it turns any base URL into ``wss://``, so TLS in front
    (as an ingress); it reads until the server closes the socket with 1000."""
    port = int(gateway.base_url.rsplit(":", 1)[1])
    parts = ["Hello from the SDK, ", "through the gateway."]
    with TlsProxy(port, tmp_path) as tls:
        monkeypatch.setenv("SSL_CERT_FILE", str(tls.certificate))  # what the SDK's default TLS context trusts
        client = ElevenLabs(api_key=KEY, base_url=tls.base_url)
        chunks = await asyncio.to_thread(
            lambda: list(
                client.text_to_speech.convert_realtime(
                    VOICE, text=iter(parts), model_id="eleven_multilingual_v2", output_format="mp3_44100_128"
                )
            )
        )
    decoded = decode_audio(b"".join(chunks), "mp3")
    assert decoded.duration == pytest.approx(len("".join(parts)) * SECONDS_PER_CHAR, abs=0.2)


async def test_pipecats_http_service_speaks_with_word_times(gateway: GatewayProcess) -> None:
    """Pipecat 1.14's ``ElevenLabsHttpTTSService(base_url=…)``: ``…/stream/with-timestamps``, one request a sentence;
    its word frames come from the alignment, their times (``pts``) in order within the audio."""
    frames, elevenlabs, utils = pipecat_elevenlabs()
    text = "Hello from Pipecat. It speaks through the gateway."
    async with aiohttp.ClientSession() as session:
        tts = elevenlabs.ElevenLabsHttpTTSService(
            api_key=KEY,
            aiohttp_session=session,
            base_url=gateway.base_url,
            settings=elevenlabs.ElevenLabsHttpTTSService.Settings(voice=VOICE, model="eleven_multilingual_v2"),
            sample_rate=24000,
        )
        down = await run_pipeline(tts, [frames.TTSSpeakFrame(text), utils.SleepFrame(1)])
    audio = b"".join(f.audio for f in down if isinstance(f, frames.TTSAudioRawFrame))
    seconds = len(audio) / 2 / 24000
    assert seconds == pytest.approx(len(text) * SECONDS_PER_CHAR, abs=0.15)
    words = [f for f in down if isinstance(f, frames.TTSTextFrame)]
    assert " ".join(f.text for f in words) == text
    spans = [(f.pts - words[0].pts) / 1e9 for f in words]
    assert spans == sorted(set(spans)) and seconds / 2 < spans[-1] < seconds  # each word its own time, in the audio
    assert not any(isinstance(f, frames.ErrorFrame) for f in down)


async def test_livekits_tts_synthesizes_and_streams_with_word_times(gateway: GatewayProcess) -> None:
    """LiveKit Agents 1.8's ``elevenlabs.TTS(base_url=…)``, driven directly: ``synthesize()`` is the REST stream, in
    MP3 that LiveKit decodes with PyAV; ``stream()`` is the ``multi-stream-input`` WebSocket (``auto_mode``,
    ``sync_alignment``), its frames carrying the words' times."""
    from livekit.plugins import elevenlabs

    text = "Hello from LiveKit. It speaks through the gateway."
    async with aiohttp.ClientSession() as session:
        tts = elevenlabs.TTS(
            api_key=KEY,
            base_url=f"{gateway.base_url}/v1",
            voice_id=VOICE,
            model="eleven_multilingual_v2",
            encoding="mp3_44100_128",
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
        assert {frame.sample_rate for frame in frames} == {44100}
        seconds = sum(frame.samples_per_channel for frame in frames) / 44100
        assert seconds == pytest.approx(len(text) * SECONDS_PER_CHAR, abs=0.2)
    words = [word for frame in streamed for word in frame.userdata.get("lk.timed_transcripts", [])]
    assert "".join(str(word) for word in words).split() == text.split()
    # LiveKit keeps each message's times as they come; they restart at zero in every message (what Pipecat's clock
    # adds up), and each sentence of its auto mode is a message here: its words' starts go up within each sentence.
    for sentence in (words[:3], words[3:]):
        starts = [word.start_time for word in sentence]
        assert starts == sorted(set(starts)) and starts[-1] < seconds


async def test_a_livekit_agent_session_says_a_text_through_the_gateway(gateway: GatewayProcess) -> None:
    """An ``AgentSession`` with that TTS, as an agent speaks: no room (no LiveKit server is reachable here), its audio
    and transcript outputs set to sinks of the test's own, ``session.say()`` awaited until played out, with the
    transcript aligned to the audio by the gateway's timestamps (``use_tts_aligned_transcript``)."""
    text = "Hello from a LiveKit agent. It speaks through the gateway."
    frames, words = await say_through_an_agent_session(gateway.base_url, KEY, VOICE, text, "pcm_24000")
    seconds = sum(frame.duration for frame in frames)
    assert seconds == pytest.approx(len(text) * SECONDS_PER_CHAR, abs=0.1)
    assert "".join(str(word) for word in words).split() == text.split()
    assert all(0 <= word.start_time < seconds for word in words)
