"""ElevenLabs' text-to-speech WebSockets (``docs/elevenlabs.md``): ``/v1/text-to-speech/{voice_id}/multi-stream-input``,
as Pipecat's ``ElevenLabsTTSService`` and LiveKit's ``elevenlabs.TTS`` open it, and the single-context
``…/stream-input``, as the SDK's ``convert_realtime`` does; one serving path, the session's class apart
(``session.py``).

The query says ``model_id``, ``output_format`` (ElevenLabs' names; ``mp3_44100_128`` when absent),
``inactivity_timeout`` (seconds, 1 to 180, 20 when absent), ``auto_mode`` (``true``: text is spoken as it arrives),
``enable_ssml_parsing`` (``true``: each message's SSML read, ``docs/ssml.md``; break tags are honoured either way)
and, for every piece as the REST bodies say them, ``seed`` (0 to 4294967295), ``language_code`` and
``apply_text_normalization`` (a value out of bounds is refused at the handshake, 422); ``sync_alignment`` and
``enable_logging`` are accepted and ignored (every audio message carries the alignment known with it).
Credentials come in ``xi-api-key`` or ``Authorization``, the query's ``authorization``, or else the first message's
``xi-api-key`` (``xi_api_key``) or ``authorization``, as ElevenLabs takes them. A refusal comes before the handshake is
accepted, as an HTTP status with ElevenLabs' error body ``{"detail": {"status", "message"}}``; once it was accepted (to
read credentials from the first message), as an error message and a close: 1008 where retrying does not help (bad
credentials, a spent monthly budget), 1013 where waiting does (a per-minute or concurrency limit, limits unreachable).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from litestar import WebSocket, websocket
from pydantic import ValidationError

from gateway.elevenlabs.errors import as_elevenlabs_error
from gateway.elevenlabs.formats import DEFAULT_OUTPUT_FORMAT, OutputFormat, encoding_of
from gateway.elevenlabs.session import ElevenLabsStreamSession, SingleContextSession
from gateway.elevenlabs.socket_wire import error_message, socket_error
from gateway.elevenlabs.speech import VoiceId
from gateway.elevenlabs.wire import SocketSpeechOptions
from gateway.http.auth.security import presented_authorization
from gateway.http.errors import OpenAIError
from gateway.schemas import MAX_SEED
from gateway.sessions.dialect import Said
from gateway.sessions.kernel import first_message, serve
from gateway.sessions.serving import POLICY_VIOLATION, SessionRefusedError, authenticated, awaiting_credentials

if TYPE_CHECKING:
    from collections.abc import Mapping

    from auth import Principal
    from gateway.sessions.dialect import Opened
    from gateway.settings import RealtimeSettings

__all__ = [
    "DEFAULT_INACTIVITY_TIMEOUT_S",
    "MAX_INACTIVITY_TIMEOUT_S",
    "MULTI_STREAM_PATH",
    "STREAM_INPUT_PATH",
    "multi_stream_input",
    "serve_session",
    "stream_input",
]

MULTI_STREAM_PATH = "/v1/text-to-speech/{voice_id:str}/multi-stream-input"
STREAM_INPUT_PATH = "/v1/text-to-speech/{voice_id:str}/stream-input"
DEFAULT_INACTIVITY_TIMEOUT_S = 20
MAX_INACTIVITY_TIMEOUT_S = 180
_FIRST_MESSAGE_CREDENTIALS = ("xi-api-key", "xi_api_key", "authorization")


@websocket(MULTI_STREAM_PATH, name="elevenlabs_multi_stream_input")
async def multi_stream_input(socket: WebSocket[Any, Any, Any], voice_id: VoiceId) -> None:
    """ElevenLabs' multi-context text-to-speech WebSocket: the messages are in ``docs/elevenlabs.md``."""
    await serve_session(socket, voice_id, ElevenLabsStreamSession, "/v1/text-to-speech/multi-stream-input")


@websocket(STREAM_INPUT_PATH, name="elevenlabs_stream_input")
async def stream_input(socket: WebSocket[Any, Any, Any], voice_id: VoiceId) -> None:
    """ElevenLabs' single-context text-to-speech WebSocket: the messages are in ``docs/elevenlabs.md``."""
    await serve_session(socket, voice_id, SingleContextSession, "/v1/text-to-speech/stream-input")


async def serve_session(
    socket: WebSocket[Any, Any, Any], voice_id: str, session_type: type[ElevenLabsStreamSession], path: str
) -> None:
    """Serve one of ElevenLabs' sockets with a session of ``session_type`` (the dialect), from the handshake on."""
    await serve(socket, _ElevenLabsSocket(socket, voice_id, session_type, path))


class _ElevenLabsSocket:
    """ElevenLabs' sockets, as the kernel serves them (``gateway/sessions/dialect.py``): the URL's options, credentials
    at the handshake or in the first message, ElevenLabs' error body and messages, its own inactivity timeout."""

    def __init__(
        self,
        socket: WebSocket[Any, Any, Any],
        voice_id: str,
        session_type: type[ElevenLabsStreamSession],
        path: str,
    ) -> None:
        self.path = path
        self._headers = socket.headers
        self._query = socket.query_params
        self._voice_id = voice_id
        self._session_type = session_type
        self._first: dict[str, Any] | None = None
        self._inactivity_s = DEFAULT_INACTIVITY_TIMEOUT_S
        self._output_format = OutputFormat(DEFAULT_OUTPUT_FORMAT)
        self._options = SocketSpeechOptions()

    def say(self, failure: BaseException) -> Said:
        """ElevenLabs' error message on the open socket; a refused handshake with its REST routes' status and error
        body."""
        error = socket_error(failure)  # ElevenLabs' table
        answer = as_elevenlabs_error(error, self._headers)
        return Said(
            error_message(error),
            error.message,
            error.code,
            answer.status_code,
            answer.body(),
            error.headers,
            unexpected=error.status_code >= 500 and error.code is None,
        )

    async def caller(self, socket: WebSocket[Any, Any, Any], settings: RealtimeSettings) -> Principal:
        self._output_format, self._inactivity_s = _query(self._query)
        self._options = _speech_options(self._query)
        principal, self._first = await _caller(socket, settings)
        return principal

    def settings(self, tenant_settings: RealtimeSettings) -> RealtimeSettings:
        return tenant_settings.model_copy(update={"idle_timeout_s": float(self._inactivity_s)})

    def build(self, opened: Opened) -> ElevenLabsStreamSession:
        return self._session_type(
            opened,
            voice_id=self._voice_id,
            model_id=self._query.get("model_id") or None,
            encoding=encoding_of(self._output_format),
            ssml=self._query.get("enable_ssml_parsing", "").lower() == "true",
            auto_mode=self._query.get("auto_mode") == "true",
            options=self._options,
            first=self._first,
        )

    def subprotocol(self) -> str | None:
        return None


async def _caller(
    socket: WebSocket[Any, Any, Any], settings: RealtimeSettings
) -> tuple[Principal, dict[str, Any] | None]:
    """The caller, by the credentials of the handshake (headers, or the query's ``authorization``), or else of the
    first message (the socket is accepted to read it, within ``auth_timeout_s``); each through the address's credential
    throttle. A gateway that runs open takes a socket without any.

    Returns:
        The principal; the first message, without its credentials, when it was read for them.

    Raises:
        SessionRefusedError: no credentials, or bad ones (1008, or 401 before the handshake is accepted).
    """
    authorization = presented_authorization(socket.headers) or _bearer(socket.query_params.get("authorization"))
    if authorization is not None:
        return await authenticated(socket, authorization), None
    try:
        return await authenticated(socket, None), None  # anyone, when the gateway runs open
    except SessionRefusedError:
        await socket.accept()
        with awaiting_credentials(socket, settings):
            first = await _first_message(socket, settings.auth_timeout_s)
    credentials = [first.pop(name, None) for name in _FIRST_MESSAGE_CREDENTIALS]
    presented = next((_bearer(value) for value in credentials if isinstance(value, str) and value.strip()), None)
    if presented is None:
        raise SessionRefusedError(_missing_credentials(), POLICY_VIOLATION)
    return await authenticated(socket, presented), first


async def _first_message(socket: WebSocket[Any, Any, Any], timeout_s: float) -> dict[str, Any]:
    """The client's first message, a JSON object.

    Raises:
        SessionRefusedError: none within ``timeout_s``, or not a JSON object (1008).
        WebSocketDisconnect: the client left.
    """
    message = await first_message(socket, timeout_s)
    if message is None:
        raise SessionRefusedError(_missing_credentials(), POLICY_VIOLATION)
    text = message.get("text")
    try:
        parsed = json.loads(text) if isinstance(text, str) else None
    except (ValueError, RecursionError):
        parsed = None
    if not isinstance(parsed, dict):
        raise SessionRefusedError(_missing_credentials(), POLICY_VIOLATION)
    return parsed


def _missing_credentials() -> OpenAIError:
    return OpenAIError(
        401,
        "No credentials: send the xi-api-key header, or 'xi-api-key' in the first message.",
        code="needs_authorization",
    )


def _bearer(credential: str | None) -> str | None:
    """A credential as an ``Authorization`` value: as given when it names its scheme, else a bearer token."""
    if credential is None or not credential.strip():
        return None
    credential = credential.strip()
    return credential if credential.lower().startswith("bearer ") else f"Bearer {credential}"


def _query(query: Mapping[str, str]) -> tuple[OutputFormat, int]:
    """The ``output_format`` and ``inactivity_timeout`` of the URL.

    Raises:
        SessionRefusedError: either is not one ElevenLabs takes (422).
    """
    try:
        output_format = OutputFormat(query.get("output_format") or DEFAULT_OUTPUT_FORMAT)
    except ValueError:
        names = ", ".join(f.value for f in OutputFormat)
        raise _refused(f"output_format must be one of: {names}.", "invalid_output_format") from None
    raw = query.get("inactivity_timeout")
    try:
        inactivity_s = DEFAULT_INACTIVITY_TIMEOUT_S if raw in {None, ""} else int(str(raw))
    except ValueError:
        inactivity_s = 0
    if not 1 <= inactivity_s <= MAX_INACTIVITY_TIMEOUT_S:
        message = f"inactivity_timeout must be a whole number of seconds from 1 to {MAX_INACTIVITY_TIMEOUT_S}."
        raise _refused(message, "invalid_inactivity_timeout")
    return output_format, inactivity_s


def _speech_options(query: Mapping[str, str]) -> SocketSpeechOptions:
    """The URL's ``seed``, ``language_code`` and ``apply_text_normalization``, within ElevenLabs' bounds.

    Raises:
        SessionRefusedError: a value out of them (422), named.
    """
    options = {name: query.get(name) or None for name in ("seed", "language_code", "apply_text_normalization")}
    seed = options["seed"]
    # Digits only: int() would also take "+4", " 4" and "4_000".
    if seed is not None and not (seed.isascii() and seed.isdigit() and len(seed) <= len(str(MAX_SEED))):
        raise _refused(f"seed must be a whole number from 0 to {MAX_SEED}.", "invalid_seed")
    try:
        return SocketSpeechOptions.model_validate(options)
    except ValidationError as invalid:
        name = str(invalid.errors()[0]["loc"][0])
        raise _refused(_INVALID_OPTIONS[name], f"invalid_{name}") from None


_INVALID_OPTIONS = {
    "seed": f"seed must be a whole number from 0 to {MAX_SEED}.",
    "language_code": "language_code must be a language code such as en, de or pt-BR.",
    "apply_text_normalization": "apply_text_normalization must be auto, on or off.",
}


def _refused(message: str, code: str) -> SessionRefusedError:
    return SessionRefusedError(OpenAIError(422, message, code=code), POLICY_VIOLATION)
