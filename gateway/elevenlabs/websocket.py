"""``/v1/text-to-speech/{voice_id}/multi-stream-input``: ElevenLabs' text-to-speech WebSocket, as Pipecat's
``ElevenLabsTTSService`` opens it (``docs/elevenlabs.md``; the session is ``session.py``).

The query says ``model_id``, ``output_format`` (ElevenLabs' names; ``mp3_44100_128`` when absent),
``inactivity_timeout`` (seconds, 1 to 180, 20 when absent) and ``enable_ssml_parsing`` (``true``: each message's SSML
read, ``docs/ssml.md``; break tags are honoured either way); ``auto_mode``, ``sync_alignment``, ``enable_logging``,
``apply_text_normalization`` and ``language_code`` are accepted and ignored (text is always spoken sentence by sentence
as it completes, and every audio message carries its alignment). Credentials come in
``xi-api-key`` or ``Authorization``. Every refusal comes before the handshake is accepted, as an HTTP status with
ElevenLabs' error body ``{"detail": {"status", "message"}}``.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any

from litestar import WebSocket, websocket

from gateway.elevenlabs.errors import as_elevenlabs_error
from gateway.elevenlabs.formats import DEFAULT_OUTPUT_FORMAT, OutputFormat, encoding_of
from gateway.elevenlabs.session import ElevenLabsStreamSession, error_message
from gateway.elevenlabs.speech import VoiceId
from gateway.http.auth.security import presented_authorization
from gateway.http.errors import OpenAIError
from gateway.realtime.serving import (
    POLICY_VIOLATION,
    SessionRefusedError,
    admit_session,
    authenticated,
    serving,
    tenant_realtime,
)
from gateway.state import gateway_state

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["DEFAULT_INACTIVITY_TIMEOUT_S", "MAX_INACTIVITY_TIMEOUT_S", "MULTI_STREAM_PATH", "multi_stream_input"]

MULTI_STREAM_PATH = "/v1/text-to-speech/{voice_id:str}/multi-stream-input"
DEFAULT_INACTIVITY_TIMEOUT_S = 20
MAX_INACTIVITY_TIMEOUT_S = 180


@websocket(MULTI_STREAM_PATH, name="elevenlabs_multi_stream_input")
async def multi_stream_input(socket: WebSocket[Any, Any, Any], voice_id: VoiceId) -> None:
    """ElevenLabs' multi-context text-to-speech WebSocket: the messages are in ``docs/elevenlabs.md``."""
    state = gateway_state(socket.app)
    headers = socket.headers

    def refusal(error: OpenAIError) -> tuple[int, dict[str, Any]]:
        answer = as_elevenlabs_error(error, headers)
        return answer.status_code, answer.body()

    path = "/v1/text-to-speech/multi-stream-input"
    async with serving(socket, path, error_message, refusal) as log, AsyncExitStack() as held:
        output_format, inactivity_s = _query(socket.query_params)
        principal = await authenticated(socket, presented_authorization(headers))
        log.tenant = principal.tenant.name
        realtime = tenant_realtime(state.settings.realtime, principal.tenant)
        log.realtime = realtime.model_copy(update={"idle_timeout_s": float(inactivity_s)})
        log.session = session = ElevenLabsStreamSession(
            socket,
            state.speech,
            principal,
            voice_id=voice_id,
            model_id=socket.query_params.get("model_id") or None,
            encoding=encoding_of(output_format),
            settings=log.realtime,
            send_timeout_s=state.settings.server.send_timeout_s,
            session_id=log.session_id,
            ssml=socket.query_params.get("enable_ssml_parsing", "").lower() == "true",
        )
        try:
            await session.check()
        except OpenAIError as exc:
            raise SessionRefusedError(exc, POLICY_VIOLATION) from None
        await admit_session(socket, principal, held)
        await socket.accept()
        with state.sessions.registered(session, principal):
            await session.run()


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


def _refused(message: str, code: str) -> SessionRefusedError:
    return SessionRefusedError(OpenAIError(422, message, code=code), POLICY_VIOLATION)
