"""The realtime WebSocket, end to end: a real gateway, the ``websockets`` client, PyAV decoding the audio."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.client import ClientProtocol
from websockets.exceptions import ConnectionClosed
from websockets.uri import parse_uri

from auth.keys import generate_api_key, hash_api_key
from engines.synthetic import voice_frequency
from harness.gateway_process import GatewayProcess
from tests.audio_decode import SPEECH_FORMATS, decode_audio, dominant_frequency
from tests.realtime_client import Session, open_connections
from tests.waiting import wait_for

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

SECONDS_PER_CHAR = 0.02
IDLE_TIMEOUT_S = 3.0
# Silence that ending a segment may add to the stream (measured at most 0.33 s: Opus at half speed).
SEGMENT_PAD_S = 0.35
KEY = generate_api_key()
ONE_STREAM_KEY = generate_api_key()
TWO_SESSIONS_KEY = generate_api_key()
SMALL_BUDGET_KEY = generate_api_key()
PARAGRAPH = (
    "The quick brown fox jumps over the lazy dog. Speech should start before this paragraph is typed out! "
    "Does it? It does, sentence by sentence."
)


def realtime_config() -> dict[str, Any]:
    return {
        "server": {"send_timeout_s": 2.0},
        "realtime": {"auth_timeout_s": 1.0, "idle_timeout_s": IDLE_TIMEOUT_S, "max_unauthenticated": 2},
        "auth": {
            "tenants": [
                {"name": "acme", "api_key_sha256": [hash_api_key(KEY)]},
                {"name": "solo", "api_key_sha256": [hash_api_key(ONE_STREAM_KEY)], "limits": {"concurrent_streams": 1}},
                {"name": "pair", "api_key_sha256": [hash_api_key(TWO_SESSIONS_KEY)], "limits": {"open_sessions": 2}},
                {
                    "name": "frugal",
                    "api_key_sha256": [hash_api_key(SMALL_BUDGET_KEY)],
                    "limits": {"characters_per_minute": 60},
                },
            ]
        },
        "engines": {
            "tones": {"kind": "synthetic", "workers": 1, "options": {"seconds_per_char": SECONDS_PER_CHAR}},
            # Real-time pacing: a 100-character segment takes 5 s to speak, so there is time to interrupt it.
            "paced": {"kind": "synthetic", "workers": 1, "options": {"rtf": 1.0, "seconds_per_char": 0.05}},
            # Long audio produced at full speed: more than any socket buffer holds, for the slow-reader test.
            "long": {"kind": "synthetic", "workers": 1, "options": {"seconds_per_char": 1.0, "chunk_ms": 500}},
        },
        "aliases": {"tts-1": ["tones"]},
    }


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with GatewayProcess(realtime_config(), tmp_path_factory.mktemp("realtime")) as process:
        yield process


def ws_url(gateway: GatewayProcess, query: str = "") -> str:
    return gateway.base_url.replace("http://", "ws://") + "/v1/audio/speech/stream" + query


@pytest.fixture
async def open_session(gateway: GatewayProcess) -> AsyncIterator[Any]:
    sockets: list[ClientConnection] = []

    async def open_(key: str = KEY, **session: Any) -> Session:
        socket = await connect(ws_url(gateway), additional_headers={"Authorization": f"Bearer {key}"})
        sockets.append(socket)
        opened = Session(socket)
        await opened.next("session.created")
        if session:
            await opened.send(type="session.update", session=session)
            await opened.next("session.updated")
        return opened

    yield open_
    for opened in sockets:
        await opened.close()


def engine_state(gateway: GatewayProcess, name: str) -> dict[str, Any]:
    return gateway.engine(name)


async def wait_idle(gateway: GatewayProcess, engine: str, timeout_s: float) -> float:
    """Seconds until the engine has no job running or queued; fails after ``timeout_s``."""
    started = time.perf_counter()
    while time.perf_counter() - started < timeout_s:
        state = await asyncio.to_thread(engine_state, gateway, engine)
        if state["active_jobs"] == 0 and state["queued"] == 0:
            return time.perf_counter() - started
        await asyncio.sleep(0.05)
    pytest.fail(f"engine {engine} still busy after {timeout_s} s: {engine_state(gateway, engine)}")


async def wait_closed(gateway: GatewayProcess, timeout_s: float = 3.0) -> None:
    deadline = time.perf_counter() + timeout_s
    while await asyncio.to_thread(open_connections, gateway) and time.perf_counter() < deadline:
        await asyncio.sleep(0.05)


# ----------------------------------------------------------------------------------------------------------------
# speech as text arrives


@pytest.mark.parametrize("fmt", SPEECH_FORMATS)
async def test_fragments_become_one_stream_that_starts_before_the_text_ends(open_session: Any, fmt: str) -> None:
    session = await open_session(model="tones", voice="nova", response_format=fmt)
    reader = asyncio.create_task(session.until_closed())
    last_sent = 0.0
    for start in range(0, len(PARAGRAPH), 6):
        last_sent = await session.send(type="input.append", text=PARAGRAPH[start : start + 6])
        await asyncio.sleep(0.01)
    await session.send(type="session.close")
    await reader

    deltas, done = session.of("audio.delta"), session.of("audio.done")
    first_delta_at = next(at for at, event in session.events if event["type"] == "audio.delta")
    assert first_delta_at < last_sent, "speech must start while text is still arriving"
    assert [d["text"] for d in done] == [
        "The quick brown fox jumps over the lazy dog.",
        "Speech should start before this paragraph is typed out!",
        "Does it?",
        "It does, sentence by sentence.",
    ]
    assert all(d["status"] == "completed" for d in done)
    assert [d["seq"] for d in deltas] == list(range(1, len(deltas) + 1))
    speech_s = sum(len(d["text"]) for d in done) * SECONDS_PER_CHAR
    assert sum(d["usage"]["output_tokens"] for d in done) == pytest.approx(speech_s * 50, abs=len(done))

    audio = decode_audio(session.audio(), fmt)  # one stream: it decodes from start to end as a whole
    assert speech_s - 0.05 <= audio.duration <= speech_s + len(done) * SEGMENT_PAD_S
    assert dominant_frequency(audio) == pytest.approx(voice_frequency("nova"), abs=3)


async def test_flush_speaks_a_partial_sentence_and_appends_alone_do_not(open_session: Any) -> None:
    session = await open_session(model="tones")
    await session.send(type="input.append", text="no full stop in sight")
    with pytest.raises(TimeoutError):
        await session.next("audio.delta", timeout_s=0.5)

    await session.send(type="input.flush")
    done = await session.next("audio.done")

    assert done["text"] == "no full stop in sight"
    assert done["status"] == "completed"
    assert len(session.of("audio.delta")) >= 1


async def test_cancel_stops_the_worker_within_a_second_and_the_session_goes_on(
    open_session: Any,
    gateway: GatewayProcess,
) -> None:
    session = await open_session(model="paced", response_format="pcm")
    long_sentence = "This sentence takes several seconds to say at real-time pace, which leaves time to cut in."
    await session.send(type="input.append", text=long_sentence + " A second sentence that is queued behind it. ")
    await session.send(type="input.flush")
    await session.next("audio.delta")

    cancelled_at = await session.send(type="response.cancel")
    first_done = await session.next("audio.done", timeout_s=1.0)
    second_done = await session.next("audio.done", timeout_s=1.0)
    idle_after = await wait_idle(gateway, "paced", timeout_s=1.0)

    assert (first_done["status"], second_done["status"]) == ("cancelled", "cancelled")
    assert first_done["usage"]["output_tokens"] < len(long_sentence) * 0.05 * 50 / 2
    assert time.perf_counter() - cancelled_at - idle_after < 1.0
    deltas_before = len(session.of("audio.delta"))
    await session.send(type="input.append", text="Still here.")
    await session.send(type="input.flush")
    done = await session.next("audio.done")
    assert (done["text"], done["status"]) == ("Still here.", "completed")
    assert len(session.of("audio.delta")) > deltas_before


# ----------------------------------------------------------------------------------------------------------------
# bad input: error events, and the session lives on


async def test_bad_messages_get_error_events_and_the_session_survives(open_session: Any) -> None:
    session = await open_session(model="tones")
    cases: list[tuple[str | bytes, str, str | None]] = [
        ("{not json", "invalid_json", None),
        (json.dumps({"type": "input.shout", "event_id": "e1"}), "unknown_event", "type"),
        (json.dumps([1, 2]), "invalid_event", None),
        (json.dumps({"type": "session.update", "session": {"voice": "nobody"}}), "invalid_value", "session.voice"),
        (json.dumps({"type": "session.update", "session": {"speed": 9}}), "invalid_value", "session.speed"),
        (json.dumps({"type": "session.update", "session": {"model": "nope"}}), "model_not_found", "session.model"),
        (json.dumps({"type": "input.append", "text": "x" * 4097}), "string_above_max_length", "text"),
        (json.dumps({"type": "input.append"}), "invalid_value", "text"),
        (json.dumps({"type": "session.update", "token": KEY}), "unexpected_token", "token"),
        (b"\x00binary", "invalid_event", None),
    ]
    for message, code, param in cases:
        await session.socket.send(message)
        error = (await session.next("error"))["error"]
        assert (error["code"], error["param"]) == (code, param), message
        assert error["type"] == "invalid_request_error"
        assert error["message"]
    assert session.of("error")[1]["event_id"] == "e1"

    await session.send(type="input.append", text="Alive and well. ")
    assert (await session.next("audio.done"))["status"] == "completed"


async def test_format_cannot_change_once_audio_flows(open_session: Any) -> None:
    session = await open_session(model="tones", response_format="wav")
    await session.send(type="session.update", session={"voice": "echo"})  # the voice may change at any time
    await session.next("session.updated")
    await session.send(type="input.append", text="First words. ")
    await session.next("audio.done")

    await session.send(type="session.update", session={"response_format": "mp3"})
    error = (await session.next("error"))["error"]

    assert (error["code"], error["param"]) == ("session_locked", "session.response_format")


# ----------------------------------------------------------------------------------------------------------------
# leaving, limits and authentication


async def test_closing_mid_stream_releases_worker_lease_and_connection(
    open_session: Any,
    gateway: GatewayProcess,
) -> None:
    session = await open_session(ONE_STREAM_KEY, model="paced")
    await session.send(type="input.append", text="A long sentence that would take a few seconds to speak in full. ")
    await session.next("audio.delta")
    await session.socket.close()

    await wait_idle(gateway, "paced", timeout_s=2.0)
    await wait_closed(gateway)
    assert open_connections(gateway) == 0
    ended = [json.loads(line) for line in gateway.log().splitlines() if '"realtime session"' in line]
    mine = [entry for entry in ended if entry["tenant"] == "solo" and entry["outcome"] == "closed"]
    # One JSON line per session, and the audio it had spoken counts.
    assert mine, [(e["tenant"], e["outcome"]) for e in ended]
    assert mine[-1]["segments"] == 1
    assert mine[-1]["audio_seconds"] > 0
    again = await open_session(ONE_STREAM_KEY)  # the tenant's only stream is free again
    await again.send(type="input.append", text="Hello again. ")
    assert (await again.next("audio.done"))["status"] == "completed"


async def test_a_second_session_over_the_concurrency_limit_is_refused(
    open_session: Any,
    gateway: GatewayProcess,
) -> None:
    await wait_closed(gateway)  # an earlier test's session may still be releasing this tenant's stream
    await open_session(ONE_STREAM_KEY)
    async with connect(ws_url(gateway), additional_headers={"Authorization": f"Bearer {ONE_STREAM_KEY}"}) as socket:
        error = json.loads(await socket.recv())
        with pytest.raises(ConnectionClosed) as closed:
            await socket.recv()
    assert error["error"]["code"] == "concurrency_limit_exceeded"
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 1013


async def test_a_tenant_holds_at_most_its_open_sessions(open_session: Any, gateway: GatewayProcess) -> None:
    """Before: nothing capped the sessions a tenant without a stream limit held (1,000 idle sessions of one tenant
    took every connection). Over ``open_sessions`` a session is refused at once, the others are untouched."""
    await wait_closed(gateway)  # an earlier test's sessions are gone: the count below is this test's
    first = await open_session(TWO_SESSIONS_KEY)
    await open_session(TWO_SESSIONS_KEY)
    async with connect(ws_url(gateway), additional_headers={"Authorization": f"Bearer {TWO_SESSIONS_KEY}"}) as socket:
        error = json.loads(await socket.recv())
        with pytest.raises(ConnectionClosed) as closed:
            await socket.recv()
    assert (error["error"]["code"], error["error"]["message"]) == (
        "concurrency_limit_exceeded",
        "Too many open sessions for your tenant. Retry after 1 s.",
    )
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 1013
    await first.send(type="input.append", text="Still here.")
    await first.send(type="input.flush")
    await first.next("audio.done")
    await first.socket.close()
    await wait_for(lambda: open_connections(gateway) <= 1, what="the server ending the first session")
    await open_session(TWO_SESSIONS_KEY)  # the closed session's place is free again


async def test_an_idle_session_is_closed_but_not_while_it_speaks(open_session: Any, gateway: GatewayProcess) -> None:
    await wait_closed(gateway)  # an earlier test's session may still be releasing this tenant's stream
    session = await open_session(ONE_STREAM_KEY, model="paced")
    # 84 characters at 0.05 s each, spoken in real time: 4.2 s of speech, longer than the idle timeout.
    text = "This sentence is long enough to keep speaking past the idle timeout of the session. "
    await session.send(type="input.append", text=text)
    done = await session.next("audio.done", timeout_s=15)
    done_at = time.perf_counter()
    await session.until_closed(timeout_s=IDLE_TIMEOUT_S + 5)
    idle_for = time.perf_counter() - done_at

    assert done["status"] == "completed", "a client listening to speech is not idle"
    assert [event["error"]["code"] for event in session.of("error")] == ["session_idle_timeout"]
    assert session.socket.close_code == 1000
    assert IDLE_TIMEOUT_S - 0.5 <= idle_for <= IDLE_TIMEOUT_S + 3
    await wait_closed(gateway)
    ended = [json.loads(line) for line in gateway.log().splitlines() if '"realtime session"' in line]
    assert any(entry["tenant"] == "solo" and entry["outcome"] == "idle timeout" for entry in ended)
    again = await open_session(ONE_STREAM_KEY)  # the idle session's stream lease was released
    await again.send(type="input.append", text="Hello again. ")
    assert (await again.next("audio.done"))["status"] == "completed"


async def test_characters_are_limited_per_segment(open_session: Any) -> None:
    session = await open_session(SMALL_BUDGET_KEY, model="tones")
    await session.send(type="input.append", text="Forty characters of text fit the budget. ")
    assert (await session.next("audio.done"))["status"] == "completed"

    await session.send(type="input.append", text="These forty characters no longer fit it. ")
    error = await session.next("error")
    done = await session.next("audio.done")

    assert error["error"]["code"] == "rate_limit_exceeded"
    assert error["segment_id"] == done["segment_id"]
    assert (done["status"], done["usage"]["output_tokens"]) == ("failed", 0)
    assert done["usage"]["input_tokens"] == 0  # refused: nothing charged, as GET /v1/usage says


@pytest.mark.parametrize("how", ["header", "query", "first-message"])
async def test_credentials_by_header_query_or_first_message(gateway: GatewayProcess, how: str) -> None:
    url = ws_url(gateway, f"?token={KEY}" if how == "query" else "")
    headers = {"Authorization": f"Bearer {KEY}"} if how == "header" else {}
    async with connect(url, additional_headers=headers) as socket:
        if how == "first-message":
            await socket.send(json.dumps({"type": "session.update", "token": KEY, "session": {"model": "tones"}}))
        session = Session(socket)
        await session.next("session.created")
        if how == "first-message":
            assert (await session.next("session.updated"))["session"]["model"] == "tones"
        await session.send(type="input.append", text="Authenticated. ")
        assert (await session.next("audio.done"))["status"] == "completed"
    assert KEY not in gateway.log()  # uvicorn logs the path with its query string: the token must be redacted


@pytest.mark.parametrize("how", ["bad-header", "bad-first-message", "silence"])
async def test_bad_or_missing_credentials_close_the_socket(gateway: GatewayProcess, how: str) -> None:
    headers = {"Authorization": "Bearer sk-tts-wrong"} if how == "bad-header" else {}
    async with connect(ws_url(gateway), additional_headers=headers) as socket:
        if how == "bad-first-message":
            await socket.send(json.dumps({"type": "session.update", "token": "sk-tts-wrong"}))
        error = json.loads(await asyncio.wait_for(socket.recv(), 5))  # "silence": after auth_timeout_s (1 s)
        with pytest.raises(ConnectionClosed) as closed:
            await socket.recv()
    assert error["type"] == "error"
    assert error["error"]["code"] == "invalid_api_key"
    assert "sk-tts-wrong" not in json.dumps(error)
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 1008


async def test_sockets_waiting_for_credentials_are_capped_apart(gateway: GatewayProcess) -> None:
    """Before: every upgrade without credentials was accepted and held for auth_timeout_s, so sockets that never
    authenticate could take every connection."""
    async with connect(ws_url(gateway)) as first, connect(ws_url(gateway)) as second:
        await asyncio.sleep(0.2)  # both are waiting for their first message (max_unauthenticated: 2)
        async with connect(ws_url(gateway)) as third:
            error = json.loads(await asyncio.wait_for(third.recv(), 0.5))  # at once, not after auth_timeout_s
            with pytest.raises(ConnectionClosed) as closed:
                await third.recv()
        assert error["error"]["code"] == "too_many_connections"
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1013
        async with connect(ws_url(gateway), additional_headers={"Authorization": f"Bearer {KEY}"}) as with_header:
            await Session(with_header).next("session.created")  # credentials in the header never wait
        for waiting in (first, second):
            await waiting.send(json.dumps({"type": "session.update", "token": KEY, "session": {"model": "tones"}}))
            await Session(waiting).next("session.created")


def stalled_client(gateway: GatewayProcess, messages: list[dict[str, Any]]) -> socket.socket:
    """A WebSocket client that sends ``messages`` and then never reads again (websockets' sans-I/O protocol).

    Its receive buffer is small and fixed: Linux would otherwise grow it to 32 MiB on loopback. (Pausing an asyncio
    client's transport is not enough: the library resumes reading by itself.)
    """
    protocol = ClientProtocol(parse_uri(ws_url(gateway)))
    request = protocol.connect()
    request.headers["Authorization"] = f"Bearer {KEY}"
    protocol.send_request(request)
    raw = socket.socket()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
    raw.settimeout(5)
    raw.connect(("127.0.0.1", int(gateway.base_url.rsplit(":", 1)[1])))
    raw.sendall(b"".join(protocol.data_to_send()))
    protocol.receive_data(raw.recv(4096))  # the handshake's answer (and perhaps session.created)
    assert protocol.handshake_exc is None
    for message in messages:
        protocol.send_text(json.dumps(message).encode())
    raw.sendall(b"".join(protocol.data_to_send()))
    return raw


def audio_seconds_used(gateway: GatewayProcess) -> float:
    response = httpx.get(f"{gateway.base_url}/v1/usage", headers={"Authorization": f"Bearer {KEY}"}, timeout=5)
    assert response.status_code == 200, response.text
    return float(response.json()["audio_seconds"])


async def test_a_client_that_stops_reading_is_disconnected_and_its_synthesis_dropped(gateway: GatewayProcess) -> None:
    """Backpressure: the server stops producing once the socket is full, and gives up after send_timeout_s; the
    audio that went out before is still the tenant's usage."""
    used_before = await asyncio.to_thread(audio_seconds_used, gateway)
    raw = stalled_client(
        gateway,
        [
            {"type": "session.update", "session": {"model": "long"}},
            {"type": "input.append", "text": "x" * 400},  # 400 s of audio, made at once
            {"type": "input.flush"},
        ],
    )
    try:
        started = time.perf_counter()
        await asyncio.sleep(1.0)
        await wait_idle(gateway, "long", timeout_s=10.0)
        await wait_closed(gateway, timeout_s=10.0)
        waited = time.perf_counter() - started
        assert await asyncio.to_thread(open_connections, gateway) == 0
    finally:
        raw.close()
    assert waited < 2.0 + 5.0  # send_timeout_s, and a margin for this 2-core machine
    # Sent before the socket filled: at least the half-second chunks of its 16 KiB of buffer (Opus is smaller).
    assert await asyncio.to_thread(audio_seconds_used, gateway) >= used_before + 0.5
