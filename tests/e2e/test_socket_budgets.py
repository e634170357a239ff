"""Every socket message is paid for (issue #47, ``gateway/sessions/budget.py``), end to end on a real gateway: a client
that floods any of the three socket dialects gets its dialect's own error (``rate_limit_exceeded``) then close code
1008, through the clients the other tests use (the OpenAI SDK's realtime client; ``websockets`` as vLLM-Omni's and
Pipecat's ElevenLabs clients send); a session within the budget is served as before."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

import openai
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from auth.keys import generate_api_key, hash_api_key
from harness.gateway_process import GatewayProcess

if TYPE_CHECKING:
    from collections.abc import Iterator

    from openai.resources.realtime.realtime import AsyncRealtimeConnection
    from openai.types.realtime import RealtimeConversationItemUserMessageParam

KEY = generate_api_key()
MODEL = "gpt-realtime"
MESSAGES_PER_S = 20
BYTES_PER_S = 64 * 1024  # and the burst: the largest message (server.max_body_bytes)
CONVERSATION_CHARS = 8192
FLOOD = 200


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    config = {
        "server": {"send_timeout_s": 2.0},
        "realtime": {
            "idle_timeout_s": 10.0,
            "max_socket_messages_per_s": MESSAGES_PER_S,
            "max_socket_bytes_per_s": BYTES_PER_S,
            "socket_burst_s": 1.0,
            "max_conversation_chars": CONVERSATION_CHARS,
        },
        "auth": {"tenants": [{"name": "acme", "api_key_sha256": [hash_api_key(KEY)]}]},
        "engines": {"tones": {"kind": "synthetic", "workers": 1, "options": {"seconds_per_char": 0.01}}},
        "aliases": {MODEL: ["tones"], "tts-1": ["tones"], "eleven_multilingual_v2": ["tones"]},
    }
    with GatewayProcess(config, tmp_path_factory.mktemp("socket-budgets")) as process:
        yield process


def ws(gateway: GatewayProcess, path: str) -> str:
    return gateway.base_url.replace("http://", "ws://") + path


def user_message(text: str) -> RealtimeConversationItemUserMessageParam:
    """A user message of ``text``, in parts of at most 4,000 characters (a part holds at most 4,096)."""
    parts = [text[start : start + 4000] for start in range(0, len(text), 4000)]
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": part} for part in parts]}


def openai_client(gateway: GatewayProcess) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(api_key=KEY, base_url=f"{gateway.base_url}/v1", websocket_base_url=ws(gateway, "/v1"))


async def openai_events_until_closed(connection: AsyncRealtimeConnection) -> tuple[list[dict[str, Any]], int]:
    events: list[dict[str, Any]] = []
    with pytest.raises(ConnectionClosed) as closed:
        async with asyncio.timeout(15):
            while True:
                events.append((await connection.recv()).model_dump(mode="json"))
    assert closed.value.rcvd is not None, "the server did not send a close frame"
    return events, closed.value.rcvd.code


async def flood(socket: ClientConnection, message: str, count: int = FLOOD) -> None:
    """Send ``message`` ``count`` times as fast as the socket takes them, until the server closes it."""
    try:
        for _ in range(count):
            await socket.send(message)
    except ConnectionClosed:
        pass


async def until_closed(socket: ClientConnection) -> list[str | bytes]:
    received: list[str | bytes] = []
    with pytest.raises(ConnectionClosed):
        async with asyncio.timeout(15):
            while True:
                received.append(await socket.recv())
    return received


def errors(received: list[str | bytes]) -> list[dict[str, Any]]:
    messages = [json.loads(frame) for frame in received if isinstance(frame, str)]
    return [m for m in messages if m.get("type") == "error" or ("error" in m and "code" in m)]


# ----------------------------------------------------------------- OpenAI Realtime
async def test_an_openai_realtime_item_flood_gets_an_error_then_1008(gateway: GatewayProcess) -> None:
    # 8,000 characters an item: 8 of them fit 64 KiB, but with each item's two echoes paid for only 3.
    item = user_message("x" * 8000)
    async with openai_client(gateway).realtime.connect(model=MODEL) as connection:
        assert (await connection.recv()).type == "session.created"
        for _ in range(20):
            try:
                await connection.conversation.item.create(item=item)
            except ConnectionClosed:
                break
        events, code = await openai_events_until_closed(connection)
    assert code == 1008
    assert events[-1]["type"] == "error"
    assert events[-1]["error"]["code"] == "rate_limit_exceeded"
    assert "bytes" in events[-1]["error"]["message"]
    added = [e for e in events if e["type"] == "conversation.item.added"]
    assert 1 <= len(added) <= 4, "echoes are paid for"
    assert "Traceback" not in gateway.log()


async def test_an_openai_realtime_message_flood_gets_an_error_then_1008(gateway: GatewayProcess) -> None:
    async with openai_client(gateway).realtime.connect(model=MODEL) as connection:
        assert (await connection.recv()).type == "session.created"
        for _ in range(FLOOD):
            try:
                await connection.send({"type": "conversation.item.retrieve", "item_id": "missing"})
            except ConnectionClosed:
                break
        events, code = await openai_events_until_closed(connection)
    assert code == 1008
    assert [e["error"]["code"] for e in events].count("item_not_found") <= MESSAGES_PER_S
    assert events[-1]["error"]["code"] == "rate_limit_exceeded"
    assert "messages" in events[-1]["error"]["message"]


async def test_an_openai_realtime_item_too_large_for_the_conversation_is_refused(gateway: GatewayProcess) -> None:
    async with openai_client(gateway).realtime.connect(model=MODEL) as connection:
        assert (await connection.recv()).type == "session.created"
        await connection.conversation.item.create(item=user_message("y" * (CONVERSATION_CHARS + 1)))
        event = (await connection.recv()).model_dump(mode="json")
        assert event["type"] == "error"
        assert event["error"]["code"] == "conversation_too_large"
        # The session goes on; items within the bound are kept, the oldest dropped to make room.
        await asyncio.sleep(1.0)  # the byte budget refills
        for word in ("first", "second"):
            await connection.conversation.item.create(item=user_message(word * (CONVERSATION_CHARS // 12)))
            assert (await connection.recv()).type == "conversation.item.added"
            assert (await connection.recv()).type == "conversation.item.done"
            await asyncio.sleep(0.5)
        await connection.response.create()
        while (event := (await connection.recv()).model_dump(mode="json"))["type"] != "response.done":
            assert event["type"] != "error", event
        assert event["response"]["status"] == "completed"


async def test_an_openai_realtime_session_within_its_budget_is_served(gateway: GatewayProcess) -> None:
    async with openai_client(gateway).realtime.connect(model=MODEL) as connection:
        assert (await connection.recv()).type == "session.created"
        for turn in range(3):
            await connection.conversation.item.create(item=user_message(f"Hello number {turn}."))
            await connection.response.create()
            while (event := (await connection.recv()).model_dump(mode="json"))["type"] != "response.done":
                assert event["type"] != "error", event
            assert event["response"]["status"] == "completed"


# ----------------------------------------------------------------- the gateway's protocol and vLLM-Omni's
async def test_a_native_append_flood_gets_an_error_then_1008(gateway: GatewayProcess) -> None:
    headers = {"Authorization": f"Bearer {KEY}"}
    async with connect(ws(gateway, "/v1/audio/speech/stream"), additional_headers=headers) as socket:
        await socket.send(json.dumps({"type": "session.update", "session": {"model": "tts-1", "voice": "alloy"}}))
        await flood(socket, json.dumps({"type": "input.append", "text": "a"}))
        received = await until_closed(socket)
    assert socket.close_code == 1008
    last = errors(received)[-1]
    assert last["type"] == "error"
    assert last["error"]["code"] == "rate_limit_exceeded"


async def test_a_vllm_omni_flood_gets_its_error_then_1008(gateway: GatewayProcess) -> None:
    headers = {"Authorization": f"Bearer {KEY}"}
    async with connect(ws(gateway, "/v1/audio/speech/stream"), additional_headers=headers) as socket:
        await socket.send(json.dumps({"type": "session.config", "model": "tts-1", "voice": "alloy"}))
        await flood(socket, json.dumps({"type": "input.text", "text": "a"}))
        received = await until_closed(socket)
    assert socket.close_code == 1008
    last = errors(received)[-1]
    assert set(last) == {"type", "message"}, "vLLM-Omni's error: a type and a message"
    assert "Rate limit reached for socket messages" in last["message"]


async def test_a_native_session_within_its_budget_is_served(gateway: GatewayProcess) -> None:
    headers = {"Authorization": f"Bearer {KEY}"}
    async with connect(ws(gateway, "/v1/audio/speech/stream"), additional_headers=headers) as socket:
        await socket.send(json.dumps({"type": "session.update", "session": {"model": "tts-1", "voice": "alloy"}}))
        for piece in ("Hello ", "from ", "a polite ", "client."):
            await socket.send(json.dumps({"type": "input.append", "text": piece}))
        await socket.send(json.dumps({"type": "input.flush"}))
        async with asyncio.timeout(10):
            while (event := json.loads(await socket.recv()))["type"] != "audio.done":
                assert event["type"] != "error", event
        assert event["status"] == "completed"


# ----------------------------------------------------------------- ElevenLabs
def elevenlabs_url(gateway: GatewayProcess) -> str:
    path = "/v1/text-to-speech/alloy/multi-stream-input?model_id=eleven_multilingual_v2&output_format=pcm_24000"
    return ws(gateway, path)


async def test_an_elevenlabs_flood_gets_its_error_then_1008(gateway: GatewayProcess) -> None:
    async with connect(elevenlabs_url(gateway), additional_headers={"xi-api-key": KEY}, max_size=None) as socket:
        await flood(socket, json.dumps({"text": ""}))  # keep-alives, which cost nothing else
        received = await until_closed(socket)
    assert socket.close_code == 1008
    last = errors(received)[-1]
    assert last == {"message": last["message"], "error": "rate_limit_exceeded", "code": 429}


async def test_an_elevenlabs_session_within_its_budget_is_served(gateway: GatewayProcess) -> None:
    async with connect(elevenlabs_url(gateway), additional_headers={"xi-api-key": KEY}, max_size=None) as socket:
        await socket.send(json.dumps({"text": " ", "context_id": "turn"}))
        for piece in ("Hello from ", "a polite client."):
            await socket.send(json.dumps({"text": piece, "context_id": "turn"}))
        await socket.send(json.dumps({"context_id": "turn", "flush": True}))
        await socket.send(json.dumps({"context_id": "turn", "close_context": True}))
        async with asyncio.timeout(10):
            while not (message := json.loads(await socket.recv())).get("isFinal"):
                assert "error" not in message, message
