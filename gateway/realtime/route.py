"""``GET /v1/audio/speech/stream``: the realtime WebSocket — authentication, limits, then a session."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any

from litestar import WebSocket, websocket
from litestar.exceptions import WebSocketDisconnect

from gateway.http.errors import OpenAIError
from gateway.realtime.dialect import NativeDialect, SpokenDialect
from gateway.realtime.protocol import ProtocolError, SessionUpdate, parse_client_event
from gateway.realtime.serving import (
    POLICY_VIOLATION,
    SessionRefusedError,
    admit_session,
    authenticated,
    awaiting_credentials,
    serving,
    socket_budget,
    tenant_realtime,
)
from gateway.realtime.session import RealtimeSession
from gateway.state import gateway_state

if TYPE_CHECKING:
    from litestar.types import ReceiveMessage

    from auth import Principal
    from gateway.settings import RealtimeSettings

__all__ = ["realtime_speech"]

PATH = "/v1/audio/speech/stream"


@websocket(PATH, name="realtime_speech")
async def realtime_speech(socket: WebSocket[Any, Any, Any]) -> None:
    """Speech as text arrives, in this gateway's protocol or vLLM-Omni's (``docs/realtime.md``)."""
    state = gateway_state(socket.app)
    settings = state.settings.realtime
    spoken = SpokenDialect()
    await socket.accept()
    async with serving(socket, PATH, spoken.error_event) as log, AsyncExitStack() as held:
        principal, first, opening = await _authenticate(socket, settings, spoken)
        log.tenant = principal.tenant.name
        log.realtime = tenant_realtime(settings, principal.tenant)  # the tenant's idle timeout
        await admit_session(socket, principal, held)
        log.session = session = RealtimeSession(
            socket,
            state.speech,
            principal,
            settings=log.realtime,
            session_id=log.session_id,
            send_timeout_s=state.settings.server.send_timeout_s,  # one timeout for every slow reader
            spoken=spoken,
            max_json_depth=state.settings.server.max_json_depth,
            budget=socket_budget(socket, log),
        )
        with state.sessions.registered(session, principal):
            await session.run(first, opening)


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
    try:
        async with asyncio.timeout(wait_s):
            message = await socket.receive()
    except TimeoutError:
        return None
    if message["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(detail="client disconnected")
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
        raise SessionRefusedError(missing, POLICY_VIOLATION) from None
    if message["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(detail="client disconnected")
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
