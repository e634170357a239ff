"""The events of a session of text streamed in (``/v1/audio/speech/stream``), whichever dialect its client speaks:
what a client asks of the session, as this gateway's own protocol says it (``gateway/native/protocol.py`` parses
and renders that protocol's frames; vLLM-Omni's dialect, ``gateway/vllm_omni/dialect.py``, translates into them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from gateway.audio.formats import AudioFormat
from gateway.schemas import MAX_INPUT_CHARS, MAX_SEED, CustomVoice, SpeechRequest
from gateway.sessions.dialect import ProtocolError

if TYPE_CHECKING:
    from typing import Self

__all__ = [
    "MAX_MESSAGE_DEPTH",
    "ClientEvent",
    "InputAppend",
    "InputFlush",
    "ProtocolError",
    "ResponseCancel",
    "SegmentStatus",
    "SessionClose",
    "SessionConfig",
    "SessionUpdate",
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
        return SpeechRequest.pcm_segment(text, self, self.instructions)


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


#: The deepest nesting a client message may have; a valid one needs three levels. Checked before parsing, because
#: ``json`` recurses per level and fails with a ``RecursionError`` (the session's end) at about 1,000.
MAX_MESSAGE_DEPTH = 32
