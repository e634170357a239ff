"""OpenAI Realtime events: what the OpenAI SDK sends parses, and what we send validates against the SDK's own models.

Client events are built with the SDK's param types and serialised the way its connection does
(``RealtimeConnection.send``); server events are validated strictly with ``RealtimeServerEvent``: no coercion, no field
the SDK does not know, and a round trip that gives back exactly what was sent.
"""

from __future__ import annotations

import base64
import json
import typing
from typing import TYPE_CHECKING, Any, TypeVar

import pytest
from openai._utils import maybe_transform
from openai.types.realtime import (
    ConversationItemAdded,
    ConversationItemDeletedEvent,
    ConversationItemDone,
    RateLimitsUpdatedEvent,
    RealtimeClientEventParam,
    RealtimeErrorEvent,
    RealtimeServerEvent,
    RealtimeSessionCreateRequest,
    RealtimeSessionCreateResponse,
    ResponseAudioDeltaEvent,
    ResponseAudioDoneEvent,
    ResponseAudioTranscriptDeltaEvent,
    ResponseAudioTranscriptDoneEvent,
    ResponseContentPartAddedEvent,
    ResponseContentPartDoneEvent,
    ResponseCreatedEvent,
    ResponseCreateEventWithReferencesParam,
    ResponseDoneEvent,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    SessionCreatedEvent,
    SessionUpdatedEvent,
    SessionUpdateEvent,
)
from openai.types.realtime.realtime_conversation_item_assistant_message import RealtimeConversationItemAssistantMessage
from openai.types.realtime.realtime_conversation_item_system_message import RealtimeConversationItemSystemMessage
from openai.types.realtime.realtime_conversation_item_user_message import RealtimeConversationItemUserMessage
from openai.types.realtime.realtime_server_event import ConversationItemRetrieved
from pydantic import BaseModel, TypeAdapter

from gateway.http.errors import OpenAIError
from gateway.http.socket_errors import socket_error
from gateway.openai.realtime.events import (
    MAX_EVENT_DEPTH,
    ContentPart,
    ConversationItemCreate,
    ConversationItemDelete,
    ConversationItemRetrieve,
    Item,
    ItemReference,
    OutputAudioBufferClear,
    OutputAudioFormat,
    RateLimit,
    RealtimeProtocolError,
    ResponseCancel,
    ResponseCreate,
    ResponseParams,
    ResponseState,
    SessionPatch,
    SessionSettings,
    SessionUpdate,
    Unsupported,
    binary_frame_error,
    conversation_item_added,
    conversation_item_deleted,
    conversation_item_done,
    conversation_item_retrieved,
    error_event,
    parse_client_event,
    rate_limits_updated,
    response_content_part_added,
    response_content_part_done,
    response_created,
    response_done,
    response_output_audio_delta,
    response_output_audio_done,
    response_output_audio_transcript_delta,
    response_output_audio_transcript_done,
    response_output_item_added,
    response_output_item_done,
    session_created,
    session_updated,
)
from gateway.schemas import MAX_INPUT_CHARS, CustomVoice, SpeechUsage

if TYPE_CHECKING:
    from openai.types.realtime import (
        ConversationItem,
        ConversationItemCreateEventParam,
        ResponseCreateEventParam,
        SessionUpdateEventParam,
    )

# --- Helpers ------------------------------------------------------------------------------------------------------

ModelT = TypeVar("ModelT", bound=BaseModel)
SentMessage = (
    RealtimeConversationItemUserMessage
    | RealtimeConversationItemSystemMessage
    | RealtimeConversationItemAssistantMessage
)
_SERVER_EVENT: TypeAdapter[RealtimeServerEvent] = TypeAdapter(RealtimeServerEvent)
# session.created/updated type their session as the *request*, which has no id, object or expiry; OpenAI sends them
# (they are the response object's fields), and so do we: the only fields the SDK's event models do not declare.
EXTRAS = {"allowed_extras": frozenset({"session.id", "session.object", "session.expires_at"})}


def sdk_sends(event: RealtimeClientEventParam | ResponseCreateEventWithReferencesParam) -> str:
    """The text the SDK's ``RealtimeConnection.send`` puts on the socket for a param dict."""
    return json.dumps(maybe_transform(event, RealtimeClientEventParam | ResponseCreateEventWithReferencesParam))


def extras(value: object, path: str = "") -> set[str]:
    """Every field, at any depth, that the SDK's models took in without declaring it (their config allows extras)."""
    if isinstance(value, BaseModel):
        found = {f"{path}.{name}".lstrip(".") for name in value.model_extra or {}}
        for name in type(value).model_fields:
            found |= extras(getattr(value, name), f"{path}.{name}".lstrip("."))
        return found
    if isinstance(value, list):
        return set().union(*(extras(item, f"{path}[{index}]") for index, item in enumerate(value)))
    return set()


def server_event(text: str, expected: type[ModelT], *, allowed_extras: frozenset[str] = frozenset()) -> ModelT:
    """``text`` as the SDK reads it, strictly: the right event class, no unknown fields, nothing dropped or coerced."""
    data = json.loads(text)
    assert text == json.dumps(data, separators=(",", ":"))  # compact, as OpenAI's are
    event = _SERVER_EVENT.validate_python(data, strict=True)
    assert type(event) is expected
    assert extras(event) <= allowed_extras
    assert event.model_dump(mode="json", exclude_unset=True) == data
    assert data["event_id"].startswith("event_")
    return event


def refused(text: str) -> RealtimeProtocolError:
    with pytest.raises(RealtimeProtocolError) as caught:
        parse_client_event(text)
    # Whatever is refused, the error event the session sends about it is OpenAI's shape.
    sent = server_event(
        error_event(socket_error(caught.value), client_event_id=caught.value.event_id), RealtimeErrorEvent
    )
    assert sent.error.code == socket_error(caught.value).code
    assert sent.error.event_id == caught.value.event_id
    return caught.value


def _client_event_types() -> set[str]:
    """Every ``type`` of the SDK's client events, read from its param types."""
    types: set[str] = set()
    for event_type in typing.get_args(RealtimeClientEventParam):
        (literal,) = typing.get_args(typing.get_type_hints(event_type, include_extras=True)["type"])
        types.update(typing.get_args(literal))
    return types


def message(item: ConversationItem) -> SentMessage:
    """The SDK's item, which must be a message."""
    assert isinstance(item, SentMessage)
    return item


SETTINGS = SessionSettings(model="gpt-realtime")
USAGE = SpeechUsage(input_tokens=11, output_tokens=50, total_tokens=61)

# --- Client events the SDK sends ----------------------------------------------------------------------------------


def _outcome(text: str) -> object:
    try:
        return parse_client_event(text)
    except RealtimeProtocolError as exc:
        return socket_error(exc).code, socket_error(exc).param


def test_every_client_event_type_of_the_sdk_is_handled() -> None:
    """A new event type in a new SDK must be classified here, as acted on or as unsupported, not met as unknown."""
    types = _client_event_types()
    assert {"session.update", "response.create", "input_audio_buffer.append"} <= types  # the types were found
    for event_type in types:
        outcome = _outcome(json.dumps({"type": event_type}))
        # Parsed, or refused for a field it lacks (which is to know its type all the same).
        assert not isinstance(outcome, tuple) or outcome[0] == "missing_required_parameter", (event_type, outcome)
        assert not isinstance(outcome, tuple) or outcome[1] != "type"


def test_a_migrating_tts_callers_session_update() -> None:
    event: SessionUpdateEventParam = {
        "type": "session.update",
        "session": {
            "type": "realtime",
            "output_modalities": ["audio"],
            "audio": {"output": {"format": {"type": "audio/pcm", "rate": 24000}, "voice": "marin"}},
        },
    }
    parsed = parse_client_event(sdk_sends(event))
    assert parsed == SessionUpdate(SessionPatch(voice="marin", output_format=OutputAudioFormat.PCM))
    assert SETTINGS.apply(parsed.patch) == SessionSettings(model="gpt-realtime", voice="marin")


def test_a_session_update_with_every_field_the_sdk_types() -> None:
    """OpenAI's fields that a speaker ignores are accepted; the ones it uses are read."""
    event: SessionUpdateEventParam = {
        "type": "session.update",
        "event_id": "evt_1",
        "session": {
            "type": "realtime",
            "model": "gpt-realtime",
            "instructions": "Speak warmly.",
            "output_modalities": ["audio"],
            "max_output_tokens": "inf",
            "include": ["item.input_audio_transcription.logprobs"],
            "parallel_tool_calls": False,
            "prompt": {"id": "pmpt_1", "variables": {"city": "Paris"}, "version": "2"},
            "reasoning": {"effort": "low"},
            "tool_choice": "auto",
            "tools": [],
            "tracing": "auto",
            "truncation": {"type": "retention_ratio", "retention_ratio": 0.5},
            "audio": {
                "input": {
                    "format": {"type": "audio/pcm", "rate": 24000},
                    "noise_reduction": {"type": "near_field"},
                    "transcription": {"model": "gpt-4o-mini-transcribe", "language": "en"},
                    "turn_detection": {"type": "server_vad", "threshold": 0.5, "create_response": True},
                },
                "output": {"format": {"type": "audio/pcmu"}, "voice": {"id": "voice_123"}, "speed": 1.25},
            },
        },
    }
    parsed = parse_client_event(sdk_sends(event))
    assert parsed == SessionUpdate(
        SessionPatch(
            model="gpt-realtime",
            voice=CustomVoice(id="voice_123"),
            output_format=OutputAudioFormat.PCMU,
            speed=1.25,
            instructions="Speak warmly.",
        ),
        event_id="evt_1",
    )


def test_a_session_update_sent_as_the_sdks_model() -> None:
    """The SDK's other way to send: a pydantic event, serialised by its own ``to_json``."""
    event = SessionUpdateEvent(
        type="session.update",
        session=RealtimeSessionCreateRequest.model_validate(
            {"type": "realtime", "audio": {"output": {"format": {"type": "audio/pcma"}, "speed": 0.5}}}
        ),
    )
    parsed = parse_client_event(event.to_json(use_api_names=True, exclude_unset=True))
    assert parsed == SessionUpdate(SessionPatch(output_format=OutputAudioFormat.PCMA, speed=0.5))


@pytest.mark.parametrize(
    ("content", "role", "expected"),
    [
        ([{"type": "input_text", "text": "Hello."}], "user", [ContentPart("input_text", "Hello.")]),
        ([{"type": "input_text", "text": "Be brief."}], "system", [ContentPart("input_text", "Be brief.")]),
        ([{"type": "output_text", "text": "Hi!"}], "assistant", [ContentPart("output_text", "Hi!")]),
        # The beta API's "text", and any text part whatever the role, are typed as the role's own text parts.
        ([{"type": "text", "text": "Hi!"}], "assistant", [ContentPart("output_text", "Hi!")]),
        (
            [{"type": "input_text", "text": "One."}, {"type": "output_text", "text": "Two."}],
            "user",
            [ContentPart("input_text", "One."), ContentPart("input_text", "Two.")],
        ),
    ],
)
def test_conversation_item_create(content: list[dict[str, str]], role: str, expected: list[ContentPart]) -> None:
    raw = {"type": "conversation.item.create", "item": {"type": "message", "role": role, "content": content}}
    parsed = parse_client_event(json.dumps(raw))
    assert isinstance(parsed, ConversationItemCreate)
    assert parsed.item.role == role
    assert list(parsed.item.content) == expected
    assert parsed.item.id.startswith("item_")
    assert parsed.item.text == "\n".join(part.text for part in expected)


def test_conversation_item_create_keeps_the_clients_ids() -> None:
    event: ConversationItemCreateEventParam = {
        "type": "conversation.item.create",
        "event_id": "evt_2",
        "previous_item_id": "root",
        "item": {
            "id": "msg_1",
            "type": "message",
            "role": "user",
            "object": "realtime.item",
            "status": "completed",
            "content": [{"type": "input_text", "text": "Read this aloud."}],
        },
    }
    assert parse_client_event(sdk_sends(event)) == ConversationItemCreate(
        Item("msg_1", "user", (ContentPart("input_text", "Read this aloud."),)), "root", event_id="evt_2"
    )


def test_an_out_of_band_response_with_its_own_input() -> None:
    event: ResponseCreateEventWithReferencesParam = {
        "type": "response.create",
        "response": {
            "conversation": "none",
            "input": [
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Say this."}]},
                {"type": "item_reference", "id": "msg_1"},
            ],
            "instructions": "Slowly.",
            "output_modalities": ["audio"],
            "audio": {"output": {"format": {"type": "audio/pcma"}, "voice": "cedar"}},
            "metadata": {"topic": "greeting"},
            "max_output_tokens": 500,
            "tool_choice": "none",
        },
    }
    parsed = parse_client_event(sdk_sends(event))
    assert isinstance(parsed, ResponseCreate)
    params = parsed.params
    assert (params.conversation, params.instructions, params.voice) == ("none", "Slowly.", "cedar")
    assert params.output_format is OutputAudioFormat.PCMA
    assert params.metadata == {"topic": "greeting"}
    assert params.input is not None
    message, reference = params.input
    assert isinstance(message, Item)
    assert message.content == (ContentPart("input_text", "Say this."),)
    assert reference == ItemReference("msg_1")


def test_a_bare_response_create_speaks_the_conversation() -> None:
    event: ResponseCreateEventParam = {"type": "response.create"}
    assert parse_client_event(sdk_sends(event)) == ResponseCreate(ResponseParams())


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        ({"type": "response.cancel"}, ResponseCancel()),
        ({"type": "response.cancel", "response_id": "resp_1", "event_id": "e"}, ResponseCancel("resp_1", event_id="e")),
        ({"type": "output_audio_buffer.clear"}, OutputAudioBufferClear()),
        ({"type": "conversation.item.delete", "item_id": "msg_1"}, ConversationItemDelete("msg_1")),
        ({"type": "conversation.item.retrieve", "item_id": "msg_1"}, ConversationItemRetrieve("msg_1")),
        ({"type": "input_audio_buffer.append", "audio": "AAAA"}, Unsupported("input_audio_buffer.append")),
        (
            {"type": "input_audio_buffer.commit", "event_id": "e"},
            Unsupported("input_audio_buffer.commit", event_id="e"),
        ),
        ({"type": "input_audio_buffer.clear"}, Unsupported("input_audio_buffer.clear")),
        (
            {"type": "conversation.item.truncate", "item_id": "msg_1", "content_index": 0, "audio_end_ms": 100},
            Unsupported("conversation.item.truncate"),
        ),
    ],
)
def test_the_other_client_events(event: RealtimeClientEventParam, expected: object) -> None:
    assert parse_client_event(sdk_sends(event)) == expected


def test_unsupported_events_are_answered_with_an_error_naming_them() -> None:
    parsed = parse_client_event('{"type":"transcription_session.update","event_id":"e1","session":{}}')
    assert parsed == Unsupported("transcription_session.update", event_id="e1")
    assert isinstance(parsed, Unsupported)
    sent = server_event(error_event(parsed.error, client_event_id=parsed.event_id), RealtimeErrorEvent)
    assert (sent.error.code, sent.error.param, sent.error.event_id) == ("unsupported_event", "type", "e1")
    assert "transcription_session.update" in sent.error.message


def test_text_at_the_length_limit_is_accepted() -> None:
    text = "x" * MAX_INPUT_CHARS
    raw = {"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": []}}
    raw["item"]["content"] = [{"type": "input_text", "text": text}]  # type: ignore[index]
    parsed = parse_client_event(json.dumps(raw))
    assert isinstance(parsed, ConversationItemCreate)
    assert parsed.item.text == text


# --- Client events refused ----------------------------------------------------------------------------------------


def _session_update(session: dict[str, Any]) -> str:
    return json.dumps({"type": "session.update", "event_id": "evt_9", "session": {"type": "realtime", **session}})


def _item(content: list[dict[str, Any]], **item: Any) -> str:
    message = {"type": "message", "role": "user", "content": content, **item}
    return json.dumps({"type": "conversation.item.create", "event_id": "evt_9", "item": message})


def _response(**response: Any) -> str:
    return json.dumps({"type": "response.create", "event_id": "evt_9", "response": response})


def _output(**output: Any) -> str:
    return _session_update({"audio": {"output": output}})


def _create(item: dict[str, Any]) -> str:
    return json.dumps({"type": "conversation.item.create", "item": item})


TOO_LONG = "x" * (MAX_INPUT_CHARS + 1)
SPEED = "session.audio.output.speed"
FORMAT = "session.audio.output.format"


@pytest.mark.parametrize(
    ("text", "code", "param"),
    [
        ('{"type": "session.update",', "invalid_json", None),
        ("[1, 2]", "invalid_event", None),
        ('"session.update"', "invalid_event", None),
        ("{}", "missing_required_parameter", "type"),
        ('{"type": 7}', "invalid_type", "type"),
        ('{"type": "session.update"}', "missing_required_parameter", "session"),
        ('{"type": "session.update", "session": {}}', "missing_required_parameter", "session.type"),
        (_session_update({"type": "transcription"}), "invalid_value", "session.type"),
        (_session_update({"bogus_field": 1}), "unknown_parameter", "session.bogus_field"),
        # The beta API's shape: refused, where ignoring it would leave the voice and format unchanged.
        (_session_update({"voice": "alloy"}), "unknown_parameter", "session.voice"),
        (_session_update({"output_modalities": ["text"]}), "unsupported_value", "session.output_modalities"),
        (_session_update({"output_modalities": ["thinking"]}), "invalid_value", "session.output_modalities[0]"),
        (_session_update({"tools": [{"type": "function", "name": "f"}]}), "unsupported_value", "session.tools"),
        (_session_update({"instructions": 5}), "invalid_type", "session.instructions"),
        (_session_update({"instructions": TOO_LONG}), "string_above_max_length", "session.instructions"),
        (_session_update({"model": ""}), "string_below_min_length", "session.model"),
        (_output(speed="fast"), "invalid_type", SPEED),
        (_output(speed=True), "invalid_type", SPEED),
        (_output(speed=0.1), "decimal_below_min_value", SPEED),
        (_output(speed=4.5), "decimal_above_max_value", SPEED),
        (_output(voice=5), "invalid_type", "session.audio.output.voice"),
        (_output(voice={"name": "x"}), "missing_required_parameter", "session.audio.output.voice.id"),
        (_output(format="pcm16"), "invalid_type", FORMAT),
        (_output(format={}), "missing_required_parameter", f"{FORMAT}.type"),
        (_output(format={"type": "audio/opus"}), "invalid_value", f"{FORMAT}.type"),
        (_output(format={"type": "audio/pcm", "rate": 16000}), "invalid_value", f"{FORMAT}.rate"),
        (_item([{"type": "input_text", "text": TOO_LONG}]), "string_above_max_length", "item.content[0].text"),
        (_item([{"type": "input_text"}]), "missing_required_parameter", "item.content[0].text"),
        (_item([{"type": "input_text", "text": None}]), "invalid_type", "item.content[0].text"),
        (_item([{"type": "input_audio", "audio": "AAAA"}]), "unsupported_value", "item.content[0].type"),
        (_item([{"type": "input_image", "image_url": "data:"}]), "unsupported_value", "item.content[0].type"),
        (_item([{"type": "input_text", "text": "a"}, {"type": "video"}]), "invalid_value", "item.content[1].type"),
        (_item([], role="tool"), "invalid_value", "item.role"),
        (_item("Hello."), "invalid_type", "item.content"),  # type: ignore[arg-type]  # the mistake tested
        (_item([], id="x" * 65), "string_above_max_length", "item.id"),
        (_create({"type": "function_call", "name": "f"}), "unsupported_value", "item.type"),
        (_create({"type": "item_reference", "id": "a"}), "invalid_value", "item.type"),
        ('{"type": "conversation.item.delete"}', "missing_required_parameter", "item_id"),
        ('{"type": "response.cancel", "response_id": 1}', "invalid_type", "response_id"),
        (_response(conversation="conv_1"), "invalid_value", "response.conversation"),
        (_response(output_modalities=["text"]), "unsupported_value", "response.output_modalities"),
        (
            _response(input=[{"type": "message", "role": "user", "content": [{"type": "input_audio"}]}]),
            "unsupported_value",
            "response.input[0].content[0].type",
        ),
        (_response(input=[{"type": "item_reference"}]), "missing_required_parameter", "response.input[0].id"),
        (_response(audio={"output": {"speed": 1.0}}), "unknown_parameter", "response.audio.output.speed"),
        (_response(metadata={str(key): "v" for key in range(17)}), "object_above_max_properties", "response.metadata"),
        (_response(metadata={"k": 1}), "invalid_type", "response.metadata.k"),
        (_response(metadata={"k" * 65: "v"}), "string_above_max_length", "response.metadata." + "k" * 65),
        (_response(tools=[{"type": "function", "name": "f"}]), "unsupported_value", "response.tools"),
    ],
)
def test_refused(text: str, code: str, param: str | None) -> None:
    error = socket_error(refused(text))
    assert (error.code, error.param) == (code, param)
    assert error.status_code == 400
    assert error.type == "invalid_request_error"


def test_an_error_names_the_client_event() -> None:
    assert refused(_session_update({"bogus_field": 1})).event_id == "evt_9"
    assert refused('{"type": "nope", "event_id": "e7"}').event_id == "e7"
    assert refused('{"type": "nope", "event_id": 7}').event_id is None  # only a string is an id to echo


def test_an_unknown_type_is_refused_as_openai_refuses_it() -> None:
    """OpenAI answers an unknown type with ``invalid_value`` on ``type``, listing the types it takes."""
    error = socket_error(refused('{"type": "nope"}'))
    assert (error.code, error.param) == ("invalid_value", "type")
    assert error.message.startswith("Invalid value: 'nope'. Supported values are: 'session.update',")


def test_openais_wording() -> None:
    assert (
        socket_error(refused(_session_update({"bogus_field": 1}))).message
        == "Unknown parameter: 'session.bogus_field'."
    )
    assert socket_error(refused(_item([{"type": "input_text", "text": TOO_LONG}]))).message == (
        f"Invalid 'item.content[0].text': string too long. Expected a string with maximum length {MAX_INPUT_CHARS}, "
        f"but got a string with length {MAX_INPUT_CHARS + 1} instead."
    )
    assert socket_error(refused(_item([{"type": "input_text"}]))).message == (
        "Missing required parameter: 'item.content[0].text'."
    )


def test_a_binary_frame_is_refused_as_openai_refuses_it() -> None:
    error = socket_error(binary_frame_error())
    sent = server_event(error_event(error), RealtimeErrorEvent)
    assert (sent.error.code, sent.error.param, sent.error.event_id) == ("invalid_event", None, None)


def test_too_deep_json_is_refused_before_parsing() -> None:
    """Nesting beyond the limit is refused unparsed: ``json`` would recurse once per level, and fail near 1,000."""
    deep = (
        '{"type": "session.update", "session": {"type": "realtime", "tracing": ' + "[" * 100_000 + "]" * 100_000 + "}}"
    )
    assert socket_error(refused(deep)).code == "json_too_deep"
    nested = _session_update({"tracing": {"metadata": {"a": {"b": [[[]]]}}}})
    assert isinstance(parse_client_event(nested, max_depth=MAX_EVENT_DEPTH), SessionUpdate)
    with pytest.raises(RealtimeProtocolError) as caught:
        parse_client_event(nested, max_depth=4)
    assert socket_error(caught.value).code == "json_too_deep"


# --- Server events ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "settings",
    [
        SETTINGS,
        SessionSettings("gpt-realtime", "marin", OutputAudioFormat.PCMU, 1.5, "Speak warmly."),
        SessionSettings("gpt-realtime", CustomVoice(id="voice_123"), OutputAudioFormat.PCMA, 0.25),
    ],
)
@pytest.mark.parametrize("expires_at", [None, 1_789_728_574])
def test_session_events(settings: SessionSettings, expires_at: int | None) -> None:
    created = server_event(session_created("sess_1", settings, expires_at=expires_at), SessionCreatedEvent, **EXTRAS)
    updated = server_event(session_updated("sess_1", settings, expires_at=expires_at), SessionUpdatedEvent, **EXTRAS)
    for session in (created.session, updated.session):
        assert isinstance(session, RealtimeSessionCreateRequest)
        assert (session.model_extra or {}).get("id") == "sess_1"
        assert (session.model, session.instructions, session.output_modalities) == (
            settings.model,
            settings.instructions,
            ["audio"],
        )
        output = session.audio.output if session.audio else None
        assert output is not None
        assert output.format is not None
        assert (output.format.type, output.speed) == (settings.output_format.value, settings.speed)
        voice = output.voice.model_dump() if isinstance(output.voice, BaseModel) else output.voice
        assert voice == (settings.voice.model_dump() if isinstance(settings.voice, CustomVoice) else settings.voice)


def test_the_session_is_openais_session_object_too() -> None:
    """What OpenAI sends in ``session.created`` is its full session object, id and all; ours validates as one."""
    data = json.loads(session_created("sess_1", SETTINGS, expires_at=1_789_728_574))["session"]
    session = RealtimeSessionCreateResponse.model_validate(data, strict=True)
    assert extras(session) == set()
    assert session.model_dump(mode="json", exclude_unset=True) == data
    assert (session.id, session.object, session.expires_at) == ("sess_1", "realtime.session", 1_789_728_574)


def test_the_pcm_format_names_its_rate() -> None:
    event = server_event(session_created("sess_1", SETTINGS), SessionCreatedEvent, **EXTRAS)
    assert isinstance(event.session, RealtimeSessionCreateRequest)
    assert event.session.audio is not None
    assert event.session.audio.output is not None
    assert event.session.audio.output.format is not None
    assert event.session.audio.output.format.model_dump() == {"type": "audio/pcm", "rate": 24000}


@pytest.mark.parametrize("previous_item_id", [None, "msg_0"])
@pytest.mark.parametrize(
    "item",
    [
        Item("msg_1", "user", (ContentPart("input_text", "Hello."), ContentPart("input_text", "Again."))),
        Item("msg_2", "system", (ContentPart("input_text", "Be brief."),)),
        Item("msg_3", "assistant", (ContentPart("output_text", "Hi."),)),
        Item("msg_4", "assistant", (ContentPart("output_audio", "Spoken."),), "incomplete"),
        Item("msg_5", "assistant", (), "in_progress"),
    ],
)
def test_conversation_item_events(item: Item, previous_item_id: str | None) -> None:
    added = server_event(conversation_item_added(item, previous_item_id=previous_item_id), ConversationItemAdded)
    done = server_event(conversation_item_done(item, previous_item_id=previous_item_id), ConversationItemDone)
    retrieved = server_event(conversation_item_retrieved(item), ConversationItemRetrieved)
    assert added.previous_item_id == done.previous_item_id == previous_item_id
    for sent in (added.item, done.item, retrieved.item):
        assert sent.model_dump(mode="json", exclude_unset=True) == item.wire()
        sent_message = message(sent)
        assert (sent_message.id, sent_message.role, sent_message.status) == (item.id, item.role, item.status)


def test_conversation_item_deleted() -> None:
    assert server_event(conversation_item_deleted("msg_1"), ConversationItemDeletedEvent).item_id == "msg_1"


def _speak(response: ResponseState, text: str, audio: bytes) -> list[str]:
    """A response's events from ``response.created`` to its audio's end, as a session sends them."""
    events = [response_created(response), response_output_item_added(response), response_content_part_added(response)]
    response = response.add_transcript(text)
    events += [
        response_output_audio_transcript_delta(response, text),
        response_output_audio_delta(response, audio),
        response_output_audio_done(response),
        response_output_audio_transcript_done(response),
        response_content_part_done(response),
    ]
    return events


def test_a_completed_response() -> None:
    settings = SessionSettings("gpt-realtime", "marin", OutputAudioFormat.PCMU)
    params = ResponseParams(voice="cedar", metadata={"topic": "greeting"})
    response = ResponseState.start(settings, params, conversation_id="conv_1")
    assert (response.voice, response.output_format, response.conversation) == ("cedar", OutputAudioFormat.PCMU, "auto")
    events = _speak(response, "Hello there.", b"\xff\x7f\x00")
    created = server_event(events[0], ResponseCreatedEvent)
    assert (created.response.id, created.response.status, created.response.output) == (response.id, "in_progress", [])
    assert created.response.conversation_id == "conv_1"
    assert created.response.audio is not None
    assert created.response.audio.output is not None
    assert created.response.audio.output.voice == "cedar"
    added = message(server_event(events[1], ResponseOutputItemAddedEvent).item)
    assert (added.id, added.role, added.status, added.content) == (response.item_id, "assistant", "in_progress", [])
    part = server_event(events[2], ResponseContentPartAddedEvent)
    assert (part.part.type, part.part.transcript) == ("audio", "")
    transcript_delta = server_event(events[3], ResponseAudioTranscriptDeltaEvent)
    audio_delta = server_event(events[4], ResponseAudioDeltaEvent)
    audio_done = server_event(events[5], ResponseAudioDoneEvent)
    transcript_done = server_event(events[6], ResponseAudioTranscriptDoneEvent)
    part_done = server_event(events[7], ResponseContentPartDoneEvent)
    for event in (part, transcript_delta, audio_delta, audio_done, transcript_done, part_done):
        assert (event.response_id, event.item_id, event.output_index, event.content_index) == (
            response.id,
            response.item_id,
            0,
            0,
        )
    assert transcript_delta.delta == transcript_done.transcript == part_done.part.transcript == "Hello there."
    assert base64.b64decode(audio_delta.delta) == b"\xff\x7f\x00"

    done_state = response.add_transcript("Hello there.").finish("completed", usage=USAGE)
    item_done = message(server_event(response_output_item_done(done_state), ResponseOutputItemDoneEvent).item)
    assert item_done.status == "completed"
    assert item_done.model_dump(exclude_unset=True)["content"] == [
        {"type": "output_audio", "transcript": "Hello there."}
    ]
    done = server_event(response_done(done_state), ResponseDoneEvent).response
    assert (done.status, done.status_details, done.metadata) == ("completed", None, {"topic": "greeting"})
    assert done.output is not None
    assert [item.id for item in done.output] == [response.item_id]
    assert done.usage is not None
    assert (done.usage.input_tokens, done.usage.output_tokens, done.usage.total_tokens) == (11, 50, 61)
    assert done.usage.output_token_details is not None
    assert (done.usage.output_token_details.audio_tokens, done.usage.output_token_details.text_tokens) == (50, 0)
    assert done.usage.input_token_details is not None
    assert done.usage.input_token_details.text_tokens == 11


def test_a_cancelled_out_of_band_response() -> None:
    response = ResponseState.start(SETTINGS, ResponseParams(conversation="none"), conversation_id="conv_1")
    assert (response.conversation_id, response.conversation) == (None, "none")
    cancelled = response.add_transcript("Half").finish("cancelled", usage=USAGE)
    done = server_event(response_done(cancelled), ResponseDoneEvent).response
    assert (done.status, done.conversation_id) == ("cancelled", None)
    assert done.status_details is not None
    assert (done.status_details.type, done.status_details.reason) == ("cancelled", "client_cancelled")
    assert done.output is not None
    assert message(done.output[0]).status == "incomplete"


def test_a_failed_response() -> None:
    error = OpenAIError(503, "The engine failed.", type="server_error", code="engine_failed")
    failed = ResponseState.start(SETTINGS, ResponseParams(), conversation_id="conv_1").finish("failed", error=error)
    done = server_event(response_done(failed), ResponseDoneEvent).response
    assert (done.status, done.usage) == ("failed", None)
    assert done.status_details is not None
    assert done.status_details.error is not None
    assert done.status_details.error.model_dump() == {
        "type": "server_error",
        "code": "engine_failed",
        "message": "The engine failed.",
    }
    # Nothing was spoken: the item ends empty-handed but present, as OpenAI's interrupted items are.
    assert done.output is not None
    assert done.output[0].model_dump(exclude_unset=True)["content"] == [{"type": "output_audio", "transcript": ""}]


def test_a_custom_voice_shows_as_its_id_in_a_response() -> None:
    """A response object types its voice as a string only (the session object takes ``{"id"}``)."""
    settings = SessionSettings("gpt-realtime", CustomVoice(id="voice_123"))
    response = ResponseState.start(settings, ResponseParams(), conversation_id="conv_1")
    created = server_event(response_created(response), ResponseCreatedEvent).response
    assert created.audio is not None
    assert created.audio.output is not None
    assert created.audio.output.voice == "voice_123"


def test_rate_limits_updated() -> None:
    limits = [RateLimit("requests", 100, 99, 0.6), RateLimit("tokens", 15_000_000, 14_999_716, 1)]
    event = server_event(rate_limits_updated(limits), RateLimitsUpdatedEvent)
    assert [(limit.name, limit.limit, limit.remaining, limit.reset_seconds) for limit in event.rate_limits] == [
        ("requests", 100, 99, 0.6),
        ("tokens", 15_000_000, 14_999_716, 1.0),
    ]


def test_error_event() -> None:
    error = OpenAIError(429, "Over the tenant's limit.", code="rate_limit_exceeded")
    event = server_event(error_event(error, client_event_id="evt_1"), RealtimeErrorEvent)
    assert event.error.model_dump() == {
        "type": "invalid_request_error",
        "code": "rate_limit_exceeded",
        "message": "Over the tenant's limit.",
        "param": None,
        "event_id": "evt_1",
    }


def test_event_ids_are_fresh() -> None:
    ids = {json.loads(conversation_item_deleted("msg_1"))["event_id"] for _ in range(100)}
    assert len(ids) == 100


def test_text_that_utf8_cannot_carry_is_refused() -> None:
    """JSON lets a client send a lone surrogate, which no UTF-8 text frame could carry back to it."""
    error = socket_error(refused(_item([{"type": "input_text", "text": "\ud800"}])))
    assert (error.code, error.param) == ("invalid_value", "item.content[0].text")


def test_server_events_are_ascii() -> None:
    """Escaped, so that no text a session puts in an event can make it unsendable."""
    item = Item("msg_1", "user", (ContentPart("input_text", "Caf\u00e9 \u4f60\u597d \ud800"),))
    sent = conversation_item_added(item, previous_item_id=None)
    assert sent.isascii()
    assert json.loads(sent)["item"]["content"][0]["text"] == "Caf\u00e9 \u4f60\u597d \ud800"


# --- States -------------------------------------------------------------------------------------------------------


def test_session_settings_apply_and_changes() -> None:
    patch = SessionPatch(voice="marin", speed=1.0, instructions="")
    assert SETTINGS.apply(patch) == SessionSettings("gpt-realtime", "marin")
    assert SETTINGS.changes(patch) == {"voice"}  # the same speed and instructions change nothing
    assert SETTINGS.changes(SessionPatch()) == set()
    custom = SessionPatch(voice=CustomVoice(id="voice_1"))
    assert SETTINGS.apply(custom).changes(custom) == set()


def test_a_null_seed_clears_the_sessions_seed_and_an_absent_one_keeps_it() -> None:
    def update(session: dict[str, object]) -> SessionPatch:
        event = parse_client_event(json.dumps({"type": "session.update", "session": {"type": "realtime", **session}}))
        assert isinstance(event, SessionUpdate)
        return event.patch

    seeded = SETTINGS.apply(update({"seed": 7}))
    assert seeded.seed == 7
    assert seeded.apply(update({"instructions": "Calmly."})).seed == 7
    assert seeded.apply(update({"seed": None})).seed is None
    assert seeded.changes(update({"seed": None})) == {"seed"}


def test_a_responses_settings_override_the_sessions() -> None:
    session = SessionSettings("gpt-realtime", "marin", OutputAudioFormat.PCM, 1.25, "Warmly.")
    params = ResponseParams(voice="cedar", output_format=OutputAudioFormat.PCMA, instructions="Coldly.")
    assert session.for_response(params) == SessionSettings(
        "gpt-realtime", "cedar", OutputAudioFormat.PCMA, 1.25, "Coldly."
    )
    assert session.for_response(ResponseParams()) == session


def test_the_speech_request_is_pcm_at_the_sessions_voice() -> None:
    settings = SessionSettings("tts-1", "marin", OutputAudioFormat.PCMU, 1.5, "")
    request = settings.speech_request("Hello.")
    assert (request.model, request.input, request.voice, request.speed) == ("tts-1", "Hello.", "marin", 1.5)
    assert (request.response_format, request.instructions) == ("pcm", None)


@pytest.mark.parametrize(
    ("fmt", "rate", "law"),
    [
        (OutputAudioFormat.PCM, 24000, None),
        (OutputAudioFormat.PCMU, 8000, "pcmu"),
        (OutputAudioFormat.PCMA, 8000, "pcma"),
    ],
)
def test_output_formats(fmt: OutputAudioFormat, rate: int, law: str | None) -> None:
    assert (fmt.sample_rate, fmt.g711_law) == (rate, law)
