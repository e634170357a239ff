"""ElevenLabs' text-to-speech sockets on the wire: a client message parsed, its fields read, and the messages out
rendered (audio with its alignment, an error); the session (``session.py``) decides what they do."""

from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING, Any, Final, Protocol

from pydantic import ValidationError

from gateway.elevenlabs import errors
from gateway.elevenlabs.errors import QUOTA_CODE
from gateway.elevenlabs.wire import TextToSpeechRequest, VoiceSettings
from gateway.http.errors import OpenAIError
from gateway.http.socket_errors import fault_error
from gateway.sessions.serving import POLICY_VIOLATION
from gateway.sessions.session_errors import SessionError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from litestar.types import ReceiveMessage

    from gateway.speech.alignment import CharacterTimes

__all__ = [
    "NO_CHARACTERS",
    "PieceRenderer",
    "StreamInputPiece",
    "audio_message",
    "dictionary_locators",
    "error_message",
    "followed_by_space",
    "invalid",
    "parse_message",
    "socket_error",
    "too_many_contexts",
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


MAX_ACTIVE_CONVERSATIONS: Final = "max_active_conversations"
"""ElevenLabs' error for a context opened over a socket's limit, after which its server closes the socket (1008)."""
_CLOSE_CODES: Mapping[str, int] = {MAX_ACTIVE_CONVERSATIONS: POLICY_VIOLATION}
"""The errors that end the socket as ElevenLabs' own do, by the close code that follows: their ``code`` is that close
code, as ElevenLabs sends it (the SDK's ``TextToDialogueWebsocketError.code``: "WebSocket close code that will follow
this payload")."""


def error_message(error: OpenAIError) -> str:
    """An error on the socket: ``{"message", "error", "code"}`` (the SDK's WebSocket error payload), ``code`` being
    the status the same error gets on the REST routes, or the close code of an error that ends the socket as
    ElevenLabs' does (:data:`_CLOSE_CODES`)."""
    if error.code == QUOTA_CODE:  # a monthly budget spent, in ElevenLabs' words (as on its REST routes)
        return json.dumps({"message": error.message, "error": "quota_exceeded", "code": 401})
    code = _CLOSE_CODES.get(error.code or "", error.status_code)
    return json.dumps({"message": error.message, "error": error.code or "error", "code": code})


def too_many_contexts(limit: int) -> OpenAIError:
    """A context opened while ``limit`` are: ElevenLabs answers it with :data:`MAX_ACTIVE_CONVERSATIONS` and closes
    the socket (LiveKit's agents-js issue #1985 quotes its server), which the session does too."""
    message = f"A socket may have at most {limit} contexts open at once: close one before opening another."
    return OpenAIError(429, message, code=MAX_ACTIVE_CONVERSATIONS)


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
    """Text-to-speech sockets: each alignment counted from the end of the one before (where Pipecat's clock stands);
    the piece's last one ends with a space that lasts to the end of its audio, the encoder's drain included, and the
    first normalized one opens with a space, as ElevenLabs' alignment of every generation does (``"Hello there. "``,
    normalized ``" Hello there. "``): Pipecat's ``ElevenLabsTTSService`` completes a word only at a space, so that
    without it the last word of a turn takes a wrong time."""

    def __init__(self, tag: dict[str, Any]) -> None:
        self._tag = tag
        self._since = 0.0
        self._opened = False
        """Whether an alignment was sent: the first normalized one opens with a space."""

    def audio(self, data: bytes, run: CharacterTimes | None, heard_s: float) -> list[str]:
        if run is None:
            return [audio_message(self._tag, data, None)] if data else []
        return [self._message(data, run.stream_input(self._since), run.ends[-1])]

    def end(self, tail: bytes, run: CharacterTimes | None, heard_s: float, drained_s: float) -> list[str]:
        alignment = run.stream_input(self._since) if run is not None else NO_CHARACTERS
        space_s = run.ends[-1] if run is not None else self._since  # where the piece's last character ends
        closed = followed_by_space(alignment, space_s - self._since, heard_s + drained_s - space_s)
        return [self._message(tail, closed, heard_s + drained_s)]

    def _message(self, data: bytes, alignment: dict[str, Any], since_s: float) -> str:
        """The message of ``data`` with ``alignment``, after which the next one counts from ``since_s``."""
        normalized = alignment if self._opened else _opened_by_space(alignment)
        self._since, self._opened = since_s, True
        return audio_message(self._tag, data, alignment, normalized)


NO_CHARACTERS: dict[str, Any] = {"chars": [], "charStartTimesMs": [], "charDurationsMs": []}
"""An alignment (``{chars, charStartTimesMs, charDurationsMs}``) of no characters."""


def followed_by_space(alignment: dict[str, Any], start_s: float, duration_s: float) -> dict[str, Any]:
    """``alignment`` with a space after its characters, from ``start_s`` for ``duration_s``: how ElevenLabs' sockets
    end the alignment of every generation, which Pipecat needs to complete the last word."""
    return {
        "chars": [*alignment["chars"], " "],
        "charStartTimesMs": [*alignment["charStartTimesMs"], max(0, round(start_s * 1000))],
        "charDurationsMs": [*alignment["charDurationsMs"], max(0, round(duration_s * 1000))],
    }


def _opened_by_space(alignment: dict[str, Any]) -> dict[str, Any]:
    """``alignment`` after a space that lasts until its first character starts."""
    first_ms = alignment["charStartTimesMs"][0]
    return {
        "chars": [" ", *alignment["chars"]],
        "charStartTimesMs": [0, *alignment["charStartTimesMs"]],
        "charDurationsMs": [first_ms, *alignment["charDurationsMs"]],
    }


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
    tag: dict[str, Any], audio: bytes, alignment: dict[str, Any] | None, normalized: dict[str, Any] | None = None
) -> str:
    """``AudioOutputMulti`` (``AudioOutput`` without ``tag``): the audio, and the alignment (``{chars,
    charStartTimesMs, charDurationsMs}``) of the characters that became known with it; ``normalized``: the
    ``normalizedAlignment``, if not the same."""
    return json.dumps(
        {
            "audio": base64.b64encode(audio).decode(),
            "isFinal": None,
            **tag,
            "alignment": alignment,
            "normalizedAlignment": alignment if normalized is None else normalized,
        }
    )
