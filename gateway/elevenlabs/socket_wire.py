"""ElevenLabs' text-to-speech sockets on the wire: a client message parsed, its fields read, and the messages out
rendered (audio with its alignment, an error); the session (``session.py``) decides what they do."""

from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import ValidationError

from gateway.elevenlabs import errors
from gateway.elevenlabs.errors import QUOTA_CODE
from gateway.elevenlabs.wire import TextToSpeechRequest, VoiceSettings
from gateway.http.errors import OpenAIError
from gateway.http.socket_errors import fault_error
from gateway.sessions.session_errors import SessionError

if TYPE_CHECKING:
    from litestar.types import ReceiveMessage

    from gateway.speech.alignment import CharacterTimes

__all__ = [
    "PieceRenderer",
    "StreamInputPiece",
    "audio_message",
    "dictionary_locators",
    "error_message",
    "invalid",
    "parse_message",
    "socket_error",
    "unexpected",
    "voice_settings_of",
]


def socket_error(failure: BaseException) -> OpenAIError:
    """ElevenLabs' table on its sockets: what :func:`error_message` says of ``failure``, the session kernel's own
    faults (``gateway/sessions/session_errors.py``) in their fields, any other failure by
    :func:`gateway.elevenlabs.errors.socket_error`."""
    if isinstance(failure, SessionError):
        return fault_error(failure)
    return errors.socket_error(failure)


def unexpected(failure: BaseException) -> bool:
    """Whether the table has no words for ``failure`` but an internal error's (a bug: its traceback is logged)."""
    error = socket_error(failure)
    return error.status_code >= 500 and error.code is None


def error_message(error: OpenAIError) -> str:
    """An error on the socket: ``{"message", "error", "code"}`` (the SDK's WebSocket error payload), ``code`` being
    the status the same error gets on the REST routes."""
    if error.code == QUOTA_CODE:  # a monthly budget spent, in ElevenLabs' words (as on its REST routes)
        return json.dumps({"message": error.message, "error": "quota_exceeded", "code": 401})
    return json.dumps({"message": error.message, "error": error.code or "error", "code": error.status_code})


def invalid(message: str, code: str = "invalid_message") -> OpenAIError:
    return OpenAIError(400, message, code=code)


class PieceRenderer(Protocol):
    """Renders the messages out of one piece as it is spoken: its audio, and its characters' times as they become
    known."""

    def audio(self, data: bytes, run: CharacterTimes | None, heard_s: float) -> list[str]:
        """The messages of encoded ``data`` and the characters ``run`` that became known with it; ``heard_s``: the
        piece's audio so far, with this one's, in seconds."""

    def end(self, tail: bytes, run: CharacterTimes | None, heard_s: float, drained_s: float) -> list[str]:
        """The piece's last messages: the encoder's ``tail`` (``drained_s`` of silence after ``heard_s``) and the
        characters left."""


class StreamInputPiece:
    """Text-to-speech sockets: each alignment counted from the end of the one before (where Pipecat's clock stands),
    the first after ``lead`` seconds of space since the context's previous piece."""

    def __init__(self, tag: dict[str, Any], lead: float | None) -> None:
        self._tag = tag
        self._lead = lead
        self._since = 0.0

    def audio(self, data: bytes, run: CharacterTimes | None, heard_s: float) -> list[str]:
        if not data and run is None:
            return []
        message = audio_message(self._tag, data, run, self._since, lead=self._lead if run else None)
        if run is not None:
            self._since, self._lead = run.ends[-1], None
        return [message]

    def end(self, tail: bytes, run: CharacterTimes | None, heard_s: float, drained_s: float) -> list[str]:
        return self.audio(tail, run, heard_s)


def parse_message(message: ReceiveMessage) -> dict[str, Any]:
    """A client message as a JSON object.

    Raises:
        OpenAIError: a binary frame, or not a JSON object (400).
    """
    text = message.get("text")
    if not isinstance(text, str):
        raise invalid("Messages are JSON text frames.")
    try:
        parsed = json.loads(text)
    except (ValueError, RecursionError):
        raise invalid("The message is not valid JSON.") from None
    if not isinstance(parsed, dict):
        raise invalid("A message is a JSON object.")
    return parsed


def dictionary_locators(value: object) -> list[tuple[str, str | None]] | None:
    """A context's first message's ``pronunciation_dictionary_locators`` (as on the REST routes).

    Raises:
        OpenAIError: not a list of at most 3 locators (400).
    """
    if value is None:
        return None
    try:
        locators = TextToSpeechRequest.model_validate({"text": "-", "pronunciation_dictionary_locators": value})
    except ValidationError as exc:
        raise invalid(f"Invalid pronunciation_dictionary_locators: {exc.errors()[0]['msg']}") from None
    return locators.dictionaries()


def voice_settings_of(value: object) -> VoiceSettings:
    """A message's ``voice_settings`` (only ``speed`` changes anything).

    Raises:
        OpenAIError: not ElevenLabs' voice settings (400).
    """
    try:
        return VoiceSettings.model_validate(value)
    except ValidationError as exc:
        raise invalid(f"Invalid voice_settings: {exc.errors()[0]['msg']}") from None


def audio_message(
    tag: dict[str, Any], audio: bytes, run: CharacterTimes | None, since_s: float, *, lead: float | None
) -> str:
    """``AudioOutputMulti`` (``AudioOutput`` without ``tag``): the audio, and the alignment of the characters that
    became known with it; ``lead``: after the space that separates them from the context's previous piece, which lasts
    that many seconds (the silence the encoder put between the two)."""
    alignment: dict[str, Any] | None = None
    if run is not None:
        alignment = run.stream_input(since_s - (lead or 0.0))
        if lead is not None:
            alignment = {
                "chars": [" ", *alignment["chars"]],
                "charStartTimesMs": [0, *alignment["charStartTimesMs"]],
                "charDurationsMs": [round(lead * 1000), *alignment["charDurationsMs"]],
            }
    return json.dumps(
        {
            "audio": base64.b64encode(audio).decode(),
            "isFinal": None,
            **tag,
            "alignment": alignment,
            "normalizedAlignment": alignment,
        }
    )
