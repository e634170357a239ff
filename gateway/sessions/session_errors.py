"""How a realtime session ends other than by the client closing it: each becomes a close code in
``gateway/sessions/serving.py``."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.http.errors import OpenAIError

__all__ = [
    "SessionDrainedError",
    "SessionIdleError",
    "SessionRevokedError",
    "SlowClientError",
    "SocketBudgetExceededError",
]


class SlowClientError(Exception):
    """The client stopped reading: an event waited ``server.send_timeout_s``, or the segment's unsent audio
    outgrew the engine's ``max_buffered_audio_s``."""


class SessionIdleError(Exception):
    """No client event and nothing to speak for ``realtime.idle_timeout_s``."""


class SessionRevokedError(Exception):
    """The session's key was revoked or its tenant deleted (on any replica)."""

    def __init__(self, error: OpenAIError) -> None:
        super().__init__(error.message)
        self.error = error


class SessionDrainedError(Exception):
    """The server is shutting down: the session finished its segment (or the grace period ran out)."""


class SocketBudgetExceededError(Exception):
    """The client sent more messages or bytes a second than its socket may (``gateway/sessions/budget.py``)."""

    def __init__(self, error: OpenAIError) -> None:
        super().__init__(error.message)
        self.error = error
