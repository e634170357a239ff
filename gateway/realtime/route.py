"""``GET /v1/audio/speech/stream``: the realtime WebSocket — authentication, limits, then a session."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any

from litestar import WebSocket, websocket
from litestar.exceptions import WebSocketDisconnect

from auth.errors import AuthBackendError, InvalidCredentialsError, UnknownTenantError
from auth.limits import LimitsUnavailableError, RateLimitExceededError
from gateway.http.client_address import address_key
from gateway.http.errors import SERVER_ERROR, OpenAIError, as_openai_error
from gateway.observability.refusals import counted
from gateway.realtime.protocol import ProtocolError, SessionUpdate, error_event, parse_client_event
from gateway.realtime.session import (
    RealtimeSession,
    SessionDrainedError,
    SessionIdleError,
    SessionRevokedError,
    SlowClientError,
)
from gateway.state import gateway_state

if TYPE_CHECKING:
    from auth import Principal
    from auth.limits import HeldConnections
    from gateway.settings import RealtimeSettings
    from gateway.speech.service import SpeechService

__all__ = ["realtime_speech"]

logger = logging.getLogger("tts_gateway.realtime")

PATH = "/v1/audio/speech/stream"
_NORMAL_CLOSURE = 1000  # the session ended idle
_POLICY_VIOLATION = 1008  # bad or revoked credentials; a client too slow to take its audio
_SERVICE_RESTART = 1012  # the server is shutting down: reconnect (to another replica)
_TRY_AGAIN_LATER = 1013  # over a tenant limit, or the gateway cannot admit sessions now
_AUTH_ERRORS = (InvalidCredentialsError, UnknownTenantError)


class _SessionRefusedError(Exception):
    def __init__(self, error: OpenAIError, close_code: int) -> None:
        super().__init__(error.message)
        self.error = error
        self.close_code = close_code


@websocket(PATH, name="realtime_speech")
async def realtime_speech(socket: WebSocket[Any, Any, Any]) -> None:
    """Speech as text arrives: the protocol is in ``docs/realtime.md``."""
    state = gateway_state(socket.app)
    speech = state.speech
    settings = state.settings.realtime
    send_timeout_s = state.settings.server.send_timeout_s  # one timeout for every slow reader
    await socket.accept()
    started = time.perf_counter()
    log: dict[str, Any] = {"session_id": f"sess_{uuid.uuid4().hex[:20]}", "path": PATH, "tenant": None}
    session: RealtimeSession | None = None
    speech.metrics.realtime_connections.inc()
    try:
        async with AsyncExitStack() as held:
            principal, first = await _authenticate(socket, speech, settings)
            log["tenant"] = principal.tenant.name
            await _admit(speech, principal, held, state.held)
            session = RealtimeSession(
                socket,
                speech,
                principal,
                settings=settings,
                session_id=log["session_id"],
                send_timeout_s=send_timeout_s,
                max_json_depth=state.settings.server.max_json_depth,
            )
            with state.sessions.registered(session, principal):
                await session.run(first)
        log["outcome"] = "closed"
    except SessionRevokedError as revoked:
        log["outcome"] = f"revoked: {revoked.error.code}"
        await _close(socket, _POLICY_VIOLATION, revoked.error)
    except SessionDrainedError:
        log["outcome"] = "drained for shutdown"
        await _close(socket, _SERVICE_RESTART, None, reason="server shutting down; reconnect")
    except _SessionRefusedError as refused:
        log["outcome"] = f"refused: {refused.error.code}"
        await _close(socket, refused.close_code, refused.error)
    except SlowClientError:
        log["outcome"] = "client too slow"
        await _close(
            socket, _POLICY_VIOLATION, OpenAIError(400, "The client read audio too slowly.", code="client_too_slow")
        )
    except SessionIdleError:
        log["outcome"] = "idle timeout"
        idle = OpenAIError(
            408,
            f"The session was idle for {settings.idle_timeout_s:g} s and has been closed.",
            code="session_idle_timeout",
        )
        await _close(socket, _NORMAL_CLOSURE, idle)
    except WebSocketDisconnect:
        log["outcome"] = "client left"  # leaving the block above cancelled its speech and released its lease
    finally:
        speech.metrics.realtime_connections.dec()
        log["duration_ms"] = round((time.perf_counter() - started) * 1000, 2)
        if session is not None:
            log.update(segments=session.segments_spoken, audio_seconds=round(session.audio_seconds, 3))
        logger.info("realtime session", extra={"record": log})  # one line per session, like the access log


async def _authenticate(
    socket: WebSocket[Any, Any, Any],
    speech: SpeechService,
    settings: RealtimeSettings,
) -> tuple[Principal, SessionUpdate | None]:
    """The caller, from the Authorization header, a ``?token=`` or else a token in the first message; each through
    the address's credential throttle (``gateway/http/auth/credential_throttle.py``).

    Returns:
        The principal, and the first message when it was read for its token (to be handled as a session.update).
    """
    header = socket.headers.get("authorization")
    if header is None and (token := socket.query_params.get("token")):
        header = f"Bearer {token}"
    try:
        return await _authenticated(socket, header), None  # without a header: anyone, when the gateway runs open
    except _SessionRefusedError:
        if header is not None:
            raise
    first = await _first_message_within_cap(socket, settings)  # a browser cannot set a header: it comes in a message
    return await _authenticated(socket, f"Bearer {first.token}"), first.model_copy(update={"token": None})


async def _authenticated(socket: WebSocket[Any, Any, Any], authorization: str | None) -> Principal:
    state = gateway_state(socket.app)
    client = socket.client.host if socket.client else None
    try:
        return await state.credential_throttle.authenticate(client, authorization, state.authenticator.authenticate)
    except _AUTH_ERRORS as exc:
        raise _SessionRefusedError(as_openai_error(exc), _POLICY_VIOLATION) from None
    except AuthBackendError as exc:
        raise _SessionRefusedError(as_openai_error(exc), _TRY_AGAIN_LATER) from None
    except OpenAIError as throttled:  # the address is throttled for refused credentials: 429
        raise _SessionRefusedError(throttled, _TRY_AGAIN_LATER) from None


async def _first_message_within_cap(socket: WebSocket[Any, Any, Any], settings: RealtimeSettings) -> SessionUpdate:
    """The first message, if fewer than ``max_unauthenticated`` sockets wait for theirs, and fewer than
    ``max_unauthenticated_per_address`` from this socket's address (else refused at once)."""
    waiting = gateway_state(socket.app).awaiting_credentials
    address = address_key(socket.client.host if socket.client else "unknown")
    if waiting.total() >= settings.max_unauthenticated or waiting[address] >= settings.max_unauthenticated_per_address:
        busy = OpenAIError(
            503,
            "Too many connections are waiting to authenticate: send the credentials in the Authorization header, "
            "or retry soon.",
            type=SERVER_ERROR,
            code="too_many_connections",
        )
        raise _SessionRefusedError(counted("connection", busy), _TRY_AGAIN_LATER)
    waiting[address] += 1
    try:
        return await _first_message(socket, settings.auth_timeout_s)
    finally:
        waiting[address] -= 1
        if waiting[address] <= 0:
            del waiting[address]


async def _first_message(socket: WebSocket[Any, Any, Any], timeout_s: float) -> SessionUpdate:
    missing = OpenAIError(
        401,
        "No credentials: send an Authorization header, a ?token= query parameter, or a "
        "session.update with a 'token' as the first message.",
        code="invalid_api_key",
    )
    try:
        async with asyncio.timeout(timeout_s):
            message = await socket.receive()
    except TimeoutError:
        raise _SessionRefusedError(missing, _POLICY_VIOLATION) from None
    if message["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(detail="client disconnected")
    try:
        text = message.get("text")
        event = parse_client_event(text if isinstance(text, str) else "")
    except ProtocolError:
        raise _SessionRefusedError(missing, _POLICY_VIOLATION) from None
    if not isinstance(event, SessionUpdate) or not event.token:
        raise _SessionRefusedError(missing, _POLICY_VIOLATION)
    return event


async def _admit(speech: SpeechService, principal: Principal, held: AsyncExitStack, holdings: HeldConnections) -> None:
    """A session holds one of the tenant's open sessions (across replicas) and its place among what the tenant holds
    of this replica (refused over its fair share of a crowded one), counts as one request and holds one of its
    concurrent streams while it is open."""
    try:
        held.callback(holdings.take(principal.tenant.name, "sessions"))
        await speech.open_session(principal.tenant, held)
    except (RateLimitExceededError, LimitsUnavailableError) as exc:
        raise _SessionRefusedError(as_openai_error(exc), _TRY_AGAIN_LATER) from None


async def _close(socket: WebSocket[Any, Any, Any], code: int, error: OpenAIError | None, reason: str = "") -> None:
    """Say why in an error event (unless the session said so already), then close; a client gone (or not reading)
    by now just misses it."""
    try:
        async with asyncio.timeout(1.0):
            if error is not None:
                await socket.send_text(error_event(error))
                reason = error.message
            await socket.close(code, reason[:120])  # a close reason is at most 123 bytes
    except (TimeoutError, WebSocketDisconnect, OSError):
        pass
