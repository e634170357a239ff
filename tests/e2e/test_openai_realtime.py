"""OpenAI's Realtime API as a speech endpoint, end to end: a real gateway, the official OpenAI SDK's
``client.realtime.connect`` (sync and async, ``websocket_base_url``), the audio decoded with numpy and ffmpeg."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import time
from typing import TYPE_CHECKING, Any, Literal, cast

import httpx
import openai
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.typing import Subprotocol

from auth.keys import generate_api_key, hash_api_key
from engines.synthetic import voice_frequency
from harness.gateway_process import GatewayProcess
from tests.audio_decode import decode_audio, decode_g711, dominant_frequency
from tests.node_client import NODE_DIR, node_with_sdk
from tests.tls_proxy import TlsProxy

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from openai.resources.realtime.realtime import AsyncRealtimeConnection, RealtimeConnection
    from openai.types.realtime import (
        RealtimeAudioFormatsParam,
        RealtimeConversationItemUserMessageParam,
        RealtimeResponseCreateParamsParam,
        RealtimeSessionCreateRequestParam,
    )

SECONDS_PER_CHAR = 0.02
PACED_SECONDS_PER_CHAR = 0.05
IDLE_TIMEOUT_S = 3.0
MAX_MESSAGE_BYTES = 64 * 1024  # server.max_body_bytes, which is also the largest WebSocket message
KEY = generate_api_key()
ONE_STREAM_KEY = generate_api_key()
SMALL_BUDGET_KEY = generate_api_key()
MODEL = "gpt-realtime-2.1-mini"
TEXT = "Hello from the realtime endpoint."
LONG_TEXT = "This sentence takes several seconds to say at real-time pace, which leaves time to cut in."
PCM_SESSION: RealtimeSessionCreateRequestParam = {
    "type": "realtime",
    "output_modalities": ["audio"],
    "audio": {"output": {"format": {"type": "audio/pcm", "rate": 24000}, "voice": "marin"}},
}


def realtime_config() -> dict[str, Any]:
    return {
        "server": {"send_timeout_s": 2.0},
        "realtime": {"idle_timeout_s": IDLE_TIMEOUT_S},
        "auth": {
            "tenants": [
                {"name": "acme", "api_key_sha256": [hash_api_key(KEY)]},
                {"name": "solo", "api_key_sha256": [hash_api_key(ONE_STREAM_KEY)], "limits": {"concurrent_streams": 1}},
                {
                    "name": "frugal",
                    "api_key_sha256": [hash_api_key(SMALL_BUDGET_KEY)],
                    "limits": {"characters_per_minute": 60},
                },
            ]
        },
        "engines": {
            "tones": {"kind": "synthetic", "workers": 1, "options": {"seconds_per_char": SECONDS_PER_CHAR}},
            # Real-time pacing: LONG_TEXT takes about 4.5 s to speak, so there is time to barge in.
            "paced": {"kind": "synthetic", "workers": 1, "options": {"rtf": 1.0, "seconds_per_char": 0.05}},
        },
        "aliases": {MODEL: ["tones"], "gpt-realtime": ["tones"]},
    }


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with GatewayProcess(realtime_config(), tmp_path_factory.mktemp("openai-realtime")) as process:
        yield process


def ws_base(gateway: GatewayProcess) -> str:
    return gateway.base_url.replace("http://", "ws://") + "/v1"


def async_client(gateway: GatewayProcess, key: str = KEY) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(api_key=key, base_url=f"{gateway.base_url}/v1", websocket_base_url=ws_base(gateway))


def user_message(text: str) -> RealtimeConversationItemUserMessageParam:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def out_of_band(text: str, voice: str | None = None) -> RealtimeResponseCreateParamsParam:
    """A response that speaks ``text`` and joins no conversation: how a caller of the speech endpoint migrates."""
    params: RealtimeResponseCreateParamsParam = {"conversation": "none", "input": [user_message(text)]}
    if voice is not None:
        params["audio"] = {"output": {"voice": voice}}
    return params


async def recv(connection: AsyncRealtimeConnection) -> dict[str, Any]:
    """The next event, parsed by the SDK into its own type, as a plain mapping."""
    return (await connection.recv()).model_dump(mode="json")


def recv_sync(connection: RealtimeConnection) -> dict[str, Any]:
    return connection.recv().model_dump(mode="json")


async def response_events(connection: AsyncRealtimeConnection, timeout_s: float = 10.0) -> list[dict[str, Any]]:
    """Every event up to and including the next ``response.done``."""
    received: list[dict[str, Any]] = []
    async with asyncio.timeout(timeout_s):
        while not received or received[-1]["type"] != "response.done":
            received.append(await recv(connection))
    return received


def types(received: list[dict[str, Any]]) -> list[str]:
    return [event["type"] for event in received]


def audio_of(received: list[dict[str, Any]]) -> bytes:
    return b"".join(base64.b64decode(e["delta"]) for e in received if e["type"] == "response.output_audio.delta")


# ----------------------------------------------------------------------------------------------------------------
# the SDK, as a speech caller migrating from /v1/audio/speech writes it


async def test_the_async_sdk_speaks_out_of_band_then_in_conversation(gateway: GatewayProcess) -> None:
    async with async_client(gateway).realtime.connect(model=MODEL) as connection:
        created = await recv(connection)
        assert (created["type"], created["session"]["model"]) == ("session.created", MODEL)
        await connection.session.update(session=PCM_SESSION)
        updated = await recv(connection)
        assert updated["type"] == "session.updated"
        assert updated["session"]["audio"]["output"]["voice"] == "marin"

        await connection.response.create(response=out_of_band(TEXT))
        spoken_alone = await response_events(connection)

        await connection.conversation.item.create(item=user_message("Now in the conversation."))
        added, item_done = await recv(connection), await recv(connection)
        await connection.response.create()
        in_conversation = await response_events(connection)

    deltas = sum(t == "response.output_audio.delta" for t in types(spoken_alone))
    assert types(spoken_alone) == [  # no rate_limits.updated: this tenant has no limits
        "response.created",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_audio_transcript.delta",
        *["response.output_audio.delta"] * deltas,
        "response.output_audio.done",
        "response.output_audio_transcript.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.done",
    ]
    done = spoken_alone[-1]["response"]
    assert (done["status"], done["conversation_id"]) == ("completed", None)
    assert done["output"][0]["content"][0]["transcript"] == TEXT
    audio = decode_audio(audio_of(spoken_alone), "pcm")
    assert audio.duration == pytest.approx(len(TEXT) * SECONDS_PER_CHAR, abs=0.03)
    assert dominant_frequency(audio) == pytest.approx(voice_frequency("marin"), abs=3)
    assert done["usage"]["input_tokens"] == len(TEXT)
    assert done["usage"]["output_tokens"] == pytest.approx(audio.duration * 50, abs=1)

    assert (added["type"], item_done["type"]) == ("conversation.item.added", "conversation.item.done")
    assert "conversation.item.added" in types(in_conversation)
    assert types(in_conversation)[-2:] == ["conversation.item.done", "response.done"]
    spoken = in_conversation[-1]["response"]
    assert (spoken["status"], spoken["conversation_id"] is not None) == ("completed", True)
    assert spoken["output"][0]["content"][0]["transcript"] == "Now in the conversation."
    heard = decode_audio(audio_of(in_conversation), "pcm")
    assert heard.duration == pytest.approx(len("Now in the conversation.") * SECONDS_PER_CHAR, abs=0.03)


# openai 3.57's sync client calls websockets 17's connect() outside a `with`, which websockets deprecates.
@pytest.mark.filterwarnings("ignore:connect\\(\\) must be used as a context manager:DeprecationWarning")
def test_the_sync_sdk_speaks_too(gateway: GatewayProcess) -> None:
    client = openai.OpenAI(api_key=KEY, base_url=f"{gateway.base_url}/v1", websocket_base_url=ws_base(gateway))
    with client.realtime.connect(model=MODEL) as connection:
        assert recv_sync(connection)["type"] == "session.created"
        connection.response.create(response=out_of_band(TEXT, voice="nova"))
        received: list[dict[str, Any]] = []
        while not received or received[-1]["type"] != "response.done":
            received.append(recv_sync(connection))
    audio = decode_audio(audio_of(received), "pcm")
    assert received[-1]["response"]["status"] == "completed"
    assert audio.duration == pytest.approx(len(TEXT) * SECONDS_PER_CHAR, abs=0.03)
    assert dominant_frequency(audio) == pytest.approx(voice_frequency("nova"), abs=3)


@pytest.mark.parametrize("law", ["pcmu", "pcma"])
async def test_g711_formats_decode_to_the_same_speech(gateway: GatewayProcess, law: Literal["pcmu", "pcma"]) -> None:
    formats: dict[str, RealtimeAudioFormatsParam] = {"pcmu": {"type": "audio/pcmu"}, "pcma": {"type": "audio/pcma"}}
    session: RealtimeSessionCreateRequestParam = {
        "type": "realtime",
        "audio": {"output": {"format": formats[law], "voice": "coral"}},
    }
    async with async_client(gateway).realtime.connect(model=MODEL) as connection:
        await recv(connection)
        await connection.session.update(session=session)
        assert (await recv(connection))["session"]["audio"]["output"]["format"]["type"] == f"audio/{law}"
        await connection.response.create(response=out_of_band(TEXT))
        received = await response_events(connection)
    raw = audio_of(received)
    audio = decode_g711(raw, law)
    assert len(raw) == pytest.approx(len(TEXT) * SECONDS_PER_CHAR * 8000, abs=200)  # one byte per 8 kHz sample
    assert audio.duration == pytest.approx(len(TEXT) * SECONDS_PER_CHAR, abs=0.03)
    assert dominant_frequency(audio) == pytest.approx(voice_frequency("coral"), abs=5)


async def test_barge_in_stops_the_audio_at_once_and_the_next_response_is_spoken(gateway: GatewayProcess) -> None:
    async with async_client(gateway).realtime.connect(model="paced") as connection:
        await recv(connection)
        await connection.response.create(response=out_of_band(LONG_TEXT))
        before: list[dict[str, Any]] = []
        while not before or before[-1]["type"] != "response.output_audio.delta":
            before.append(await recv(connection))
        cancelled_at = time.perf_counter()
        await connection.response.cancel()
        after = await response_events(connection, timeout_s=1.0)
        ended_in = time.perf_counter() - cancelled_at
        engine = await asyncio.to_thread(gateway.wait_engine, "paced", 2.0, active_jobs=0, queued=0)

        await connection.response.create(response=out_of_band("Still here."))
        next_response = await response_events(connection)

    assert ended_in < 1.0
    done = after[-1]["response"]
    assert (done["status"], done["status_details"]["reason"]) == ("cancelled", "client_cancelled")
    heard = len(audio_of(before + after)) / 48000
    assert heard < len(LONG_TEXT) * PACED_SECONDS_PER_CHAR / 2  # it stopped well before the end
    assert done["usage"]["output_tokens"] == pytest.approx(heard * 50, abs=1)
    assert engine["active_jobs"] == 0
    assert next_response[-1]["response"]["status"] == "completed"
    assert next_response[-1]["response"]["output"][0]["content"][0]["transcript"] == "Still here."


async def test_clearing_the_output_buffer_also_barges_in_and_metadata_comes_back(gateway: GatewayProcess) -> None:
    params = out_of_band(LONG_TEXT)
    params["metadata"] = {"turn": "7"}
    params["instructions"] = "Speak slowly and warmly."
    async with async_client(gateway).realtime.connect(model="paced") as connection:
        await recv(connection)
        await connection.response.create(response=params)
        while (await recv(connection))["type"] != "response.output_audio.delta":
            pass
        await connection.output_audio_buffer.clear()
        done = (await response_events(connection, timeout_s=1.0))[-1]["response"]
    assert (done["status"], done["metadata"]) == ("cancelled", {"turn": "7"})


async def test_a_custom_voice_speaks_by_id(gateway: GatewayProcess) -> None:
    made = await asyncio.to_thread(
        httpx.post,
        f"{gateway.base_url}/v1/audio/voices",
        json={"name": "seeded", "model": "tones", "seed": 7},
        headers={"Authorization": f"Bearer {KEY}"},
    )
    assert made.status_code == 201, made.text
    session: RealtimeSessionCreateRequestParam = {
        "type": "realtime",
        "audio": {"output": {"voice": {"id": made.json()["id"]}}},
    }
    async with async_client(gateway).realtime.connect(model="tones") as connection:
        await recv(connection)
        await connection.session.update(session=session)
        assert (await recv(connection))["type"] == "session.updated"
        await connection.response.create(response=out_of_band(TEXT))
        received = await response_events(connection)
    heard = decode_audio(audio_of(received), "pcm")
    assert dominant_frequency(heard) == pytest.approx(voice_frequency("", "seed:7"), abs=3)


def test_the_node_sdks_realtime_client_speaks(gateway: GatewayProcess, tmp_path: Path) -> None:
    node = node_with_sdk()
    output = tmp_path / "speech.pcm"
    script = str(NODE_DIR / "realtime.mjs")
    port = int(gateway.base_url.rsplit(":", 1)[1])
    # The Node SDK's Realtime client always connects with wss:// to its base URL's host: TLS in front, as an ingress.
    with TlsProxy(port, tmp_path) as tls:
        result = subprocess.run(
            [node, script, f"{tls.base_url}/v1", KEY, MODEL, "shimmer", str(output), TEXT],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
            env={**os.environ, "NODE_EXTRA_CA_CERTS": str(tls.certificate)},
        )
    assert result.returncode == 0, f"node exited with {result.returncode}:\n{result.stderr}"
    reported = json.loads(result.stdout)
    assert reported["types"][:2] == ["session.created", "session.updated"]
    assert reported["response"]["status"] == "completed"
    audio = decode_audio(output.read_bytes(), "pcm")
    assert audio.duration == pytest.approx(len(TEXT) * SECONDS_PER_CHAR, abs=0.03)
    assert dominant_frequency(audio) == pytest.approx(voice_frequency("shimmer"), abs=3)


# ----------------------------------------------------------------------------------------------------------------
# refusals: at the handshake, with OpenAI's error; in the session, as error events


@pytest.mark.parametrize("key", ["sk-wrong", None])
async def test_a_wrong_or_missing_key_is_refused_at_the_handshake(gateway: GatewayProcess, key: str | None) -> None:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    with pytest.raises(InvalidStatus) as refused:
        async with connect(f"{ws_base(gateway)}/realtime?model={MODEL}", additional_headers=headers):
            pass
    response = refused.value.response
    assert response.status_code == 401
    assert json.loads(response.body)["error"]["code"] == "invalid_api_key"


async def test_the_sdk_sees_a_wrong_key_refused(gateway: GatewayProcess) -> None:
    with pytest.raises(InvalidStatus) as refused:
        async with async_client(gateway, "sk-wrong").realtime.connect(model=MODEL):
            pass
    assert refused.value.response.status_code == 401


async def test_a_browser_authenticates_with_the_subprotocol(gateway: GatewayProcess) -> None:
    protocols: list[Subprotocol] = [Subprotocol("realtime"), Subprotocol(f"openai-insecure-api-key.{KEY}")]
    async with connect(f"{ws_base(gateway)}/realtime?model={MODEL}", subprotocols=protocols) as socket:
        assert socket.subprotocol == "realtime"
        assert json.loads(await socket.recv())["type"] == "session.created"


async def test_an_unknown_model_is_refused_at_the_handshake(gateway: GatewayProcess) -> None:
    with pytest.raises(InvalidStatus) as refused:
        async with async_client(gateway).realtime.connect(model="no-such-model"):
            pass
    assert refused.value.response.status_code == 404
    assert json.loads(refused.value.response.body)["error"]["code"] == "model_not_found"


async def test_a_session_over_the_tenants_streams_is_refused_at_the_handshake(gateway: GatewayProcess) -> None:
    async with async_client(gateway, ONE_STREAM_KEY).realtime.connect(model=MODEL) as first:
        await recv(first)
        with pytest.raises(InvalidStatus) as refused:
            async with async_client(gateway, ONE_STREAM_KEY).realtime.connect(model=MODEL):
                pass
    assert refused.value.response.status_code == 429
    assert json.loads(refused.value.response.body)["error"]["code"] == "concurrency_limit_exceeded"


async def test_characters_are_limited_per_response(gateway: GatewayProcess) -> None:
    async with async_client(gateway, SMALL_BUDGET_KEY).realtime.connect(model=MODEL) as connection:
        await recv(connection)
        await connection.response.create(response=out_of_band("x" * 50))
        first = await response_events(connection)
        first.append(await recv(connection))  # a tenant with limits hears its standing after response.done
        await connection.response.create(response=out_of_band("y" * 50))
        second = await response_events(connection)
    assert first[-2]["response"]["status"] == "completed"
    limits = next(event for event in first if event["type"] == "rate_limits.updated")["rate_limits"]
    assert limits == [{"name": "tokens", "limit": 60, "remaining": 10, "reset_seconds": pytest.approx(60, abs=2)}]
    assert types(first)[-2:] == ["response.done", "rate_limits.updated"]  # in OpenAI's order
    assert types(second) == ["response.created", "error", "response.done"]
    assert second[1]["error"]["code"] == "rate_limit_exceeded"
    assert second[-1]["response"]["status"] == "failed"


async def test_a_response_with_a_voice_it_cannot_have_is_refused_before_it_is_created(gateway: GatewayProcess) -> None:
    # As session.update refuses it: no response is created, and the error names the event's own path.
    async with async_client(gateway).realtime.connect(model=MODEL) as connection:
        await recv(connection)
        refused: list[dict[str, Any]] = []
        for voice in ("nobody", {"id": "voice_0123456789abcdef"}):
            params = out_of_band(TEXT)
            params["audio"] = {"output": {"voice": cast("Any", voice)}}  # a name, or a custom voice by id
            await connection.response.create(response=params, event_id=f"e-{len(refused)}")
            refused.append(await recv(connection))
        await connection.response.create(response=out_of_band(TEXT))
        spoken = await response_events(connection)
    assert [event["type"] for event in refused] == ["error", "error"]
    assert [event["error"]["param"] for event in refused] == ["response.audio.output.voice"] * 2
    assert [event["error"]["code"] for event in refused] == ["invalid_value", "voice_not_found"]
    assert [event["error"]["event_id"] for event in refused] == ["e-0", "e-1"]
    assert spoken[0]["type"] == "response.created" and spoken[-1]["response"]["status"] == "completed"


async def test_bad_events_get_error_events_and_the_session_survives(gateway: GatewayProcess) -> None:
    headers = {"Authorization": f"Bearer {KEY}"}
    async with connect(f"{ws_base(gateway)}/realtime?model={MODEL}", additional_headers=headers) as socket:
        assert json.loads(await socket.recv())["type"] == "session.created"
        long_part = {"type": "input_text", "text": "x" * 3000}
        too_long = {"type": "message", "role": "user", "content": [long_part, long_part]}
        cases: list[tuple[str | bytes, str]] = [
            ("{not json", "invalid_json"),
            ('{"type": "no.such.event", "event_id": "e1"}', "invalid_value"),
            ('{"type": "input_audio_buffer.append", "audio": ""}', "unsupported_event"),
            ('{"type": "response.cancel"}', "response_cancel_not_active"),
            ('{"type": "response.create", "response": {"output_modalities": ["text"]}}', "unsupported_value"),
            ('{"type": "response.create"}', "missing_user_message"),
            ('{"type": "conversation.item.delete", "item_id": "item_nope"}', "item_not_found"),
            (json.dumps({"type": "response.create", "response": {"input": [too_long]}}), "string_above_max_length"),
            (b"\x00binary", "invalid_event"),
            ("[" * 100 + "]" * 100, "json_too_deep"),
        ]
        for message, code in cases:
            await socket.send(message)
            event = json.loads(await socket.recv())
            assert (event["type"], event["error"]["code"]) == ("error", code), message
        await socket.send(json.dumps({"type": "response.create", "response": {"input": [user_message(TEXT)]}}))
        while (event := json.loads(await socket.recv()))["type"] != "response.done":
            pass
        assert event["response"]["status"] == "completed"


async def test_a_message_over_the_size_limit_closes_with_1009_and_the_server_stays_up(gateway: GatewayProcess) -> None:
    async with async_client(gateway).realtime.connect(model=MODEL) as connection:
        await recv(connection)
        await connection.conversation.item.create(item=user_message("x" * MAX_MESSAGE_BYTES))
        with pytest.raises(ConnectionClosed) as closed:
            async with asyncio.timeout(5):
                while True:
                    await recv(connection)
    assert closed.value.rcvd is not None, "the server did not send a close frame"
    assert closed.value.rcvd.code == 1009
    async with async_client(gateway).realtime.connect(model=MODEL) as connection:
        await recv(connection)
        await connection.response.create(response=out_of_band(TEXT))
        assert (await response_events(connection))[-1]["response"]["status"] == "completed"
    assert "Traceback" not in gateway.log()


async def test_one_response_at_a_time(gateway: GatewayProcess) -> None:
    async with async_client(gateway).realtime.connect(model="paced") as connection:
        await recv(connection)
        await connection.response.create(response=out_of_band(LONG_TEXT))
        assert (await recv(connection))["type"] == "response.created"
        await connection.response.create(response=out_of_band(TEXT))
        while (event := await recv(connection))["type"] != "error":
            pass
        assert event["error"]["code"] == "conversation_already_has_active_response"
        await connection.response.cancel()
        assert (await response_events(connection))[-1]["response"]["status"] == "cancelled"


async def test_an_idle_session_is_closed(gateway: GatewayProcess) -> None:
    headers = {"Authorization": f"Bearer {KEY}"}
    async with connect(f"{ws_base(gateway)}/realtime?model={MODEL}", additional_headers=headers) as socket:
        started = time.perf_counter()
        received = [json.loads(message) async for message in socket]
    assert IDLE_TIMEOUT_S - 0.5 < time.perf_counter() - started < IDLE_TIMEOUT_S + 2
    assert received[-1]["error"]["code"] == "session_idle_timeout"
    assert socket.close_code == 1000
