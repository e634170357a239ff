"""ElevenLabs' WebSocket reads each message's markup (``gateway/elevenlabs/session.py``), in process with espeak in a
thread (``tests/inprocess.py``); apart from ``test_ssml_speech.py``, whose app lives for its whole module (one app a
process at a time: the metrics registry is global)."""

from __future__ import annotations

import base64
import json
from typing import Any

from litestar.testing import TestClient

from tests.inprocess import in_process_app

RATE = 24_000
CONFIG: dict[str, Any] = {"engines": {"chattts": None, "espeak": {"kind": "espeak"}}, "aliases": {"tts-1": ["espeak"]}}


def test_the_elevenlabs_websocket_reads_each_messages_markup() -> None:
    """A message with markup is one piece of its own: its break an exact silence, its SSML read with
    ``enable_ssml_parsing``, its alignment the text spoken; malformed SSML is an error message, and the context goes
    on."""
    path = "/v1/text-to-speech/alloy/multi-stream-input?output_format=pcm_24000&enable_ssml_parsing=true"
    with TestClient(app=in_process_app(CONFIG, capacity=2)) as client, client.websocket_connect(path) as socket:
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
    assert "".join(characters) == " One. Two."  # the space before the piece after the failed one
    assert 2.1 < len(audio) / 2 / RATE < 2.3  # "One." and "Two." (about 0.33 s each) around 1.5 s of silence
