"""vLLM-Omni's WebSocket dialect on ``/v1/audio/speech/stream``, end to end: a real gateway and a plain ``websockets``
client written as vLLM-Omni's example client is (``tests/vllm_omni_client.py``)."""

from __future__ import annotations

import asyncio
import io
import json
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import soundfile
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from auth.keys import generate_api_key, hash_api_key
from engines.synthetic import voice_frequency
from harness.gateway_process import GatewayProcess
from tests.audio_decode import decode_audio
from tests.realtime_client import open_connections
from tests.tenancy import ADMIN_TOKEN, Admin
from tests.vllm_omni_client import pcm_samples, speak, utterance
from tests.waiting import wait_for

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from websockets.asyncio.client import ClientConnection

SECONDS_PER_CHAR = 0.02
IDLE_TIMEOUT_S = 2.0
MAX_WHOLE_S = 3.0
"""``speech.max_whole_audio_s``: a sentence sent as one file holds at most 150 characters of the tones here."""
KEY = generate_api_key()
ONE_STREAM_KEY = generate_api_key()
SMALL_BUDGET_KEY = generate_api_key()
PIECES = ["The quick brown", " fox jumps over", " the lazy dog. Speech", " starts before", " the text ends! Does it?"]
SENTENCES = ["The quick brown fox jumps over the lazy dog.", "Speech starts before the text ends!", "Does it?"]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    config = {
        "server": {"send_timeout_s": 2.0},
        "realtime": {"auth_timeout_s": 1.0, "idle_timeout_s": IDLE_TIMEOUT_S},
        "speech": {"max_whole_audio_s": MAX_WHOLE_S},
        "auth": {
            "admin_token": ADMIN_TOKEN,
            "tenants": [
                {"name": "acme", "api_key_sha256": [hash_api_key(KEY)]},
                {"name": "solo", "api_key_sha256": [hash_api_key(ONE_STREAM_KEY)], "limits": {"concurrent_streams": 1}},
                {
                    "name": "frugal",
                    "api_key_sha256": [hash_api_key(SMALL_BUDGET_KEY)],
                    "limits": {"characters_per_minute": 60},
                },
            ],
        },
        "engines": {
            "tones": {"kind": "synthetic", "workers": 1, "options": {"seconds_per_char": SECONDS_PER_CHAR}},
            "paced": {"kind": "synthetic", "workers": 1, "options": {"rtf": 1.0, "seconds_per_char": 0.05}},
        },
        "aliases": {"tts-1": ["tones"]},
    }
    with GatewayProcess(config, tmp_path_factory.mktemp("vllm-omni")) as process:
        yield process


@pytest.fixture
async def omni(gateway: GatewayProcess) -> AsyncIterator[Any]:
    """Opens sockets as a vLLM-Omni client does: no greeting is awaited, its ``session.config`` comes first."""
    sockets: list[ClientConnection] = []

    async def open_(key: str | None = KEY, **config: Any) -> ClientConnection:
        url = gateway.base_url.replace("http://", "ws://") + "/v1/audio/speech/stream"
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        socket = await connect(url, additional_headers=headers)
        sockets.append(socket)
        if config:
            await socket.send(json.dumps({"type": "session.config", **config}))
        return socket

    yield open_
    for socket in sockets:
        await socket.close()


async def next_json(socket: ClientConnection, timeout_s: float = 5.0) -> dict[str, Any]:
    message = await asyncio.wait_for(socket.recv(), timeout_s)
    assert isinstance(message, str), "a text frame was expected"
    event: dict[str, Any] = json.loads(message)
    return event


async def closed_with(socket: ClientConnection, timeout_s: float = 5.0) -> int | None:
    with pytest.raises(ConnectionClosed) as closed:
        await asyncio.wait_for(socket.recv(), timeout_s)
    return closed.value.rcvd.code if closed.value.rcvd is not None else None


# ----------------------------------------------------------------------------------------------------------------
# speech, sentence by sentence


async def test_sentences_stream_as_raw_pcm_at_the_announced_rate(omni: Any) -> None:
    config = {"model": "tones", "voice": "nova", "response_format": "pcm", "stream_audio": True}
    socket = await omni(**config, split_granularity="sentence")

    reply = await speak(socket, PIECES)

    assert reply.messages[0]["type"] == "audio.start", "no session.created: vLLM-Omni's client speaks first"
    assert [s.start["sentence_text"] for s in reply.sentences] == SENTENCES
    assert reply.session_done == {"type": "session.done", "utterance_index": 0, "total_sentences": 3}
    for index, sentence in enumerate(reply.sentences):
        start, done = sentence.start, sentence.done
        assert start == {
            "type": "audio.start",
            "utterance_index": 0,
            "sentence_index": index,
            "sentence_text": SENTENCES[index],
            "format": "pcm",
            "sample_rate": 24000,
            "channels": 1,
        }
        assert done == {
            "type": "audio.done",
            "utterance_index": 0,
            "sentence_index": index,
            "total_bytes": len(sentence.audio),
            "error": False,
        }
        samples = pcm_samples(sentence.audio, start["sample_rate"], start["channels"])
        assert len(samples) / start["sample_rate"] == pytest.approx(len(SENTENCES[index]) * SECONDS_PER_CHAR, abs=0.01)
        assert np.sqrt(np.mean(np.square(samples))) > 0.05, "not silence"
        spectrum = np.abs(np.fft.rfft(samples * np.hanning(len(samples))))
        assert np.argmax(spectrum) * start["sample_rate"] / len(samples) == pytest.approx(
            voice_frequency("nova"), abs=3
        )


async def test_by_default_an_utterance_is_one_wav_file_in_one_frame_and_the_socket_stays_open(omni: Any) -> None:
    socket = await omni(model="tones", voice="echo")  # vLLM-Omni's defaults: wav, one request per input.done
    for piece in PIECES:
        await socket.send(json.dumps({"type": "input.text", "text": piece}))
    with pytest.raises(TimeoutError):  # nothing is spoken before input.done
        await asyncio.wait_for(socket.recv(), 0.5)
    await socket.send(json.dumps({"type": "input.done"}))
    first = await utterance(socket)

    second = await speak(socket, ["One more."], config={"model": "tones", "response_format": "flac"})
    await socket.send(json.dumps({"type": "session.close"}))
    code = await closed_with(socket)

    [sentence] = first.sentences
    assert sentence.start["sentence_text"] == " ".join(SENTENCES)
    assert len(sentence.frames) == 1, "the sentence's whole file in one binary frame"
    assert sentence.done == {**sentence.done, "total_bytes": len(sentence.frames[0]), "error": False}
    samples, rate = soundfile.read(io.BytesIO(sentence.frames[0]))
    assert len(samples) / rate == pytest.approx(len(sentence.start["sentence_text"]) * SECONDS_PER_CHAR, abs=0.01)
    assert first.session_done == {"type": "session.done", "utterance_index": 0, "total_sentences": 1}
    # A new session.config between utterances replaces the settings; the next file has the new format.
    assert second.sentences[0].start["format"] == "flac"
    flac = second.sentences[0].audio
    assert soundfile.info(io.BytesIO(flac)).format == "FLAC"
    # Sent whole, its STREAMINFO says its length: libsndfile reads it (it refuses a streamed FLAC's "unknown").
    samples, rate = soundfile.read(io.BytesIO(flac))
    assert len(samples) == len(decode_audio(flac, "flac").samples)
    assert len(samples) / rate == pytest.approx(len("One more.") * SECONDS_PER_CHAR, abs=0.01)
    assert second.session_done == {"type": "session.done", "utterance_index": 1, "total_sentences": 1}
    assert code == 1000


async def test_a_sentence_sent_whole_is_held_only_up_to_the_whole_audio_bound(omni: Any) -> None:
    """A sentence not streamed is held until it is complete: one longer than ``speech.max_whole_audio_s`` fails as
    vLLM-Omni's failed sentences do, having sent nothing; streamed, the same sentence comes whole."""
    text = "Every word of this sentence is held until the whole file is complete. " * 3  # 4.2 s of tones
    socket = await omni(model="tones", voice="echo")

    refused = await speak(socket, [text])
    streamed = await speak(socket, [text], config={"model": "tones", "response_format": "pcm", "stream_audio": True})
    after = await speak(socket, ["Short again."], config={"model": "tones"})

    [sentence] = refused.sentences
    [error] = refused.of("error")
    assert error == {
        "type": "error",
        "message": "Generation failed for utterance 0, sentence 0: The sentence's audio is longer than the "
        f"{MAX_WHOLE_S:g} s a sentence sent as one file may hold: set stream_audio to true (with response_format "
        "'pcm') to stream it, or split_granularity to 'sentence' to speak it in shorter pieces.",
    }
    assert sentence.frames == [], "nothing of the held file went out"
    assert sentence.done == {
        "type": "audio.done",
        "utterance_index": 0,
        "sentence_index": 0,
        "total_bytes": 0,
        "error": True,
    }
    assert refused.session_done == {"type": "session.done", "utterance_index": 0, "total_sentences": 1}
    # The session goes on: streamed, nothing is held, so the same sentence is spoken whole; a short one fits a file.
    [whole] = streamed.sentences
    assert len(whole.audio) / 2 / 24000 == pytest.approx(len(text.strip()) * SECONDS_PER_CHAR, abs=0.01)
    assert whole.done["error"] is False
    assert after.sentences[0].done == {**after.sentences[0].done, "error": False}
    assert len(decode_audio(after.sentences[0].audio, "wav").samples) > 0


async def test_an_empty_utterance_is_done_with_no_sentence(omni: Any) -> None:
    socket = await omni(model="tones")
    reply = await speak(socket, [])
    assert reply.messages == [{"type": "session.done", "utterance_index": 0, "total_sentences": 0}]


async def test_session_close_drops_text_no_input_done_flushed(omni: Any) -> None:
    socket = await omni(model="tones", split_granularity="sentence")
    await socket.send(json.dumps({"type": "input.text", "text": "Spoken. Never flushed"}))
    await socket.send(json.dumps({"type": "session.close"}))

    messages = []
    with pytest.raises(ConnectionClosed):
        while True:
            message = await asyncio.wait_for(socket.recv(), 5)
            messages.append(json.loads(message)["type"] if isinstance(message, str) else "binary")
    assert messages == ["audio.start", "binary", "audio.done"]  # "Spoken." only, and no session.done


# ----------------------------------------------------------------------------------------------------------------
# refused messages: vLLM-Omni's error shape


async def test_bad_messages_get_vllm_omni_errors_and_the_session_goes_on(omni: Any) -> None:
    socket = await omni(model="tones", response_format="pcm")
    cases: list[tuple[str | bytes, str]] = [
        ("{not json", "Invalid JSON message"),
        (json.dumps([1, 2]), "WebSocket messages must be JSON objects"),
        (json.dumps({"type": "input.shout"}), "Unknown message type: input.shout"),
        (json.dumps({"type": "input.append", "text": "ours"}), "Unknown message type: input.append"),  # other dialect
        (json.dumps({"type": "input.text", "text": 42}), "input.text requires a string value"),
        (json.dumps({"type": "session.config", "speed": 9}), "Invalid session config: 'speed'"),
        (json.dumps({"type": "session.config", "voice": "nobody"}), "nobody"),
        (json.dumps({"type": "session.config", "stream_audio": True}), "requires response_format='pcm'"),
        (json.dumps({"type": "session.config", "ref_audio": "data:,"}), "'ref_audio' is not supported"),
        (b"\x00binary", "Binary frames are not part of this protocol"),
    ]
    for message, says in cases:
        await socket.send(message)
        error = await next_json(socket)
        assert set(error) == {"type", "message"}, error
        assert error["type"] == "error"
        assert says in error["message"], (message, error)

    await socket.send(json.dumps({"type": "input.text", "text": "Held."}))
    await socket.send(json.dumps({"type": "session.config", "model": "tones"}))
    error = await next_json(socket)
    assert error["message"].startswith("session.config cannot be applied while an utterance is in progress")

    reply = await speak(socket, [])  # the settings from before the refused ones hold
    assert reply.sentences[0].start["format"] == "pcm"
    assert reply.sentences[0].done == {**reply.sentences[0].done, "error": False}


@pytest.mark.parametrize(
    ("config", "says"),
    [
        ({"voice": "nobody"}, "nobody"),
        ({"response_format": "wma"}, "Invalid session config: 'response_format'"),
        ({"task_type": "Base"}, "task_type 'Base' is not supported"),
    ],
)
async def test_a_refused_first_session_config_closes_the_socket(omni: Any, config: dict[str, Any], says: str) -> None:
    socket = await omni(model="tones", **config)
    error = await next_json(socket)
    assert error["type"] == "error"
    assert says in error["message"]
    assert await closed_with(socket) == 1000


async def test_a_segment_over_the_character_budget_fails_alone(omni: Any) -> None:
    socket = await omni(SMALL_BUDGET_KEY, model="tones", split_granularity="sentence")
    reply = await speak(
        socket, ["Forty characters of text fit the budget. ", "These forty characters no longer fit it."]
    )

    [error] = reply.of("error")
    assert error["message"].startswith("Generation failed for utterance 0, sentence 1: ")
    spoken, refused = reply.sentences
    assert spoken.done == {**spoken.done, "total_bytes": len(spoken.audio), "error": False}
    assert refused.done == {
        "type": "audio.done",
        "utterance_index": 0,
        "sentence_index": 1,
        "total_bytes": 0,
        "error": True,
    }
    assert refused.frames == []
    assert reply.session_done == {"type": "session.done", "utterance_index": 0, "total_sentences": 2}


# ----------------------------------------------------------------------------------------------------------------
# authentication and the session's limits


@pytest.mark.parametrize("how", ["none", "bad-header"])
async def test_a_client_without_good_credentials_is_refused_in_its_dialect(omni: Any, how: str) -> None:
    socket = await omni(None if how == "none" else "sk-tts-wrong", model="tones")
    error = await next_json(socket)
    assert set(error) == {"type", "message"}
    assert error["type"] == "error"
    assert error["message"].startswith("No credentials" if how == "none" else "Incorrect API key")
    assert await closed_with(socket) == 1008


async def test_query_token_authenticates_a_vllm_omni_client(gateway: GatewayProcess) -> None:
    url = gateway.base_url.replace("http://", "ws://") + f"/v1/audio/speech/stream?token={KEY}"
    async with connect(url) as socket:
        reply = await speak(socket, ["Authenticated."], config={"model": "tones"})
    assert reply.sentences[0].done == {**reply.sentences[0].done, "error": False}


async def test_leaving_mid_sentence_releases_worker_and_stream(omni: Any, gateway: GatewayProcess) -> None:
    await wait_for(lambda: open_connections(gateway) == 0, what="earlier sessions to close")
    socket = await omni(ONE_STREAM_KEY, model="paced", response_format="pcm", stream_audio=True)
    await socket.send(json.dumps({"type": "input.text", "text": "A sentence that takes a few seconds to say. "}))
    await socket.send(json.dumps({"type": "input.done"}))
    assert (await next_json(socket))["type"] == "audio.start"
    assert isinstance(await asyncio.wait_for(socket.recv(), 5), bytes)
    left_at = time.perf_counter()
    await socket.close()

    await wait_for(lambda: gateway.engine("paced")["active_jobs"] == 0, what="the paced engine to stop")
    await wait_for(lambda: open_connections(gateway) == 0, what="the session to end")
    assert time.perf_counter() - left_at < 2.0
    again = await omni(ONE_STREAM_KEY, model="tones")  # the tenant's only stream is free again
    assert (await speak(again, ["Hello again."])).session_done is not None


async def test_an_idle_session_is_closed_with_a_vllm_omni_error(omni: Any) -> None:
    socket = await omni(model="tones")
    error = await next_json(socket, timeout_s=IDLE_TIMEOUT_S + 3)
    assert error == {"type": "error", "message": f"The session was idle for {IDLE_TIMEOUT_S:g} s and has been closed."}
    assert await closed_with(socket) == 1000


@pytest.fixture
def admin(gateway: GatewayProcess) -> Iterator[Admin]:
    client = Admin(gateway.base_url)
    yield client
    client.close()


async def test_a_revoked_key_ends_its_session_mid_sentence(omni: Any, admin: Admin) -> None:
    key = admin.key(admin.tenant())
    socket = await omni(key["key"], model="paced", response_format="pcm", stream_audio=True)
    await socket.send(json.dumps({"type": "input.text", "text": "A sentence that takes a few seconds to say."}))
    await socket.send(json.dumps({"type": "input.done"}))
    assert (await next_json(socket))["type"] == "audio.start"

    admin.revoke(key)
    messages = []
    with pytest.raises(ConnectionClosed) as closed:
        while True:
            messages.append(await asyncio.wait_for(socket.recv(), 5))

    error = json.loads(next(m for m in messages if isinstance(m, str)))
    assert set(error) == {"type", "message"}
    assert "revoked" in error["message"]
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 1008
