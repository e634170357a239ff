"""The contract of a socket dialect: what the kernel (``kernel.py``) asks of it, and what it gets.

A dialect is a parser and a renderer. Its route hands the kernel a :class:`SocketDialect`: how its credentials arrive,
how a failure is said on its wire (:meth:`SocketDialect.say`: an event or message once the socket is open, an HTTP
answer before the handshake, from the dialect's own error table), and the :class:`DialectSession` it builds, which
parses client messages into what its lanes speak (``lanes.py``) and renders what happens into its own messages.

What reaches the dialect's table is the failure itself, in no dialect's words: a speech domain error
(``gateway/speech/errors.py``), another domain's (auth, limits), or the session's own
(:class:`~gateway.sessions.session_errors.SessionError`, a :class:`ProtocolError` among them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from gateway.sessions.channel import SessionChannel
from gateway.sessions.session_errors import SessionError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from litestar import WebSocket

    from auth import Principal
    from gateway.sessions.budget import SocketBudget
    from gateway.sessions.lanes import Speaker
    from gateway.settings import RealtimeSettings

__all__ = ["DialectSession", "Opened", "ProtocolError", "Said", "SocketDialect"]


class ProtocolError(SessionError):
    """A client message the session refuses (a dialect's parser raises it): a 400; the session goes on.
    ``event_id``: the refused event's, where the client gave it one."""

    def __init__(self, message: str, *, code: str, param: str | None = None, event_id: str | None = None) -> None:
        super().__init__(400, message, code=code, param=param)
        self.event_id = event_id


@dataclass(frozen=True)
class Said:
    """A failure in a dialect's words (:meth:`SocketDialect.say`): what the kernel sends when it ends or refuses the
    session for it."""

    event: str
    """The error event (or message) on the open socket, sent before it closes."""
    reason: str
    """The close frame's reason (cut to fit)."""
    code: str | None
    """The error's code in the dialect's table, for the session's log line."""
    status: int
    """Before the handshake is accepted: the HTTP status of the refusal..."""
    body: dict[str, Any]
    """...its JSON body..."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """...and its headers (``Retry-After``, say)."""
    unexpected: bool = False
    """Whether the table has no words for the failure but an internal error's (a bug: the kernel logs it)."""


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

    def channel(self, busy: Callable[[], bool]) -> SessionChannel:
        """The session's way to its socket (``channel.py``): sends within the send timeout, the client's messages
        paid for in the budget, idle after the settings' ``idle_timeout_s`` without a message while not ``busy``."""
        return SessionChannel(
            self.socket,
            send_timeout_s=self.send_timeout_s,
            idle_timeout_s=self.settings.idle_timeout_s,
            busy=busy,
            budget=self.budget,
        )


class DialectSession(Protocol):
    """One session of a dialect (an :class:`~gateway.sessions.ending.EndedByServer`, so the registry can revoke and
    drain it)."""

    async def check(self) -> None:
        """Before the handshake is accepted: whether the session's settings can be served.

        Raises:
            SpeechError, SessionError: they cannot (the handshake is refused with what the dialect's table makes of
                it, 1008 once accepted).
        """
        ...

    async def run(self) -> None:
        """Serve the session until either side ends it (raising how the server ended it, ``session_errors.py``)."""
        ...

    def log_fields(self) -> dict[str, Any]:
        """What the session did, for its log line."""
        ...

    def revoke(self, error: SessionError) -> None: ...

    def begin_drain(self) -> None: ...

    def stop_draining(self) -> None: ...


class SocketDialect(Protocol):
    """A dialect's route, as the kernel serves it: one instance per socket."""

    path: str
    """The path the session's log line names."""

    def say(self, failure: BaseException) -> Said:
        """The dialect's error table: ``failure`` (a :class:`~gateway.sessions.session_errors.SessionError`, a speech
        domain error, an auth or limits error, or the rare bug) in the dialect's words, as an event on the open socket
        and as a refused handshake's HTTP answer."""
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
