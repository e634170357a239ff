"""The error table of the sockets that speak OpenAI's error object: ours and vLLM-Omni's
(``/v1/audio/speech/stream``) and OpenAI Realtime's (``/v1/realtime``). Each renders ``{"message", "type", "param",
"code"}`` in its own event, so the table is the OpenAI family's (:func:`gateway.http.errors.as_openai_error`, the
speech domain's errors included), with the session kernel's own faults (``gateway/sessions/session_errors.py``) in
their fields. ElevenLabs' sockets have their own (``gateway/elevenlabs/socket_wire.py``).

The kernel hands a dialect the failure itself; the dialect says it with :func:`said` (when the session ends or is
refused) or :func:`socket_error` (an error event, the session going on).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.http.errors import INVALID_REQUEST, SERVER_ERROR, OpenAIError, as_openai_error, error_body
from gateway.sessions.dialect import Said
from gateway.sessions.session_errors import SessionError

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["fault_error", "said", "socket_error", "unexpected"]


def socket_error(failure: BaseException) -> OpenAIError:
    """The error object a socket of the OpenAI family sends for ``failure`` (one that is not an :class:`Exception`
    is answered as an unexpected error)."""
    if isinstance(failure, SessionError):
        return fault_error(failure)
    return as_openai_error(failure if isinstance(failure, Exception) else RuntimeError(repr(failure)))


def fault_error(fault: SessionError) -> OpenAIError:
    """A session's own fault as OpenAI's error object: a server's fault a ``server_error``, a socket over its
    budget a ``requests`` error (as OpenAI's rate limits are), any other an ``invalid_request_error``."""
    if fault.status_code >= 500:
        kind = SERVER_ERROR
    elif fault.status_code == 429:
        kind = "requests"
    else:
        kind = INVALID_REQUEST
    return OpenAIError(fault.status_code, fault.message, type=kind, param=fault.param, code=fault.code)


def unexpected(failure: BaseException) -> bool:
    """Whether the table has no words for ``failure`` but an internal error's (a bug: its traceback is logged)."""
    error = socket_error(failure)
    return error.status_code >= 500 and error.code is None


def said(failure: BaseException, event: Callable[[OpenAIError], str]) -> Said:
    """``failure`` as a socket of the OpenAI family says it: the dialect's ``event`` on the open socket; before the
    handshake is accepted, OpenAI's error body with the error's status and headers."""
    error = socket_error(failure)
    body = error_body(error.message, error.type, error.param, error.code)
    unexpected = error.status_code >= 500 and error.code is None
    return Said(event(error), error.message, error.code, error.status_code, body, error.headers, unexpected=unexpected)
