"""OpenAI Realtime's client events, parsed and validated as :mod:`gateway.openai.realtime.events` describes."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Final, TypeAlias, TypeVar

from gateway.http.errors import OpenAIError
from gateway.http.json_depth import json_depth_exceeds
from gateway.openai.realtime import _wire
from gateway.openai.realtime._wire import RealtimeProtocolError, json_kind, validate
from gateway.openai.realtime.states import (
    ContentPart,
    Item,
    ItemReference,
    OutputAudioFormat,
    ResponseParams,
    Role,
    SessionPatch,
    new_id,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from pydantic import JsonValue

__all__ = [
    "MAX_EVENT_DEPTH",
    "ClientEvent",
    "ConversationItemCreate",
    "ConversationItemDelete",
    "ConversationItemRetrieve",
    "OutputAudioBufferClear",
    "ResponseCancel",
    "ResponseCreate",
    "SessionUpdate",
    "Unsupported",
    "binary_frame_error",
    "parse_client_event",
]


#: what OpenAI's ignored fields nest. Checked before parsing: ``json`` recurses per level (gateway/http/json_depth.py).
MAX_EVENT_DEPTH: Final = 32


# --- Client events, as the session sees them ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _ClientEventBase:
    """What every client event carries (by keyword, after each event's own fields)."""

    event_id: str | None = field(default=None, kw_only=True)
    """The client's own id for the event, echoed in an ``error`` about it."""


@dataclass(frozen=True, slots=True)
class SessionUpdate(_ClientEventBase):
    """``session.update``: the voice settings it names (OpenAI's other fields are checked, then dropped)."""

    patch: SessionPatch


@dataclass(frozen=True, slots=True)
class ConversationItemCreate(_ClientEventBase):
    """``conversation.item.create``: a message to add after ``previous_item_id`` (``root``: first; ``None``: last)."""

    item: Item
    previous_item_id: str | None = None


@dataclass(frozen=True, slots=True)
class _ItemEvent(_ClientEventBase):
    """An event about one item of the conversation, by its id."""

    item_id: str


@dataclass(frozen=True, slots=True)
class ConversationItemDelete(_ItemEvent):
    """``conversation.item.delete``."""


@dataclass(frozen=True, slots=True)
class ConversationItemRetrieve(_ItemEvent):
    """``conversation.item.retrieve``."""


@dataclass(frozen=True, slots=True)
class ResponseCreate(_ClientEventBase):
    params: ResponseParams


@dataclass(frozen=True, slots=True)
class ResponseCancel(_ClientEventBase):
    """``response.cancel``: the response ``response_id``, or ``None`` for the one in progress."""

    response_id: str | None = None


@dataclass(frozen=True, slots=True)
class OutputAudioBufferClear(_ClientEventBase):
    """``output_audio_buffer.clear``: stop the audio in flight (WebRTC's; follows a ``response.cancel``)."""


@dataclass(frozen=True, slots=True)
class Unsupported(_ClientEventBase):
    """One of OpenAI's events that a speaker has no use for: audio input, truncating spoken audio, and the like."""

    type: str

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

_Item = TypeVar("_Item", bound=_ItemEvent)

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
        return Unsupported(kind, event_id=event_id)
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
        seed_cleared="seed" in session.model_fields_set and session.seed is None,
    )
    return SessionUpdate(patch, event_id=event_id)


def _item_create(raw: dict[str, JsonValue], event_id: str | None) -> ConversationItemCreate:
    wire = validate(_wire.ItemCreateEvent, raw, "", event_id)
    item = _message(wire.item, "item", event_id)
    return ConversationItemCreate(item, wire.previous_item_id, event_id=event_id)


def _item_event(event: type[_Item]) -> Callable[[dict[str, JsonValue], str | None], _Item]:
    """The parser of an event that names an item by its id: ``conversation.item.delete`` and ``….retrieve``."""

    def parse(raw: dict[str, JsonValue], event_id: str | None) -> _Item:
        return event(validate(_wire.ItemIdEvent, raw, "", event_id).item_id, event_id=event_id)

    return parse


def _response_create(raw: dict[str, JsonValue], event_id: str | None) -> ResponseCreate:
    response = validate(_wire.ResponseCreateEvent, raw, "", event_id).response
    if response is None:
        return ResponseCreate(ResponseParams(), event_id=event_id)
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
    return ResponseCreate(params, event_id=event_id)


def _response_cancel(raw: dict[str, JsonValue], event_id: str | None) -> ResponseCancel:
    response_id = validate(_wire.ResponseCancelEvent, raw, "", event_id).response_id
    return ResponseCancel(response_id, event_id=event_id)


def _audio_buffer_clear(raw: dict[str, JsonValue], event_id: str | None) -> OutputAudioBufferClear:
    validate(_wire.Event, raw, "", event_id)
    return OutputAudioBufferClear(event_id=event_id)


_PARSERS: Final[Mapping[str, Callable[[dict[str, JsonValue], str | None], ClientEvent]]] = MappingProxyType(
    {
        "session.update": _session_update,
        "conversation.item.create": _item_create,
        "conversation.item.delete": _item_event(ConversationItemDelete),
        "conversation.item.retrieve": _item_event(ConversationItemRetrieve),
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
