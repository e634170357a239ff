"""OpenAI Realtime client events on the wire: strict pydantic models, and OpenAI's wording for what they refuse.

``client_events.py`` dispatches on an event's ``type`` and validates it with one of these models; a message item and its
content parts are validated one by one, since their kind decides their fields. A model's first validation error
becomes a :class:`RealtimeProtocolError` with OpenAI's code, message and ``param`` (``item.content[0].text``).
"""

from __future__ import annotations

import json
from types import MappingProxyType
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Discriminator, Field, JsonValue, StringConstraints, Tag, ValidationError

from gateway.audio import MAX_TEMPO, MIN_TEMPO
from gateway.schemas import MAX_INPUT_CHARS, MAX_SEED, CustomVoice
from gateway.sessions.dialect import ProtocolError

if TYPE_CHECKING:
    from pydantic_core import ErrorDetails

__all__ = [
    "Event",
    "ItemCreateEvent",
    "ItemIdEvent",
    "ItemReference",
    "Message",
    "ModelFields",
    "RealtimeProtocolError",
    "ResponseCancelEvent",
    "ResponseCreateEvent",
    "SessionUpdateEvent",
    "TextPart",
    "Wire",
    "json_kind",
    "validate",
]


class RealtimeProtocolError(ProtocolError):
    """A client event the session refuses; the session goes on. ``error`` holds OpenAI's code, message and param.

    A :class:`~gateway.sessions.dialect.ProtocolError`, so that both realtime dialects refuse events one way.
    """


class Wire(BaseModel):
    """Strict, as OpenAI is: no coercion ("1" is no number) and no fields that are not OpenAI's."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


_Text = Annotated[str, Field(max_length=MAX_INPUT_CHARS)]
_Name = Annotated[str, StringConstraints(min_length=1, max_length=256)]
_Id = Annotated[str, StringConstraints(min_length=1, max_length=64)]
_EventId = Annotated[str, StringConstraints(max_length=128)]
_Modalities = list[Literal["text", "audio"]]
# OpenAI caps speed at 1.5; the speech endpoints here go to 4.0, and so does this one.
_Speed = Annotated[float, Field(ge=MIN_TEMPO, le=MAX_TEMPO)]
_Metadata = Annotated[
    dict[Annotated[str, StringConstraints(max_length=64)], Annotated[str, StringConstraints(max_length=512)]],
    Field(max_length=16),
]


# A tagged union reports errors with the tag in their location; error paths leave these out (_TAGS).
_VOICE_NAME, _CUSTOM_VOICE = "voice name", "custom voice"


def _voice_tag(value: object) -> str:
    return _CUSTOM_VOICE if isinstance(value, dict) else _VOICE_NAME


_Voice = Annotated[
    Annotated[_Name, Tag(_VOICE_NAME)] | Annotated[CustomVoice, Tag(_CUSTOM_VOICE)], Discriminator(_voice_tag)
]


class _Pcm(Wire):
    type: Literal["audio/pcm"]
    rate: Literal[24000] = 24000


class _Pcmu(Wire):
    type: Literal["audio/pcmu"]


class _Pcma(Wire):
    type: Literal["audio/pcma"]


_Format = Annotated[_Pcm | _Pcmu | _Pcma, Field(discriminator="type")]
_TAGS = frozenset({_VOICE_NAME, _CUSTOM_VOICE, "audio/pcm", "audio/pcmu", "audio/pcma", "[key]"})


class ResponseOutput(Wire):
    format: _Format | None = None
    voice: _Voice | None = None


class SessionOutput(ResponseOutput):
    speed: _Speed | None = None


class SessionAudio(Wire):
    input: JsonValue = None  # ignored: no audio comes in
    output: SessionOutput | None = None


class ResponseAudio(Wire):
    output: ResponseOutput | None = None


class ModelFields(Wire):
    """The fields that sessions and responses share."""

    instructions: Annotated[str, Field(max_length=MAX_INPUT_CHARS)] | None = None
    output_modalities: _Modalities | None = None
    tools: list[JsonValue] | None = None
    # Accepted and ignored: they tune a model that reasons, calls tools or reads prompts, not a speaker.
    max_output_tokens: JsonValue = None
    parallel_tool_calls: JsonValue = None
    prompt: JsonValue = None
    reasoning: JsonValue = None
    tool_choice: JsonValue = None


class Session(ModelFields):
    type: Literal["realtime", "transcription"]
    model: _Name | None = None
    audio: SessionAudio | None = None
    seed: Annotated[int, Field(ge=0, le=MAX_SEED)] | None = None
    """This gateway's extension (``POST /v1/audio/speech``'s ``seed``): every response sampled with it."""
    include: JsonValue = None
    tracing: JsonValue = None
    truncation: JsonValue = None


class Response(ModelFields):
    conversation: Literal["auto", "none"] = "auto"
    input: list[dict[str, JsonValue]] | None = None  # items, each validated on its own (see client_events._input)
    audio: ResponseAudio | None = None
    metadata: _Metadata | None = None


class Message(Wire):
    type: Literal["message"]
    role: Literal["user", "assistant", "system"]
    content: list[dict[str, JsonValue]]  # parts, each validated on its own (see client_events._part)
    id: _Id | None = None
    object: Literal["realtime.item"] | None = None
    # "Has no effect on the conversation", says OpenAI.
    status: Literal["completed", "incomplete", "in_progress"] | None = None


class TextPart(Wire):
    # Every text part is taken whatever the role ("text" is the beta API's), then typed as the role's.
    type: Literal["input_text", "output_text", "text"]
    text: _Text


class ItemReference(Wire):
    type: Literal["item_reference"]
    id: _Id


class Event(Wire):
    type: str  # each subclass narrows it; parse_client_event has dispatched on it
    event_id: _EventId | None = None


class SessionUpdateEvent(Event):
    session: Session


class ItemCreateEvent(Event):
    item: dict[str, JsonValue]  # validated on its own (see client_events._message), since its kind decides its fields
    previous_item_id: _Id | None = None


class ItemIdEvent(Event):
    item_id: _Id


class ResponseCreateEvent(Event):
    response: Response | None = None


class ResponseCancelEvent(Event):
    response_id: _Id | None = None


_W = TypeVar("_W", bound=Wire)


def validate(model: type[_W], raw: object, param: str, event_id: str | None) -> _W:
    """``raw`` as ``model``; refused with OpenAI's wording for its first error, ``param`` its path's prefix."""
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise _invalid(exc.errors()[0], param, event_id) from None


def _invalid(error: ErrorDetails, prefix: str, event_id: str | None) -> RealtimeProtocolError:
    param, kind, value = _param(prefix, error["loc"]), error["type"], error["input"]
    context: dict[str, Any] = dict(error.get("ctx", {}))
    if kind.startswith("union_tag_"):  # a format's "type" is missing or unknown (the voice's tag never fails)
        param += ".type"
        kind, value = ("literal_error", context.get("tag")) if kind == "union_tag_invalid" else ("missing", None)
        context["expected"] = context.get("expected_tags")
    if kind == "too_long" and isinstance(value, dict):
        kind = "too_many_properties"
    code, template = _MESSAGES.get(kind, ("invalid_value", "Invalid value for '{param}': {msg}."))
    if kind in _EXPECTED_TYPES:
        context["expected"] = _EXPECTED_TYPES[kind]
    length = len(value) if isinstance(value, str | list | dict) else None
    fields = _Fields(context, param=param, value=_quote(value), got=json_kind(value), length=length, msg=error["msg"])
    return RealtimeProtocolError(template.format_map(fields), code=code, param=param, event_id=event_id)


class _Fields(dict[str, Any]):
    """What a message template may name; a name pydantic did not provide reads "?" rather than crash the session."""

    def __missing__(self, key: str) -> str:
        return "?"


def _param(prefix: str, loc: tuple[int | str, ...]) -> str:
    """OpenAI's notation for a location: ``item.content[0].text``."""
    path = prefix
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part not in _TAGS:
            path = f"{path}.{part}" if path else part
    return path


_EXPECTED_TYPES: Final = MappingProxyType(
    {
        "string_type": "a string",
        "float_type": "a number",
        "int_type": "an integer",
        "bool_type": "a boolean",
        "list_type": "an array",
        "dict_type": "an object",
        "model_type": "an object",
        "model_attributes_type": "an object",
    }
)
_MESSAGES: Final = MappingProxyType(
    {
        "missing": ("missing_required_parameter", "Missing required parameter: '{param}'."),
        "extra_forbidden": ("unknown_parameter", "Unknown parameter: '{param}'."),
        "literal_error": ("invalid_value", "Invalid value: {value}. Supported values are: {expected}."),
        **dict.fromkeys(
            _EXPECTED_TYPES, ("invalid_type", "Invalid type for '{param}': expected {expected}, but got {got} instead.")
        ),
        "string_too_long": (
            "string_above_max_length",
            "Invalid '{param}': string too long. Expected a string with maximum length {max_length}, "
            "but got a string with length {length} instead.",
        ),
        "string_too_short": (
            "string_below_min_length",
            "Invalid '{param}': string too short. Expected a string with minimum length {min_length}, "
            "but got a string with length {length} instead.",
        ),
        "too_long": (
            "array_above_max_length",
            "Invalid '{param}': array too long. Expected an array with maximum length {max_length}, "
            "but got an array with length {length} instead.",
        ),
        "too_many_properties": (
            "object_above_max_properties",
            "Invalid '{param}': too many properties. Expected an object with at most {max_length} properties, "
            "but got an object with {length} properties instead.",
        ),
        "greater_than_equal": (
            "decimal_below_min_value",
            "Invalid '{param}': decimal below minimum value. Expected a value >= {ge}, but got {value} instead.",
        ),
        "less_than_equal": (
            "decimal_above_max_value",
            "Invalid '{param}': decimal above maximum value. Expected a value <= {le}, but got {value} instead.",
        ),
    }
)


def _quote(value: object) -> str:
    return f"'{value}'" if isinstance(value, str) else json.dumps(value)


def json_kind(value: object) -> str:
    kinds: tuple[tuple[type, str], ...] = (
        (bool, "a boolean"),  # before int: a bool is an int
        (int, "an integer"),
        (float, "a decimal"),
        (str, "a string"),
        (list, "an array"),
        (dict, "an object"),
    )
    return next((name for kind, name in kinds if isinstance(value, kind)), "null")
