"""The session's own failures, in no dialect's words: how a session ends other than by the client closing it (each a
close code in ``gateway/sessions/serving.py``), and :class:`SessionError`, what the kernel refuses itself.

What flows through the kernel is the failure itself: a :class:`SessionError`, a speech domain error
(``gateway/speech/errors.py``) or another domain's (auth, limits). Each dialect's table says it on its wire
(:meth:`~gateway.sessions.dialect.SocketDialect.say`)::

    SessionError                  status_code, message, code, param: the kernel's own refusals
    └── ProtocolError             a client message refused (``dialect.py``): 400, the session goes on
    SlowClientError, SessionIdleError, SessionDrainedError
    SessionRevokedError           error: the key revoked (401 ``api_key_revoked``) or the tenant deleted
    SocketBudgetExceededError     error: over the socket's budget (429 ``rate_limit_exceeded``)
"""

from __future__ import annotations

__all__ = [
    "SessionDrainedError",
    "SessionError",
    "SessionIdleError",
    "SessionRevokedError",
    "SlowClientError",
    "SocketBudgetExceededError",
]


class SessionError(Exception):
    """Something the session itself refuses (a message it cannot parse, a socket over its budget, a key revoked, a
    client too slow or idle, a server shutting down), in neutral terms that each dialect's table renders:
    ``status_code`` is the HTTP status the gateway gives it on every API family (a refused handshake's answer),
    ``code`` names it for machines, ``param`` the field it is about (if one is)."""

    def __init__(self, status_code: int, message: str, *, code: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.code = code
        self.param = param


class SlowClientError(Exception):
    """The client stopped reading: an event waited ``server.send_timeout_s``, or the segment's unsent audio
    outgrew the engine's ``max_buffered_audio_s``."""


class SessionIdleError(Exception):
    """No client event and nothing to speak for ``realtime.idle_timeout_s``."""


class SessionRevokedError(Exception):
    """The session's key was revoked or its tenant deleted (on any replica)."""

    def __init__(self, error: SessionError) -> None:
        super().__init__(error.message)
        self.error = error


class SessionDrainedError(Exception):
    """The server is shutting down: the session finished its segment (or the grace period ran out)."""


class SocketBudgetExceededError(Exception):
    """The client sent more messages or bytes a second than its socket may (``gateway/sessions/budget.py``)."""

    def __init__(self, error: SessionError) -> None:
        super().__init__(error.message)
        self.error = error
