"""This gateway's realtime protocol on the wire: what clients send (validated here into the session's events,
``gateway/sessions/stream_events.py``) and what the server sends back.

Every message is one JSON text frame with a ``type``. The protocol is documented for clients in ``docs/realtime.md``.
"""

from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, TypeAdapter, ValidationError

from gateway.http.errors import OpenAIError, error_body
from gateway.http.json_depth import json_depth_exceeds
from gateway.sessions.dialect import ProtocolError
from gateway.sessions.stream_events import MAX_MESSAGE_DEPTH, ClientEvent

if TYPE_CHECKING:
    from collections.abc import Sequence

    from gateway.schemas import SpeechUsage
    from gateway.sessions.stream_events import SegmentStatus, SessionConfig
    from gateway.speech.alignment import WordTime

__all__ = ["audio_delta", "audio_done", "audio_words", "error_event", "parse_client_event", "session_event"]

_CLIENT_EVENT: TypeAdapter[ClientEvent] = TypeAdapter(Annotated[ClientEvent, Field(discriminator="type")])
_CLIENT_TYPES = ("session.update", "input.append", "input.flush", "response.cancel", "session.close")


def parse_client_event(text: str, *, max_depth: int = MAX_MESSAGE_DEPTH) -> ClientEvent:
    """One client message, validated.

    Raises:
        ProtocolError: not JSON, nested deeper than ``max_depth``, not an object, an unknown ``type`` or an invalid
            field.
    """
    if json_depth_exceeds(text, max_depth):
        raise ProtocolError(f"The message is nested deeper than {max_depth} levels.", code="json_too_deep")
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProtocolError(f"The message is not valid JSON: {exc.msg}.", code="invalid_json") from None
    if not isinstance(raw, dict):
        raise ProtocolError("A message must be a JSON object with a 'type'.", code="invalid_event")
    event_id = raw.get("event_id") if isinstance(raw.get("event_id"), str) else None
    if raw.get("type") not in _CLIENT_TYPES:
        raise ProtocolError(
            f"Unknown event type {raw.get('type')!r}; expected one of {', '.join(_CLIENT_TYPES)}.",
            code="unknown_event",
            param="type",
            event_id=event_id,
        )
    try:
        return _CLIENT_EVENT.validate_python(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = ".".join(str(part) for part in first["loc"][1:]) or None  # loc[0] is the event type's tag
        code = "string_above_max_length" if first["type"] == "string_too_long" else "invalid_value"
        raise ProtocolError(
            f"Invalid value for '{param}': {first['msg']}.", code=code, param=param, event_id=event_id
        ) from None


def session_event(kind: Literal["session.created", "session.updated"], session_id: str, config: SessionConfig) -> str:
    return _dump({"type": kind, "session": {"id": session_id, **config.model_dump(mode="json")}})


def audio_delta(segment_id: str | None, seq: int, audio: bytes) -> str:
    return _dump(
        {"type": "audio.delta", "segment_id": segment_id, "seq": seq, "audio": base64.b64encode(audio).decode("ascii")}
    )


def audio_done(segment_id: str, text: str, status: SegmentStatus, usage: SpeechUsage) -> str:
    return _dump(
        {"type": "audio.done", "segment_id": segment_id, "text": text, "status": status, "usage": usage.model_dump()}
    )


def audio_words(segment_id: str, text: str, words: Sequence[WordTime]) -> str:
    """``audio.words``: words of a segment's ``text`` and when they are heard, in milliseconds from the segment's first
    audio."""
    return _dump(
        {
            "type": "audio.words",
            "segment_id": segment_id,
            "words": [
                {
                    "text": text[w.char_start : w.char_end],
                    "start_ms": round(w.start_s * 1000),
                    "end_ms": round(w.end_s * 1000),
                    "char_start": w.char_start,
                    "char_end": w.char_end,
                }
                for w in words
            ],
        }
    )


def error_event(error: OpenAIError, *, event_id: str | None = None, segment_id: str | None = None) -> str:
    body = error_body(error.message, error.type, error.param, error.code)
    return _dump({"type": "error", **body, "event_id": event_id, "segment_id": segment_id})


def _dump(event: dict[str, Any]) -> str:
    return json.dumps(event, separators=(",", ":"))
