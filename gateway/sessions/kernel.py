"""Serving one speech WebSocket, the same for every dialect: serving (the session's end as a close code, its log
line), the caller's credentials, the tenant's settings, build, check, admit, accept, register, run.

A dialect's route is one line: ``await serve(socket, TheDialect(...))`` (``dialect.py`` says what it fills in).
"""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any

from litestar.exceptions import WebSocketDisconnect

from gateway.sessions.dialect import Opened
from gateway.sessions.lanes import Speaker
from gateway.sessions.serving import (
    POLICY_VIOLATION,
    SessionRefusedError,
    admit_session,
    serving,
    socket_budget,
    tenant_realtime,
)
from gateway.sessions.session_errors import SessionError
from gateway.speech.errors import SpeechError
from gateway.state import gateway_state

if TYPE_CHECKING:
    from litestar import WebSocket
    from litestar.types import ReceiveMessage

    from gateway.sessions.dialect import SocketDialect

__all__ = ["first_message", "serve"]


async def serve(socket: WebSocket[Any, Any, Any], dialect: SocketDialect) -> None:
    """Serve ``socket`` in ``dialect`` from the handshake until the session ends; every refusal and end is said in
    the dialect's words (an HTTP answer before the handshake is accepted), then logged in one line."""
    state = gateway_state(socket.app)
    async with serving(socket, dialect.path, dialect.say) as log, AsyncExitStack() as held:
        principal = await dialect.caller(socket, state.settings.realtime)
        log.tenant = principal.tenant.name
        log.realtime = dialect.settings(tenant_realtime(state.settings.realtime, principal.tenant))
        opened = Opened(
            socket=socket,
            speaker=Speaker(state.speech, principal),
            settings=log.realtime,
            session_id=log.session_id,
            send_timeout_s=state.settings.server.send_timeout_s,
            max_json_depth=state.settings.server.max_json_depth,
            budget=socket_budget(socket, log),
        )
        log.session = session = dialect.build(opened)
        try:
            await session.check()
        except (SpeechError, SessionError) as exc:
            raise SessionRefusedError(exc, POLICY_VIOLATION) from None
        await admit_session(socket, principal, held)
        if socket.connection_state == "init":
            await socket.accept(subprotocols=dialect.subprotocol())
        with state.sessions.registered(session, principal):
            await session.run()


async def first_message(socket: WebSocket[Any, Any, Any], timeout_s: float) -> ReceiveMessage | None:
    """The client's next message, read before the session runs (for its credentials, or the dialect it chooses), if
    it comes within ``timeout_s``; ``None`` if none did.

    Raises:
        WebSocketDisconnect: the client left.
    """
    try:
        async with asyncio.timeout(timeout_s):
            message = await socket.receive()
    except TimeoutError:
        return None
    if message["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(detail="client disconnected")
    return message
