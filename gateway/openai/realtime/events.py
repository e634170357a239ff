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

Server events are built here as JSON text, each with a fresh ``event_id``, from the small immutable states of
``states.py``: :class:`SessionSettings`, :class:`Item`, :class:`ResponseState`, :class:`RateLimit`. Client events are
parsed in ``client_events.py``; their wire models, and OpenAI's wording of what they refuse, are in ``_wire.py``. This
module is the session's one namespace for all three.
"""

from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING, Any

from gateway.openai.realtime._wire import RealtimeProtocolError
from gateway.openai.realtime.client_events import (
    MAX_EVENT_DEPTH,
    ClientEvent,
    ConversationItemCreate,
    ConversationItemDelete,
    ConversationItemRetrieve,
    OutputAudioBufferClear,
    ResponseCancel,
    ResponseCreate,
    SessionUpdate,
    Unsupported,
    binary_frame_error,
    parse_client_event,
)
from gateway.openai.realtime.states import (
    ContentPart,
    Item,
    ItemReference,
    OutputAudioFormat,
    RateLimit,
    ResponseParams,
    ResponseState,
    SessionPatch,
    SessionSettings,
    Voice,
    new_id,
)

if TYPE_CHECKING:
    from collections.abc import Iterable

    from gateway.http.errors import OpenAIError
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
