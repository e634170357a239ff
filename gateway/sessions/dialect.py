"""The contract of a socket dialect: what the kernel (``kernel.py``) asks of it, and what it gets.

A dialect is a parser and a renderer. Its route hands the kernel a :class:`SocketDialect`: how its credentials arrive,
how an error is said on its wire (an event or message once the socket is open, an HTTP answer before the handshake),
and the :class:`DialectSession` it builds, which parses client messages into what its lanes speak (``lanes.py``) and
renders what happens into its own messages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from gateway.http.errors import OpenAIError

if TYPE_CHECKING:
    from collections.abc import Callable

    from litestar import WebSocket

    from auth import Principal
    from gateway.sessions.budget import SocketBudget
    from gateway.sessions.lanes import Speaker
    from gateway.settings import RealtimeSettings

__all__ = ["DialectSession", "Opened", "ProtocolError", "SocketDialect"]


class ProtocolError(Exception):
    """A client message the session refuses (a dialect's parser raises it); the session goes on."""

    def __init__(self, message: str, *, code: str, param: str | None = None, event_id: str | None = None) -> None:
        super().__init__(message)
        self.error = OpenAIError(400, message, code=code, param=param)
        self.event_id = event_id


@dataclass(frozen=True)
class Opened:
    """What the kernel gives a dialect's session as it is built: everything but the dialect's own options."""

    socket: WebSocket[Any, Any, Any]
    speaker: Speaker
    """The one way to the speech pipeline."""
    settings: RealtimeSettings
    """The realtime settings as they hold for this tenant's session (:meth:`SocketDialect.settings`)."""
    session_id: str
    send_timeout_s: float
    """``server.send_timeout_s``: one timeout for every slow reader."""
    max_json_depth: int
    """``server.max_json_depth``: deeper messages are refused, as deeper HTTP bodies are."""
    budget: SocketBudget
    """What the client may send a second (``gateway/sessions/budget.py``), every message paid for before parsing."""


class DialectSession(Protocol):
    """One session of a dialect (an :class:`~gateway.sessions.ending.EndedByServer`, so the registry can revoke and
    drain it)."""

    async def check(self) -> None:
        """Before the handshake is accepted: whether the session's settings can be served.

        Raises:
            OpenAIError, SpeechError: they cannot (the handshake is refused with the error the dialect's table makes of
                it, 1008 once accepted).
        """
        ...

    async def run(self) -> None:
        """Serve the session until either side ends it (raising how the server ended it, ``session_errors.py``)."""
        ...

    def log_fields(self) -> dict[str, Any]:
        """What the session did, for its log line."""
        ...

    def revoke(self, error: OpenAIError) -> None: ...

    def begin_drain(self) -> None: ...

    def stop_draining(self) -> None: ...


class SocketDialect(Protocol):
    """A dialect's route, as the kernel serves it: one instance per socket."""

    path: str
    """The path the session's log line names."""

    @property
    def refusal(self) -> Callable[[OpenAIError], tuple[int, dict[str, Any]]] | None:
        """A refused handshake's HTTP status and body; ``None``: OpenAI's error body with the error's status."""
        ...

    def error_event(self, error: OpenAIError) -> str:
        """An error on the open socket, in the dialect's words (before it closes, say)."""
        ...

    def socket_error(self, exc: BaseException) -> OpenAIError:
        """The dialect's error table: the error object its wire carries for ``exc`` (a speech domain error, say:
        ``gateway/speech/errors.py``), which :meth:`error_event` or :attr:`refusal` then renders."""
        ...

    async def caller(self, socket: WebSocket[Any, Any, Any], settings: RealtimeSettings) -> Principal:
        """Who is calling, by the credentials the dialect takes (through ``gateway.sessions.serving.authenticated``); a
        message read for them, or to choose the dialect, is kept for the session.

        Raises:
            SessionRefusedError: no credentials, bad ones, or the URL's options are not the dialect's.
        """
        ...

    def settings(self, tenant_settings: RealtimeSettings) -> RealtimeSettings:
        """The settings the session runs under, from the tenant's (the dialect may set its own idle timeout)."""
        ...

    def build(self, opened: Opened) -> DialectSession:
        """The session, not yet checked nor admitted."""
        ...

    def subprotocol(self) -> str | None:
        """The subprotocol the handshake accepts (``None``: none)."""
        ...
