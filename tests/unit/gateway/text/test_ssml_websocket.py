"""The realtime sessions read each message's markup: ElevenLabs' WebSocket (break tags; SSML with
``enable_ssml_parsing``), this gateway's and OpenAI's Realtime (SSML). In process, espeak in a thread
(``tests/inprocess.py``); apart from ``test_ssml_speech.py``, whose app lives for its whole module (one app a process
at a time: the metrics registry is global)."""

from __future__ import annotations

import base64
import contextlib
import json
from typing import TYPE_CHECKING, Any

import pytest
from litestar.exceptions import WebSocketDisconnect
from litestar.testing import TestClient

from tests.inprocess import in_process_app

if TYPE_CHECKING:
    from collections.abc import Iterator

    from litestar import Litestar

RATE = 24_000
CONFIG: dict[str, Any] = {
    "engines": {"chattts": None, "espeak": {"kind": "espeak"}},
    "aliases": {"tts-1": ["espeak"], "gpt-realtime-mini": ["espeak"]},
}
ONE_BREAK_TWO = 2.18
"""Seconds of "One.", 1.5 s of silence and "Two." (about 0.33 s each) in espeak's alloy."""


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient[Litestar]]:
    with TestClient(app=in_process_app(CONFIG, capacity=2)) as client:
        yield client


def test_the_elevenlabs_websocket_reads_each_messages_markup(client: TestClient[Litestar]) -> None:
    """A message with markup is one piece of its own: its break an exact silence, its SSML read with
    ``enable_ssml_parsing``, its alignment the text spoken; malformed SSML is an error message, and the context goes
    on."""
    path = "/v1/text-to-speech/alloy/multi-stream-input?output_format=pcm_24000&enable_ssml_parsing=true"
    with client.websocket_connect(path) as socket:
        socket.send_text(json.dumps({"text": " ", "context_id": "c"}))
        socket.send_text(json.dumps({"text": "<speak>Broken <break time='x'/></speak>", "context_id": "c"}))
        socket.send_text(json.dumps({"text": 'One. <break time="1.5s"/> <sub alias="Two">2</sub>.', "context_id": "c"}))
        socket.send_text(json.dumps({"context_id": "c", "flush": True}))
        socket.send_text(json.dumps({"context_id": "c", "close_context": True}))
        audio, characters, errors = b"", [], []
        while not (message := json.loads(socket.receive_text())).get("isFinal"):
            audio += base64.b64decode(message.get("audio") or "")
            characters += (message.get("alignment") or {}).get("chars", [])
            errors += [message["message"]] if "error" in message else []
    assert len(errors) == 1
    assert "line 1, column 15" in errors[0]
    assert "".join(characters) == "One. Two. "  # each piece spoken ends with a space, as ElevenLabs' do
    assert abs(len(audio) / 2 / RATE - ONE_BREAK_TWO) < 0.05


def test_this_gateways_realtime_speaks_an_ssml_message_as_one_segment(client: TestClient[Litestar]) -> None:
    with client.websocket_connect("/v1/audio/speech/stream") as socket:
        session = {"voice": "alloy", "response_format": "pcm"}
        socket.send_text(json.dumps({"type": "session.update", "session": session}))
        socket.send_text(json.dumps({"type": "input.append", "text": '<speak>One.<break time="1500ms"/>Two.</speak>'}))
        socket.send_text(json.dumps({"type": "session.close"}))
        audio = b""
        with contextlib.suppress(WebSocketDisconnect):  # the gateway closes the session once it has spoken
            while event := json.loads(socket.receive_text()):
                assert event["type"] != "error", event
                audio += base64.b64decode(event["audio"]) if event["type"] == "audio.delta" else b""
    assert abs(len(audio) / 2 / RATE - ONE_BREAK_TWO) < 0.05


def test_openais_realtime_speaks_an_ssml_response(client: TestClient[Litestar]) -> None:
    with client.websocket_connect("/v1/realtime?model=gpt-realtime-mini") as socket:
        text = '<speak>One.<break time="1500ms"/>Two.</speak>'
        content = [{"type": "input_text", "text": text}]
        response = {"conversation": "none", "input": [{"type": "message", "role": "user", "content": content}]}
        socket.send_text(json.dumps({"type": "response.create", "response": response}))
        audio = b""
        while (event := json.loads(socket.receive_text()))["type"] != "response.done":
            assert event["type"] != "error", event
            if event["type"] == "response.output_audio.delta":
                audio += base64.b64decode(event["delta"])
    assert event["response"]["status"] == "completed"
    assert abs(len(audio) / 2 / RATE - ONE_BREAK_TWO) < 0.05
