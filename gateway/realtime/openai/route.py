"""``GET /v1/realtime?model=…``: OpenAI's Realtime API as a speech endpoint — credentials at the handshake, limits,
then a session (``docs/realtime.md``).

The official SDKs open it with ``OpenAI(websocket_base_url=…).realtime.connect(model=…)`` and send ``Authorization:
Bearer``; browsers, which cannot set headers, offer the subprotocols ``realtime`` and
``openai-insecure-api-key.<key>``. Every refusal comes before the handshake is accepted, as an HTTP status with
OpenAI's error body: no socket ever waits unauthenticated here.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any

from litestar import WebSocket, websocket

from gateway.http.errors import OpenAIError
from gateway.realtime.errors import socket_error
from gateway.realtime.openai import events
from gateway.realtime.openai.session import OpenAIRealtimeSession
from gateway.realtime.serving import (
    POLICY_VIOLATION,
    SessionRefusedError,
    admit_session,
    authenticated,
    serving,
    socket_budget,
    tenant_realtime,
)
from gateway.speech.errors import SpeechError
from gateway.state import gateway_state

__all__ = ["DEFAULT_MODEL", "PATH", "openai_realtime"]

if TYPE_CHECKING:
    from collections.abc import Sequence

PATH = "/v1/realtime"
DEFAULT_MODEL = "gpt-realtime"
"""The model of a connection whose URL names none (OpenAI's SDKs always name one)."""
_SUBPROTOCOL = "realtime"
_KEY_SUBPROTOCOL = "openai-insecure-api-key."


@websocket(PATH, name="openai_realtime")
async def openai_realtime(socket: WebSocket[Any, Any, Any]) -> None:
    """OpenAI's Realtime API, text in and speech out: the events are in ``docs/realtime.md``."""
    state = gateway_state(socket.app)
    offered: Sequence[str] = socket.scope.get("subprotocols") or ()
    async with serving(socket, PATH, events.error_event) as log, AsyncExitStack() as held:
        principal = await authenticated(socket, _authorization(socket, offered))
        log.tenant = principal.tenant.name
        log.realtime = tenant_realtime(state.settings.realtime, principal.tenant)  # the tenant's idle timeout
        log.session = session = OpenAIRealtimeSession(
            socket,
            state.speech,
            principal,
            model=socket.query_params.get("model") or DEFAULT_MODEL,
            settings=log.realtime,
            send_timeout_s=state.settings.server.send_timeout_s,
            session_id=log.session_id,
            max_json_depth=state.settings.server.max_json_depth,
            budget=socket_budget(socket, log),
        )
        try:
            await session.check_model()
        except (OpenAIError, SpeechError) as exc:
            raise SessionRefusedError(socket_error(exc), POLICY_VIOLATION) from None
        await admit_session(socket, principal, held)
        await socket.accept(subprotocols=_SUBPROTOCOL if _SUBPROTOCOL in offered else None)
        with state.sessions.registered(session, principal):
            await session.run()


def _authorization(socket: WebSocket[Any, Any, Any], offered: Sequence[str]) -> str | None:
    """The ``Authorization`` header, else the key a browser offers as the subprotocol
    ``openai-insecure-api-key.<key>``."""
    if (header := socket.headers.get("authorization")) is not None:
        return header
    for protocol in offered:
        if protocol.startswith(_KEY_SUBPROTOCOL) and (key := protocol.removeprefix(_KEY_SUBPROTOCOL)):
            return f"Bearer {key}"
    return None
