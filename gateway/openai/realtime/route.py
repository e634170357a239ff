"""``GET /v1/realtime?model=…``: OpenAI's Realtime API as a speech endpoint — credentials at the handshake, limits,
then a session (``docs/realtime.md``).

The official SDKs open it with ``OpenAI(websocket_base_url=…).realtime.connect(model=…)`` and send ``Authorization:
Bearer``; browsers, which cannot set headers, offer the subprotocols ``realtime`` and
``openai-insecure-api-key.<key>``. Every refusal comes before the handshake is accepted, as an HTTP status with
OpenAI's error body: no socket ever waits unauthenticated here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from litestar import WebSocket, websocket

from gateway.http.socket_errors import said
from gateway.openai.realtime import events
from gateway.openai.realtime.session import OpenAIRealtimeSession
from gateway.sessions.kernel import serve
from gateway.sessions.serving import authenticated

__all__ = ["DEFAULT_MODEL", "PATH", "openai_realtime"]

if TYPE_CHECKING:
    from collections.abc import Sequence

    from auth import Principal
    from gateway.sessions.dialect import Opened, Said
    from gateway.settings import RealtimeSettings

PATH = "/v1/realtime"
DEFAULT_MODEL = "gpt-realtime"
"""The model of a connection whose URL names none (OpenAI's SDKs always name one)."""
_SUBPROTOCOL = "realtime"
_KEY_SUBPROTOCOL = "openai-insecure-api-key."


@websocket(PATH, name="openai_realtime")
async def openai_realtime(socket: WebSocket[Any, Any, Any]) -> None:
    """OpenAI's Realtime API, text in and speech out: the events are in ``docs/realtime.md``."""
    await serve(socket, _OpenAIRealtimeSocket(socket))


class _OpenAIRealtimeSocket:
    """OpenAI's Realtime dialect, as the kernel serves it (``gateway/sessions/dialect.py``): credentials at the
    handshake, the model in the URL."""

    path = PATH

    def __init__(self, socket: WebSocket[Any, Any, Any]) -> None:
        self._offered: Sequence[str] = socket.scope.get("subprotocols") or ()
        self._model = socket.query_params.get("model") or DEFAULT_MODEL

    def say(self, failure: BaseException) -> Said:
        return said(failure, events.error_event)  # the OpenAI family's table

    async def caller(self, socket: WebSocket[Any, Any, Any], settings: RealtimeSettings) -> Principal:
        return await authenticated(socket, _authorization(socket, self._offered))

    def settings(self, tenant_settings: RealtimeSettings) -> RealtimeSettings:
        return tenant_settings

    def build(self, opened: Opened) -> OpenAIRealtimeSession:
        return OpenAIRealtimeSession(opened, model=self._model)

    def subprotocol(self) -> str | None:
        return _SUBPROTOCOL if _SUBPROTOCOL in self._offered else None


def _authorization(socket: WebSocket[Any, Any, Any], offered: Sequence[str]) -> str | None:
    """The ``Authorization`` header, else the key a browser offers as the subprotocol
    ``openai-insecure-api-key.<key>``."""
    if (header := socket.headers.get("authorization")) is not None:
        return header
    for protocol in offered:
        if protocol.startswith(_KEY_SUBPROTOCOL) and (key := protocol.removeprefix(_KEY_SUBPROTOCOL)):
            return f"Bearer {key}"
    return None
