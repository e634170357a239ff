"""``GET /v1/audio/speech/stream``: the realtime WebSocket, served by the session kernel (``gateway/sessions/``):
how its credentials arrive, and the dialect its first message chooses."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from litestar import WebSocket, websocket

from gateway.http.socket_errors import said
from gateway.native.dialect import NativeDialect
from gateway.native.protocol import parse_client_event
from gateway.realtime.choice import SpokenDialect
from gateway.sessions.kernel import first_message, serve
from gateway.sessions.serving import POLICY_VIOLATION, SessionRefusedError, authenticated, awaiting_credentials
from gateway.sessions.session_errors import SessionError
from gateway.sessions.stream_events import ProtocolError, SessionUpdate
from gateway.sessions.text_stream import RealtimeSession
from gateway.state import gateway_state

if TYPE_CHECKING:
    from litestar.types import ReceiveMessage

    from auth import Principal
    from gateway.sessions.dialect import Opened, Said
    from gateway.settings import RealtimeSettings

__all__ = ["realtime_speech"]

PATH = "/v1/audio/speech/stream"


@websocket(PATH, name="realtime_speech")
async def realtime_speech(socket: WebSocket[Any, Any, Any]) -> None:
    """Speech as text arrives, in this gateway's protocol or vLLM-Omni's (``docs/realtime.md``)."""
    await serve(socket, _RealtimeSocket(gateway_state(socket.app).settings.speech.max_whole_audio_s))


class _RealtimeSocket:
    """This gateway's dialect and vLLM-Omni's, as the kernel serves them (``gateway/sessions/dialect.py``): the
    socket is accepted first, so that credentials can come in the first message, which also chooses the dialect."""

    path = PATH

    def __init__(self, max_whole_audio_s: float) -> None:
        """``max_whole_audio_s``: ``speech.max_whole_audio_s``, which bounds vLLM-Omni's sentences sent as one file."""
        self._spoken = SpokenDialect(max_whole_audio_s=max_whole_audio_s)
        self._first: SessionUpdate | None = None
        self._opening: ReceiveMessage | None = None

    def say(self, failure: BaseException) -> Said:
        """In the OpenAI family's words (both dialects' table), the event in the dialect the socket speaks."""
        return said(failure, self._spoken.error_event)

    async def caller(self, socket: WebSocket[Any, Any, Any], settings: RealtimeSettings) -> Principal:
        await socket.accept()
        principal, self._first, self._opening = await _authenticate(socket, settings, self._spoken)
        return principal

    def settings(self, tenant_settings: RealtimeSettings) -> RealtimeSettings:
        return tenant_settings

    def build(self, opened: Opened) -> RealtimeSession:
        return RealtimeSession(opened, spoken=self._spoken, first=self._first, opening=self._opening)

    def subprotocol(self) -> str | None:
        return None


async def _authenticate(
    socket: WebSocket[Any, Any, Any], settings: RealtimeSettings, spoken: SpokenDialect
) -> tuple[Principal, SessionUpdate | None, ReceiveMessage | None]:
    """The caller, from the Authorization header, a ``?token=`` or else a token in the first message; each through
    the address's credential throttle (``gateway/http/auth/credential_throttle.py``). The first message is read
    first (within ``first_message_wait_s``) when the credentials do not depend on it: it chooses the dialect, in
    which a refusal is then said. vLLM-Omni's carries no credentials, so without a header its client is refused.

    Returns:
        The principal; the first message when it was read for its token (to be handled as a session.update), or
        else when it was read to choose the dialect.
    """
    header = socket.headers.get("authorization")
    if header is None and (token := socket.query_params.get("token")):
        header = f"Bearer {token}"
    wait_s = settings.first_message_wait_s
    if header is None:
        try:
            principal = await authenticated(socket, None)  # anyone, when the gateway runs open
        except SessionRefusedError:
            first = await _first_message_within_cap(socket, settings, spoken)  # a browser cannot set a header
            return await authenticated(socket, f"Bearer {first.token}"), first.model_copy(update={"token": None}), None
        return principal, None, await _opening_message(socket, wait_s, spoken)
    opening = await _opening_message(socket, wait_s, spoken)  # before the check, so a refusal is in its dialect
    return await authenticated(socket, header), None, opening


async def _opening_message(
    socket: WebSocket[Any, Any, Any], wait_s: float, spoken: SpokenDialect
) -> ReceiveMessage | None:
    """The client's first message, if it comes within ``wait_s``: it chooses the dialect.

    Waited for before any greeting because vLLM-Omni's clients speak first and expect none; a client of this
    gateway's protocol that waits for ``session.created`` gets it once the wait is over (a later first message still
    chooses).

    Raises:
        WebSocketDisconnect: the client left.
    """
    message = await first_message(socket, wait_s)
    if message is None:
        return None
    text = message.get("text")
    spoken.choose(text if isinstance(text, str) else None)
    return message


async def _first_message_within_cap(
    socket: WebSocket[Any, Any, Any], settings: RealtimeSettings, spoken: SpokenDialect
) -> SessionUpdate:
    """The first message, if fewer than ``max_unauthenticated`` sockets wait for theirs, and fewer than
    ``max_unauthenticated_per_address`` from this socket's address (else refused at once)."""
    with awaiting_credentials(socket, settings):
        return await _first_message(socket, settings.auth_timeout_s, spoken)


async def _first_message(socket: WebSocket[Any, Any, Any], timeout_s: float, spoken: SpokenDialect) -> SessionUpdate:
    missing = SessionError(
        401,
        "No credentials: send an Authorization header, a ?token= query parameter, or a "
        "session.update with a 'token' as the first message.",
        code="invalid_api_key",
    )
    message = await first_message(socket, timeout_s)
    if message is None:
        raise SessionRefusedError(missing, POLICY_VIOLATION)
    text = message.get("text")
    if not isinstance(spoken.choose(text if isinstance(text, str) else None), NativeDialect):
        raise SessionRefusedError(missing, POLICY_VIOLATION)
    try:
        event = parse_client_event(text if isinstance(text, str) else "")
    except ProtocolError:
        raise SessionRefusedError(missing, POLICY_VIOLATION) from None
    if not isinstance(event, SessionUpdate) or not event.token:
        raise SessionRefusedError(missing, POLICY_VIOLATION)
    return event
