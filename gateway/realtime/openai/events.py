"""OpenAI Realtime (GA) events for a speech-only session: client events parsed and validated, server events built.

Names and shapes are OpenAI's, as the openai-python SDK types them (``openai.types.realtime``), so that the SDK and
clients written against OpenAI work unchanged. The session is a speaker, not a model: a response speaks the text of
the conversation (or of its own ``input``) in the session's voice. Hence what a client event may hold:

- What configures the voice is used: ``audio.output`` (format, voice, speed), ``instructions``, ``model``.
- OpenAI's other fields are accepted and ignored where ignoring them changes nothing a client can hear: ``audio.input``
  with its turn detection (no audio ever comes in, so nothing is ever detected), ``max_output_tokens``,
  ``truncation``, ``tracing``, ``include``, ``prompt``, ``reasoning``, ``tool_choice``, ``parallel_tool_calls``.
- What asks for something a speaker cannot do is refused with ``unsupported_value``: text output
  (``output_modalities`` other than ``["audio"]``), a non-empty ``tools``, audio or image content, function-call and
  MCP items. OpenAI's events that only make sense with audio input parse into :class:`Unsupported`.
- Fields that are not OpenAI's are refused, as OpenAI refuses them (``unknown_parameter``): otherwise a beta-shaped
  ``session.update`` (``voice`` and ``output_audio_format`` at the top level) would be accepted and change nothing.

A refused event raises :class:`RealtimeProtocolError`, which the session sends as an ``error`` event and goes on. Its
codes and messages are OpenAI's: ``invalid_json``, ``invalid_event`` (JSON, but not an object),
``missing_required_parameter``, ``unknown_parameter``, ``invalid_type``, ``invalid_value`` (also for an event type
OpenAI does not have, with ``param`` ``type``, as OpenAI answers), ``string_above_max_length`` and the other range
codes. ``param`` is the path from the event's root in OpenAI's notation (``item.content[0].text``). This server's own
codes: ``json_too_deep`` (checked before parsing), ``unsupported_value``, and ``unsupported_event``
(:attr:`Unsupported.error`).

Server events are built as JSON text, each with a fresh ``event_id``, from the small immutable states below:
:class:`SessionSettings`, :class:`Item`, :class:`ResponseState`, :class:`RateLimit`. The wire models of client events,
and OpenAI's wording of what they refuse, are in ``_wire.py``.
"""

from __future__ import annotations

import base64
import json
import secrets
from dataclasses import dataclass, replace
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Literal, TypeAlias

from gateway.audio import G711_SAMPLE_RATE, AudioFormat, output_sample_rate
from gateway.http.errors import OpenAIError
from gateway.http.json_depth import json_depth_exceeds
from gateway.realtime.openai import _wire
from gateway.realtime.openai._wire import RealtimeProtocolError, json_kind, validate
from gateway.schemas import CustomVoice, SpeechRequest

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from pydantic import JsonValue

    from gateway.audio import G711Law
    from gateway.schemas import SpeechUsage

__all__ = [
    "MAX_EVENT_DEPTH",
    "ClientEvent",
    "ContentPart",
    "ConversationItemCreate",
    "ConversationItemDelete",
    "ConversationItemRetrieve",
    "Item",
    "ItemReference",
    "OutputAudioBufferClear",
    "OutputAudioFormat",
    "RateLimit",
    "RealtimeProtocolError",
    "ResponseCancel",
    "ResponseCreate",
    "ResponseParams",
    "ResponseState",
    "SessionPatch",
    "SessionSettings",
    "SessionUpdate",
    "Unsupported",
    "Voice",
    "binary_frame_error",
    "conversation_item_added",
    "conversation_item_deleted",
    "conversation_item_done",
    "conversation_item_retrieved",
    "error_event",
    "new_id",
    "parse_client_event",
    "rate_limits_updated",
    "response_content_part_added",
    "response_content_part_done",
    "response_created",
    "response_done",
    "response_output_audio_delta",
    "response_output_audio_done",
    "response_output_audio_transcript_delta",
    "response_output_audio_transcript_done",
    "response_output_item_added",
    "response_output_item_done",
    "session_created",
    "session_updated",
]

Voice: TypeAlias = str | CustomVoice
"""A built-in voice's name, or ``{"id": "voice_..."}`` for a custom voice."""
Role: TypeAlias = Literal["user", "assistant", "system"]
ItemStatus: TypeAlias = Literal["completed", "incomplete", "in_progress"]
ResponseStatus: TypeAlias = Literal["in_progress", "completed", "cancelled", "failed", "incomplete"]
PartType: TypeAlias = Literal["input_text", "output_text", "output_audio"]

#: The deepest nesting a client event may have; a valid one needs six levels (``response.input[].content[]``) plus
#: what OpenAI's ignored fields nest. Checked before parsing: ``json`` recurses per level (gateway/http/json_depth.py).
MAX_EVENT_DEPTH: Final = 32


def new_id(prefix: str) -> str:
    """A random id the way OpenAI's look: ``sess_``, ``conv_``, ``item_``, ``resp_`` or ``event_`` and 20 hex digits."""
    return f"{prefix}_{secrets.token_hex(10)}"


# --- The states that server events describe ---------------------------------------------------------------------


class OutputAudioFormat(StrEnum):
    """An output format of OpenAI's Realtime API, by its ``type``."""

    PCM = "audio/pcm"
    """16-bit little-endian mono at 24 kHz."""
    PCMU = "audio/pcmu"
    """G.711 μ-law at 8 kHz."""
    PCMA = "audio/pcma"
    """G.711 A-law at 8 kHz."""

    @property
    def sample_rate(self) -> int:
        return output_sample_rate(AudioFormat.PCM) if self is OutputAudioFormat.PCM else G711_SAMPLE_RATE

    @property
    def g711_law(self) -> G711Law | None:
        """The law for :func:`gateway.audio.open_g711_encoder`; ``None`` for PCM."""
        return None if self is OutputAudioFormat.PCM else "pcmu" if self is OutputAudioFormat.PCMU else "pcma"

    def wire(self) -> dict[str, Any]:
        """OpenAI's object for the format; only PCM names a rate."""
        if self is OutputAudioFormat.PCM:
            return {"type": self.value, "rate": self.sample_rate}
        return {"type": self.value}


@dataclass(frozen=True, slots=True)
class SessionPatch:
    """The voice settings a ``session.update`` names; ``None`` leaves a setting as it is."""

    model: str | None = None
    voice: Voice | None = None
    output_format: OutputAudioFormat | None = None
    speed: float | None = None
    instructions: str | None = None
    """``""`` clears the instructions, as OpenAI documents."""
    seed: int | None = None
    """This gateway's extension: the seed every later response samples with."""


_PATCHED = ("model", "voice", "output_format", "speed", "instructions", "seed")


@dataclass(frozen=True, slots=True)
class SessionSettings:
    """How a session speaks: what ``session.created`` and ``session.updated`` show."""

    model: str
    """The ``model`` of the connection's URL, unless an update changed it."""
    voice: Voice = "alloy"  # OpenAI's default
    output_format: OutputAudioFormat = OutputAudioFormat.PCM
    speed: float = 1.0
    instructions: str = ""
    seed: int | None = None
    """This gateway's extension (``session.seed``); shown in the session object only once set."""

    def apply(self, patch: SessionPatch) -> SessionSettings:
        """These settings with the ones ``patch`` names replaced."""
        named = {name: value for name in _PATCHED if (value := getattr(patch, name)) is not None}
        return replace(self, **named)

    def changes(self, patch: SessionPatch) -> frozenset[str]:
        """The settings ``patch`` would change: OpenAI locks the voice once audio went out, the speed mid-response."""
        updated = self.apply(patch)
        return frozenset(name for name in _PATCHED if getattr(updated, name) != getattr(self, name))

    def for_response(self, params: ResponseParams) -> SessionSettings:
        """The settings one response speaks with: its own voice, format and instructions override the session's."""
        return self.apply(
            SessionPatch(voice=params.voice, output_format=params.output_format, instructions=params.instructions)
        )

    def speech_request(self, text: str) -> SpeechRequest:
        """The speech request for ``text``, as 24 kHz PCM: G.711 is encoded from it (``open_g711_encoder``)."""
        return SpeechRequest(
            model=self.model,
            input=text,
            voice=self.voice,
            response_format=AudioFormat.PCM,
            speed=self.speed,
            instructions=self.instructions or None,
            seed=self.seed,
        )


@dataclass(frozen=True, slots=True)
class ContentPart:
    """One part of a message: text, or the transcript of the audio a response spoke."""

    type: PartType
    text: str
    """The text; for ``output_audio``, the transcript."""

    def wire(self) -> dict[str, Any]:
        # OpenAI leaves the audio itself out of item events; it is only in the response's deltas.
        return {"type": self.type, "transcript" if self.type == "output_audio" else "text": self.text}


@dataclass(frozen=True, slots=True)
class Item:
    """A message of the conversation."""

    id: str
    role: Role
    content: tuple[ContentPart, ...] = ()
    status: ItemStatus = "completed"

    @property
    def text(self) -> str:
        """What the message says: its parts, one per line."""
        return "\n".join(part.text for part in self.content)

    def wire(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "realtime.item",
            "type": "message",
            "status": self.status,
            "role": self.role,
            "content": [part.wire() for part in self.content],
        }


@dataclass(frozen=True, slots=True)
class ItemReference:
    """An item of the conversation named in a response's ``input`` by its id; the session looks it up."""

    id: str


@dataclass(frozen=True, slots=True)
class ResponseParams:
    """What a ``response.create`` asks for; ``None`` takes the session's setting."""

    conversation: Literal["auto", "none"] = "auto"
    """``none``: an out-of-band response, whose item joins no conversation."""
    input: tuple[Item | ItemReference, ...] | None = None
    """What to speak instead of the conversation (``()``: nothing); ``None``: the conversation."""
    instructions: str | None = None
    voice: Voice | None = None
    output_format: OutputAudioFormat | None = None
    metadata: Mapping[str, str] | None = None


_ITEM_STATUS: Final[Mapping[ResponseStatus, ItemStatus]] = MappingProxyType(
    {
        "in_progress": "in_progress",
        "completed": "completed",
        "cancelled": "incomplete",
        "failed": "incomplete",
        "incomplete": "incomplete",
    }
)


@dataclass(frozen=True, slots=True)
class ResponseState:
    """One response: a single assistant message with a single audio part, as a speaker's responses all are."""

    id: str
    item_id: str
    conversation_id: str | None
    """The conversation the item joins; ``None`` for ``conversation: none``."""
    voice: Voice
    output_format: OutputAudioFormat
    metadata: Mapping[str, str] | None = None
    transcript: str = ""
    status: ResponseStatus = "in_progress"
    usage: SpeechUsage | None = None
    error: OpenAIError | None = None
    """Why a ``failed`` response failed."""

    @classmethod
    def start(cls, settings: SessionSettings, params: ResponseParams, *, conversation_id: str) -> ResponseState:
        """A new response in progress, speaking with ``settings`` overridden by ``params``.

        Args:
            settings: The session's settings.
            params: The ``response.create``'s.
            conversation_id: The session's conversation; the response has none if ``params`` say ``none``.
        """
        spoken = settings.for_response(params)
        return cls(
            id=new_id("resp"),
            item_id=new_id("item"),
            conversation_id=conversation_id if params.conversation == "auto" else None,
            voice=spoken.voice,
            output_format=spoken.output_format,
            metadata=params.metadata,
        )

    @property
    def conversation(self) -> Literal["auto", "none"]:
        return "auto" if self.conversation_id is not None else "none"

    @property
    def item(self) -> Item:
        """The response's message; like OpenAI's, it has no content until its transcript begins or it ends."""
        started = bool(self.transcript) or self.status != "in_progress"
        content = (ContentPart("output_audio", self.transcript),) if started else ()
        return Item(self.item_id, "assistant", content, _ITEM_STATUS[self.status])

    def add_transcript(self, delta: str) -> ResponseState:
        return replace(self, transcript=self.transcript + delta)

    def finish(
        self,
        status: Literal["completed", "cancelled", "failed", "incomplete"],
        *,
        usage: SpeechUsage | None = None,
        error: OpenAIError | None = None,
    ) -> ResponseState:
        """The response ended: ``cancelled`` is reported as the client's doing, ``failed`` with ``error``."""
        return replace(self, status=status, usage=usage, error=error)


@dataclass(frozen=True, slots=True)
class RateLimit:
    """One entry of ``rate_limits.updated``."""

    name: Literal["requests", "tokens"]
    limit: int
    remaining: int
    reset_seconds: float


# --- Client events, as the session sees them ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SessionUpdate:
    """``session.update``: the voice settings it names (OpenAI's other fields are checked, then dropped)."""

    patch: SessionPatch
    event_id: str | None = None


@dataclass(frozen=True, slots=True)
class ConversationItemCreate:
    """``conversation.item.create``: a message to add after ``previous_item_id`` (``root``: first; ``None``: last)."""

    item: Item
    previous_item_id: str | None = None
    event_id: str | None = None


@dataclass(frozen=True, slots=True)
class ConversationItemDelete:
    item_id: str
    event_id: str | None = None


@dataclass(frozen=True, slots=True)
class ConversationItemRetrieve:
    item_id: str
    event_id: str | None = None


@dataclass(frozen=True, slots=True)
class ResponseCreate:
    params: ResponseParams
    event_id: str | None = None


@dataclass(frozen=True, slots=True)
class ResponseCancel:
    """``response.cancel``: the response ``response_id``, or ``None`` for the one in progress."""

    response_id: str | None = None
    event_id: str | None = None


@dataclass(frozen=True, slots=True)
class OutputAudioBufferClear:
    """``output_audio_buffer.clear``: stop the audio in flight (WebRTC's; follows a ``response.cancel``)."""

    event_id: str | None = None


@dataclass(frozen=True, slots=True)
class Unsupported:
    """One of OpenAI's events that a speaker has no use for: audio input, truncating spoken audio, and the like."""

    type: str
    event_id: str | None = None

    @property
    def error(self) -> OpenAIError:
        """What to answer it with."""
        message = (
            f"This server does not support '{self.type}' events: it speaks the text of conversation items "
            "and takes no audio input."
        )
        return OpenAIError(400, message, code="unsupported_event", param="type")


ClientEvent: TypeAlias = (
    SessionUpdate
    | ConversationItemCreate
    | ConversationItemDelete
    | ConversationItemRetrieve
    | ResponseCreate
    | ResponseCancel
    | OutputAudioBufferClear
    | Unsupported
)

_UNSUPPORTED_TYPES = frozenset(
    {
        "input_audio_buffer.append",
        "input_audio_buffer.commit",
        "input_audio_buffer.clear",
        "conversation.item.truncate",
        "session.close",  # OpenAI's server takes it; the SDK types it for the translation endpoint only
        "session.input_audio_buffer.append",  # the translation endpoint's
        "transcription_session.update",  # the beta API's
    }
)


# --- Parsing ------------------------------------------------------------------------------------------------------


def parse_client_event(text: str, *, max_depth: int = MAX_EVENT_DEPTH) -> ClientEvent:
    """One client event, validated: what the session acts on, or :class:`Unsupported`.

    Raises:
        RealtimeProtocolError: not JSON, nested deeper than ``max_depth``, not an object, a type OpenAI does not
            have, an invalid field, or a feature this server does not provide (see the module's docstring).
    """
    raw = _load(text, max_depth)
    event_id = raw.get("event_id")
    event_id = event_id if isinstance(event_id, str) else None  # echoed in an error about the event
    kind = raw.get("type")
    if isinstance(kind, str) and kind in _PARSERS:
        return _PARSERS[kind](raw, event_id)
    if isinstance(kind, str) and kind in _UNSUPPORTED_TYPES:
        return Unsupported(kind, event_id)
    raise _unknown_type(kind, "type" in raw, event_id)


def binary_frame_error() -> RealtimeProtocolError:
    """What OpenAI answers a binary frame with: every client event is a text frame of JSON."""
    message = "Expected a text WebSocket message; binary frames are not supported."
    return RealtimeProtocolError(message, code="invalid_event")


def _load(text: str, max_depth: int) -> dict[str, JsonValue]:
    if json_depth_exceeds(text, max_depth):
        raise RealtimeProtocolError(f"The event is nested deeper than {max_depth} levels.", code="json_too_deep")
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        message = f"Invalid event: failed to parse JSON value: {exc.msg}."
        raise RealtimeProtocolError(message, code="invalid_json") from None
    if not isinstance(raw, dict):
        raise RealtimeProtocolError("Invalid event: expected a JSON object with a 'type'.", code="invalid_event")
    return raw


def _unknown_type(kind: object, present: bool, event_id: str | None) -> RealtimeProtocolError:
    if not present:
        return RealtimeProtocolError(
            "Missing required parameter: 'type'.", code="missing_required_parameter", param="type", event_id=event_id
        )
    if not isinstance(kind, str):
        message = f"Invalid type for 'type': expected a string, but got {json_kind(kind)} instead."
        return RealtimeProtocolError(message, code="invalid_type", param="type", event_id=event_id)
    supported = ", ".join(f"'{name}'" for name in _PARSERS)
    message = f"Invalid value: '{kind}'. Supported values are: {supported}."
    return RealtimeProtocolError(message, code="invalid_value", param="type", event_id=event_id)


def _session_update(raw: dict[str, JsonValue], event_id: str | None) -> SessionUpdate:
    session = validate(_wire.SessionUpdateEvent, raw, "", event_id).session
    if session.type == "transcription":
        message = "Passing a transcription session update event to a realtime session is not allowed."
        raise RealtimeProtocolError(message, code="invalid_value", param="session.type", event_id=event_id)
    _check_speaks(session, "session", event_id)
    output = session.audio.output if session.audio else None
    patch = SessionPatch(
        model=session.model,
        voice=output.voice if output else None,
        output_format=OutputAudioFormat(output.format.type) if output and output.format else None,
        speed=output.speed if output else None,
        instructions=session.instructions,
        seed=session.seed,
    )
    return SessionUpdate(patch, event_id)


def _item_create(raw: dict[str, JsonValue], event_id: str | None) -> ConversationItemCreate:
    wire = validate(_wire.ItemCreateEvent, raw, "", event_id)
    return ConversationItemCreate(_message(wire.item, "item", event_id), wire.previous_item_id, event_id)


def _item_delete(raw: dict[str, JsonValue], event_id: str | None) -> ConversationItemDelete:
    return ConversationItemDelete(validate(_wire.ItemIdEvent, raw, "", event_id).item_id, event_id)


def _item_retrieve(raw: dict[str, JsonValue], event_id: str | None) -> ConversationItemRetrieve:
    return ConversationItemRetrieve(validate(_wire.ItemIdEvent, raw, "", event_id).item_id, event_id)


def _response_create(raw: dict[str, JsonValue], event_id: str | None) -> ResponseCreate:
    response = validate(_wire.ResponseCreateEvent, raw, "", event_id).response
    if response is None:
        return ResponseCreate(ResponseParams(), event_id)
    _check_speaks(response, "response", event_id)
    output = response.audio.output if response.audio else None
    params = ResponseParams(
        conversation=response.conversation,
        input=_input(response.input, event_id) if response.input is not None else None,
        instructions=response.instructions,
        voice=output.voice if output else None,
        output_format=OutputAudioFormat(output.format.type) if output and output.format else None,
        metadata=MappingProxyType(dict(response.metadata)) if response.metadata is not None else None,
    )
    return ResponseCreate(params, event_id)


def _response_cancel(raw: dict[str, JsonValue], event_id: str | None) -> ResponseCancel:
    return ResponseCancel(validate(_wire.ResponseCancelEvent, raw, "", event_id).response_id, event_id)


def _audio_buffer_clear(raw: dict[str, JsonValue], event_id: str | None) -> OutputAudioBufferClear:
    validate(_wire.Event, raw, "", event_id)
    return OutputAudioBufferClear(event_id)


_PARSERS: Final[Mapping[str, Callable[[dict[str, JsonValue], str | None], ClientEvent]]] = MappingProxyType(
    {
        "session.update": _session_update,
        "conversation.item.create": _item_create,
        "conversation.item.delete": _item_delete,
        "conversation.item.retrieve": _item_retrieve,
        "response.create": _response_create,
        "response.cancel": _response_cancel,
        "output_audio_buffer.clear": _audio_buffer_clear,
    }
)


def _check_speaks(fields: _wire.ModelFields, param: str, event_id: str | None) -> None:
    """Refuse what a speaker cannot do: answer in text, or call tools."""
    modalities = fields.output_modalities
    if modalities is not None and set(modalities) != {"audio"}:
        raise _unsupported(
            f"Only audio output is supported: 'output_modalities' must be ['audio'], got {modalities}.",
            f"{param}.output_modalities",
            event_id,
        )
    if fields.tools:
        message = "Tools are not supported: this server speaks the text it is given and calls no tools."
        raise _unsupported(message, f"{param}.tools", event_id)


_NON_MESSAGE_ITEMS = frozenset(
    {
        "function_call",
        "function_call_output",
        "mcp_approval_request",
        "mcp_approval_response",
        "mcp_list_tools",
        "mcp_call",
    }
)
_MEDIA_PARTS = frozenset({"input_audio", "input_image", "output_audio"})


def _input(raws: list[dict[str, JsonValue]], event_id: str | None) -> tuple[Item | ItemReference, ...]:
    """A response's ``input``: messages, and references to items of the conversation (allowed only here)."""
    items: list[Item | ItemReference] = []
    for index, raw in enumerate(raws):
        param = f"response.input[{index}]"
        if raw.get("type") == "item_reference":
            items.append(ItemReference(validate(_wire.ItemReference, raw, param, event_id).id))
        else:
            items.append(_message(raw, param, event_id))
    return tuple(items)


def _message(raw: dict[str, JsonValue], param: str, event_id: str | None) -> Item:
    kind = raw.get("type")
    if isinstance(kind, str) and kind in _NON_MESSAGE_ITEMS:
        message = f"Items of type '{kind}' are not supported: this server speaks text and calls no tools."
        raise _unsupported(message, f"{param}.type", event_id)
    wire = validate(_wire.Message, raw, param, event_id)
    parts = (_part(part, wire.role, f"{param}.content[{index}]", event_id) for index, part in enumerate(wire.content))
    return Item(wire.id or new_id("item"), wire.role, tuple(parts))


def _part(raw: dict[str, JsonValue], role: Role, param: str, event_id: str | None) -> ContentPart:
    kind = raw.get("type")
    if isinstance(kind, str) and kind in _MEDIA_PARTS:
        message = f"Content of type '{kind}' is not supported: this server speaks text, and takes no audio or images."
        raise _unsupported(message, f"{param}.type", event_id)
    text = validate(_wire.TextPart, raw, param, event_id).text
    return ContentPart("output_text" if role == "assistant" else "input_text", text)


def _unsupported(message: str, param: str, event_id: str | None) -> RealtimeProtocolError:
    return RealtimeProtocolError(message, code="unsupported_value", param=param, event_id=event_id)


# --- Server events ------------------------------------------------------------------------------------------------


def session_created(session_id: str, settings: SessionSettings, *, expires_at: int | None = None) -> str:
    """``session.created``, the first event of a connection: the session's settings."""
    return _event("session.created", session=_session(session_id, settings, expires_at))


def session_updated(session_id: str, settings: SessionSettings, *, expires_at: int | None = None) -> str:
    """``session.updated``: the session's settings after an update, all of them."""
    return _event("session.updated", session=_session(session_id, settings, expires_at))


def conversation_item_added(item: Item, *, previous_item_id: str | None) -> str:
    """``conversation.item.added``: an item joined the conversation after ``previous_item_id`` (``None``: first)."""
    return _event("conversation.item.added", previous_item_id=previous_item_id, item=item.wire())


def conversation_item_done(item: Item, *, previous_item_id: str | None) -> str:
    """``conversation.item.done``: the item is final (a client's at once, a response's when it ends)."""
    return _event("conversation.item.done", previous_item_id=previous_item_id, item=item.wire())


def conversation_item_deleted(item_id: str) -> str:
    return _event("conversation.item.deleted", item_id=item_id)


def conversation_item_retrieved(item: Item) -> str:
    return _event("conversation.item.retrieved", item=item.wire())


def response_created(response: ResponseState) -> str:
    return _event("response.created", response=_response(response))


def response_output_item_added(response: ResponseState) -> str:
    return _event("response.output_item.added", response_id=response.id, output_index=0, item=response.item.wire())


def response_content_part_added(response: ResponseState) -> str:
    """``response.content_part.added``: the audio part begins, its transcript empty."""
    return _event("response.content_part.added", **_position(response), part={"type": "audio", "transcript": ""})


def response_output_audio_delta(response: ResponseState, audio: bytes) -> str:
    """``response.output_audio.delta``: encoded audio in the response's format, base64 as OpenAI sends it."""
    return _event("response.output_audio.delta", **_position(response), delta=base64.b64encode(audio).decode("ascii"))


def response_output_audio_transcript_delta(response: ResponseState, delta: str) -> str:
    return _event("response.output_audio_transcript.delta", **_position(response), delta=delta)


def response_output_audio_done(response: ResponseState) -> str:
    return _event("response.output_audio.done", **_position(response))


def response_output_audio_transcript_done(response: ResponseState) -> str:
    return _event("response.output_audio_transcript.done", **_position(response), transcript=response.transcript)


def response_content_part_done(response: ResponseState) -> str:
    part = {"type": "audio", "transcript": response.transcript}
    return _event("response.content_part.done", **_position(response), part=part)


def response_output_item_done(response: ResponseState) -> str:
    return _event("response.output_item.done", response_id=response.id, output_index=0, item=response.item.wire())


def response_done(response: ResponseState) -> str:
    """``response.done``: always the last of a response's events, whatever its status."""
    return _event("response.done", response=_response(response))


def rate_limits_updated(limits: Iterable[RateLimit]) -> str:
    entries = [
        {"name": limit.name, "limit": limit.limit, "remaining": limit.remaining, "reset_seconds": limit.reset_seconds}
        for limit in limits
    ]
    return _event("rate_limits.updated", rate_limits=entries)


def error_event(error: OpenAIError, *, client_event_id: str | None = None) -> str:
    """``error``: ``client_event_id`` is the ``event_id`` of the client event it answers, if that had one."""
    body = {
        "type": error.type,
        "code": error.code,
        "message": error.message,
        "param": error.param,
        "event_id": client_event_id,
    }
    return _event("error", error=body)


def _event(kind: str, **fields: Any) -> str:
    # ASCII escapes: client text may hold lone surrogates (JSON allows "\ud800"), which UTF-8 cannot carry.
    return json.dumps({"type": kind, "event_id": new_id("event"), **fields}, separators=(",", ":"))


def _session(session_id: str, settings: SessionSettings, expires_at: int | None) -> dict[str, Any]:
    """OpenAI's session object: what a speaker does, and OpenAI's defaults for what it ignores."""
    session: dict[str, Any] = {
        "type": "realtime",
        "object": "realtime.session",
        "id": session_id,
        "model": settings.model,
        "output_modalities": ["audio"],
        "instructions": settings.instructions,
        "tools": [],
        "tool_choice": "auto",
        "max_output_tokens": "inf",
        "tracing": None,
        "truncation": "auto",
        "prompt": None,
        "audio": {
            "input": {
                "format": OutputAudioFormat.PCM.wire(),
                "transcription": None,
                "noise_reduction": None,
                "turn_detection": None,  # nothing is ever heard: responses start only on response.create
            },
            "output": {
                "format": settings.output_format.wire(),
                "voice": settings.voice if isinstance(settings.voice, str) else settings.voice.model_dump(),
                "speed": settings.speed,
            },
        },
        "include": None,
    }
    if expires_at is not None:
        session["expires_at"] = expires_at
    if settings.seed is not None:  # the extension only where a client used it: OpenAI's object stays OpenAI's
        session["seed"] = settings.seed
    return session


def _response(state: ResponseState) -> dict[str, Any]:
    # A response object types its voice as a name only: a custom voice shows as its id.
    voice = state.voice if isinstance(state.voice, str) else state.voice.id
    return {
        "object": "realtime.response",
        "id": state.id,
        "status": state.status,
        "status_details": _status_details(state),
        "output": [] if state.status == "in_progress" else [state.item.wire()],
        "conversation_id": state.conversation_id,
        "output_modalities": ["audio"],
        "max_output_tokens": "inf",
        "audio": {"output": {"format": state.output_format.wire(), "voice": voice}},
        "usage": _usage(state.usage) if state.usage is not None else None,
        "metadata": dict(state.metadata) if state.metadata is not None else None,
    }


def _status_details(state: ResponseState) -> dict[str, Any] | None:
    if state.status == "cancelled":
        return {"type": "cancelled", "reason": "client_cancelled"}
    if state.status == "failed":
        error = state.error
        detail = {"type": error.type, "code": error.code, "message": error.message} if error is not None else None
        return {"type": "failed", "error": detail}
    if state.status == "incomplete":
        return {"type": "incomplete"}
    return None


def _usage(usage: SpeechUsage) -> dict[str, Any]:
    """OpenAI's usage for speech: the input is text (characters, as the speech endpoints count), the output audio."""
    none_cached = {"text_tokens": 0, "audio_tokens": 0, "image_tokens": 0}
    return {
        "total_tokens": usage.total_tokens,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "input_token_details": {
            "text_tokens": usage.input_tokens,
            "audio_tokens": 0,
            "image_tokens": 0,
            "cached_tokens": 0,
            "cached_tokens_details": none_cached,
        },
        "output_token_details": {"text_tokens": 0, "audio_tokens": usage.output_tokens},
    }


def _position(response: ResponseState) -> dict[str, Any]:
    """Where a response's audio part is: its only item, its only part."""
    return {"response_id": response.id, "item_id": response.item_id, "output_index": 0, "content_index": 0}
