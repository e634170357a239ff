"""The realtime protocol's messages: what clients send (validated here) and what the server sends back.

Every message is one JSON text frame with a ``type``. The protocol is documented for clients in ``docs/realtime.md``.
"""

from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, TypeAdapter, ValidationError

from gateway.audio.formats import AudioFormat
from gateway.http.errors import OpenAIError, error_body
from gateway.http.json_depth import json_depth_exceeds
from gateway.schemas import MAX_INPUT_CHARS, MAX_SEED, CustomVoice, SpeechRequest, SpeechUsage
from gateway.sessions.dialect import ProtocolError

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Self

    from gateway.speech.alignment import WordTime

__all__ = [
    "ClientEvent",
    "InputAppend",
    "InputFlush",
    "ProtocolError",
    "ResponseCancel",
    "SessionClose",
    "SessionConfig",
    "SessionUpdate",
    "audio_delta",
    "audio_done",
    "audio_words",
    "error_event",
    "parse_client_event",
    "session_event",
]

SegmentStatus = Literal["completed", "cancelled", "failed"]


class SessionConfig(BaseModel):
    """How a session speaks: the fields of a speech request that are not the text."""

    model_config = ConfigDict(extra="forbid")

    model: Annotated[str, StringConstraints(min_length=1, max_length=256)] = "tts-1"
    voice: Annotated[str, StringConstraints(min_length=1, max_length=256)] | CustomVoice = "alloy"
    response_format: AudioFormat = AudioFormat.PCM
    speed: Annotated[float, Field(ge=0.25, le=4.0, strict=True)] = 1.0
    instructions: Annotated[str | None, Field(max_length=MAX_INPUT_CHARS)] = None
    word_timestamps: bool = False
    """Send ``audio.words`` events: when each word of a segment is heard (off by default: the events are an addition
    to the protocol's sequence)."""
    seed: Annotated[int | None, Field(ge=0, le=MAX_SEED, strict=True)] = None
    """Every segment sampled with this seed (``POST /v1/audio/speech``'s ``seed``): the same text, the same audio on
    ChatTTS."""

    def speech_request(self, text: str) -> SpeechRequest:
        """The HTTP endpoint's request for ``text`` spoken this way as raw 24 kHz PCM (one segment is exactly such a
        request), which the session encodes into its one stream of ``response_format``."""
        return SpeechRequest(
            model=self.model,
            input=text,
            voice=self.voice,
            response_format=AudioFormat.PCM,
            speed=self.speed,
            instructions=self.instructions,
            seed=self.seed,
        )


class _SessionPatch(BaseModel):
    """``session.update``'s ``session``: the fields to change."""

    model_config = ConfigDict(extra="forbid")

    model: Annotated[str, StringConstraints(min_length=1, max_length=256)] | None = None
    voice: Annotated[str, StringConstraints(min_length=1, max_length=256)] | CustomVoice | None = None
    response_format: AudioFormat | None = None
    speed: Annotated[float, Field(ge=0.25, le=4.0, strict=True)] | None = None
    instructions: Annotated[str | None, Field(max_length=MAX_INPUT_CHARS)] = None
    word_timestamps: Annotated[bool, Field(strict=True)] | None = None
    seed: Annotated[int | None, Field(ge=0, le=MAX_SEED, strict=True)] = None


class _ClientEventBase(BaseModel):
    model_config = ConfigDict(extra="forbid")

    event_id: Annotated[str, StringConstraints(max_length=128)] | None = None
    """The client's own id for the event, echoed in an ``error`` about it."""


class SessionUpdate(_ClientEventBase):
    type: Literal["session.update"]
    session: _SessionPatch = Field(default_factory=_SessionPatch)
    token: Annotated[str, StringConstraints(max_length=8192)] | None = None
    """An API key or JWT, for clients that cannot set headers; only in the first message of the socket."""

    @classmethod
    def replacing(cls, config: SessionConfig, **fields: Any) -> Self:
        """An update that sets every setting to ``config``'s: for a dialect whose configuration replaces the
        session's rather than patching it; ``fields``: those of a subclass."""
        patch = _SessionPatch(**{name: getattr(config, name) for name in SessionConfig.model_fields})
        return cls(type="session.update", session=patch, **fields)

    def apply(self, config: SessionConfig) -> SessionConfig:
        return config.model_copy(update=self.session.model_dump(exclude_unset=True))

    def changes(self, config: SessionConfig) -> set[str]:
        """The names of the fields this update gives a different value."""
        updated = self.apply(config)
        return {name for name in self.session.model_fields_set if getattr(updated, name) != getattr(config, name)}


class InputAppend(_ClientEventBase):
    type: Literal["input.append"]
    text: Annotated[str, Field(max_length=MAX_INPUT_CHARS)]


class InputFlush(_ClientEventBase):
    type: Literal["input.flush"]


class ResponseCancel(_ClientEventBase):
    type: Literal["response.cancel"]


class SessionClose(_ClientEventBase):
    type: Literal["session.close"]


ClientEvent = SessionUpdate | InputAppend | InputFlush | ResponseCancel | SessionClose
_CLIENT_EVENT: TypeAdapter[ClientEvent] = TypeAdapter(Annotated[ClientEvent, Field(discriminator="type")])
_CLIENT_TYPES = ("session.update", "input.append", "input.flush", "response.cancel", "session.close")


#: The deepest nesting a client message may have; a valid one needs three levels. Checked before parsing, because
#: ``json`` recurses per level and fails with a ``RecursionError`` (the session's end) at about 1,000.
MAX_MESSAGE_DEPTH = 32


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
