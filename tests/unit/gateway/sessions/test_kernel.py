"""The session kernel (``gateway/sessions/``) serves a dialect of a few dozen lines: ``Say``, below, speaks each text
message as raw PCM in binary frames, then ``{"done": seconds}``; an error is ``{"error": name}``, from a table of
its own that is not OpenAI's. It is what a new dialect costs (CONTRIBUTING.md, "How to add a socket dialect"), and it
checks what the kernel does for every dialect: the handshake refused in the dialect's words, each segment spoken
through the one pipeline and heard to its end, a failed segment an error in the dialect's words while the session goes
on, the kernel's own faults (a refused message, a socket over its budget) handed to the dialect's table as the neutral
``SessionError``, and the session's one log line. In process, espeak in a thread (``tests/inprocess.py``)."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING, Any

import pytest
from litestar import WebSocket, websocket
from litestar.exceptions import WebSocketDisconnect
from litestar.testing import TestClient

from gateway.audio import AudioFormat
from gateway.http.errors import OpenAIError
from gateway.schemas import SpeechRequest
from gateway.sessions.dialect import ProtocolError, Said
from gateway.sessions.ending import EndedByServer
from gateway.sessions.kernel import serve
from gateway.sessions.lanes import HeardClock, Tally, failure, play, stop
from gateway.sessions.serving import authenticated
from gateway.sessions.session_errors import SessionError
from gateway.speech.errors import SpeechError
from gateway.state import gateway_state
from gateway.text import Markup, MarkupError
from tests.inprocess import in_process_app
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator

    from litestar import Litestar

    from auth import Principal
    from gateway.sessions.dialect import Opened
    from gateway.settings import RealtimeSettings

RATE = 24_000
CONFIG: dict[str, Any] = {
    "engines": {"chattts": None, "espeak": {"kind": "espeak"}},
    "aliases": {"tts-1": ["espeak"]},
    "realtime": {"max_socket_messages_per_s": 1, "socket_burst_s": 3},  # a socket's burst: three messages
}
SAID: list[BaseException] = []
"""Every failure the kernel asked the dialect to say, as it reached the dialect's table."""


# ----------------------------------------------------------------- the whole dialect
def _name(failure: BaseException) -> str:
    """The dialect's own error table: a name for each failure, in no other API's words."""
    if isinstance(failure, SessionError):
        return f"session/{failure.code}"
    if isinstance(failure, SpeechError):
        return f"speech/{failure.kind}"
    return "markup" if isinstance(failure, MarkupError) else "internal"


class _SaySession(EndedByServer):
    def __init__(self, opened: Opened, voice: str) -> None:
        super().__init__()
        self._speaker, self._voice, self._tally = opened.speaker, voice, Tally("lines")
        self._channel = opened.channel(self._busy)

    def _busy(self) -> bool:
        return False  # a line is spoken while the receiver waits for it: never idle meanwhile

    def _request(self, text: str) -> SpeechRequest:
        return SpeechRequest(model="tts-1", input=text, voice=self._voice, response_format=AudioFormat.PCM)

    async def check(self) -> None:
        await self._speaker.check(self._request("-"))

    async def run(self) -> None:
        receiver = asyncio.create_task(self._receive())
        try:
            await self._until_ended(receiver)
        finally:
            await stop(receiver)

    def log_fields(self) -> dict[str, Any]:
        return self._tally.fields()

    async def _receive(self) -> None:
        while (message := await self._channel.receive())["type"] != "websocket.disconnect":
            try:
                if (text := message.get("text")) is None:
                    raise ProtocolError("Send text.", code="binary_frame")
                await self._say(str(text))
            except Exception as exc:
                said = failure(exc, "say line", lambda failed: _name(failed) == "internal")
                await self._channel.send(json.dumps({"error": _name(said)}))

    async def _say(self, text: str) -> None:
        clock = HeardClock()
        try:
            speaking = self._speaker.speak(self._request(text), record_id="line", markup=Markup.SSML)
            async with await speaking as reply:
                async for _, data in play(reply, clock, None):
                    if data:
                        await self._channel.send(data)
        finally:
            self._tally.add(clock.seconds)
        await self._channel.send(json.dumps({"done": clock.seconds}))


class _SaySocket:
    path = "/test/say"

    def __init__(self, socket: WebSocket[Any, Any, Any]) -> None:
        self._voice = socket.query_params.get("voice", "alloy")

    def say(self, failure: BaseException) -> Said:
        SAID.append(failure)
        name = _name(failure)
        event = json.dumps({"error": name})
        return Said(event, f"say: {name}", name, 418, {"say_error": name}, unexpected=name == "internal")

    async def caller(self, socket: WebSocket[Any, Any, Any], settings: RealtimeSettings) -> Principal:
        return await authenticated(socket, socket.headers.get("authorization"))

    def settings(self, tenant_settings: RealtimeSettings) -> RealtimeSettings:
        return tenant_settings

    def build(self, opened: Opened) -> _SaySession:
        return _SaySession(opened, self._voice)

    def subprotocol(self) -> str | None:
        return None


@websocket("/test/say")
async def say(socket: WebSocket[Any, Any, Any]) -> None:
    await serve(socket, _SaySocket(socket))


# ----------------------------------------------------------------- what the kernel does for it
@pytest.fixture(scope="module")
def client() -> Iterator[TestClient[Litestar]]:
    app = in_process_app(CONFIG, capacity=2)
    app.register(say)
    with TestClient(app=app) as client:
        yield client


def _line(socket: Any) -> tuple[bytes, dict[str, Any]]:
    """The audio of one line, and the message that ends it."""
    audio = b""
    while "bytes" in (message := socket.receive()) and message["bytes"]:
        audio += message["bytes"]
    return audio, json.loads(message["text"])


def test_a_dialect_speaks_each_segment_through_the_kernel_to_its_end(
    client: TestClient[Litestar], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="chattts_gateway.realtime")
    with client.websocket_connect("/test/say") as socket:
        socket.send_text("Hello there.")
        audio, done = _line(socket)
        socket.send_text("<speak>Broken <break time='x'/></speak>")
        failed = json.loads(socket.receive_text())
        socket.send_text("Two.")
        again, _ = _line(socket)
    assert len(audio) / 2 / RATE == pytest.approx(done["done"], abs=1e-6)
    assert done["done"] > 0.3
    assert failed == {"error": "markup"}  # the pipeline's refusal, in the dialect's words; the session goes on
    assert len(again) / 2 / RATE > 0.2  # "Two."

    def logged() -> list[dict[str, Any]]:
        lines = [getattr(r, "record", {}) for r in caplog.records if r.getMessage() == "realtime session"]
        return [line for line in lines if line.get("path") == "/test/say"]

    wait_until(lambda: bool(logged()), what="the session's log line")  # written once the server saw the close
    record = logged()[0]
    assert record["outcome"] == "closed"
    assert record["lines"] == 2
    assert record["audio_seconds"] == pytest.approx(done["done"] + len(again) / 2 / RATE, abs=1e-3)


def test_a_session_that_cannot_be_served_is_refused_at_the_handshake(client: TestClient[Litestar]) -> None:
    with pytest.raises(WebSocketDisconnect) as refused, client.websocket_connect("/test/say?voice=nobody") as socket:
        socket.receive_text()
    assert refused.value.code == 1008
    assert isinstance(SAID[-1], SpeechError)  # the domain's error reached the dialect's table, not OpenAI's object
    assert SAID[-1].kind == "voice_not_offered"


def test_the_kernels_own_faults_reach_the_dialects_table_as_neutral_errors(
    client: TestClient[Litestar], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="chattts_gateway.realtime")
    SAID.clear()
    received: list[dict[str, Any]] = []
    with pytest.raises(WebSocketDisconnect) as closed, client.websocket_connect("/test/say") as socket:
        for _ in range(5):  # the burst is three messages: the fourth is over the socket's budget
            socket.send_bytes(b"\x00")
        while True:
            received.append(json.loads(socket.receive_text()))
    assert received[0] == {"error": "session/binary_frame"}  # a protocol fault, in the dialect's words; it goes on
    assert received[-1] == {"error": "session/rate_limit_exceeded"}  # the kernel's own close, said by the dialect
    assert closed.value.code == 1008
    assert closed.value.detail == "say: session/rate_limit_exceeded"  # the close reason is the dialect's too
    assert len(SAID) == 1
    over = SAID[0]
    assert isinstance(over, SessionError)
    assert not isinstance(over, OpenAIError)
    assert (over.status_code, over.code) == (429, "rate_limit_exceeded")


def test_a_bug_met_while_refusing_is_said_as_the_dialects_internal_error_and_logged(
    client: TestClient[Litestar], caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(authorization: str | None) -> Principal:
        raise RuntimeError("a bug in the authenticator")

    monkeypatch.setattr(gateway_state(client.app).authenticator, "authenticate", broken)
    caplog.set_level(logging.INFO, logger="chattts_gateway.realtime")
    with pytest.raises(WebSocketDisconnect) as refused, client.websocket_connect("/test/say") as socket:
        socket.receive_text()
    assert refused.value.code == 1013  # refused as the auth backend's failures are, in the dialect's words
    assert isinstance(SAID[-1], RuntimeError)
    logged = [r for r in caplog.records if r.getMessage() == "realtime session refused"]
    assert logged and logged[0].exc_info is not None and logged[0].exc_info[1] is SAID[-1]  # its traceback
