"""The error table of the sockets that speak OpenAI's error object: ours and vLLM-Omni's (``/v1/realtime``) and
OpenAI Realtime's (``/v1/realtime?intent=``...): each renders ``{"message", "type", "param", "code"}`` in its own
event, so the table is the OpenAI family's (:func:`gateway.http.errors.as_openai_error`), the speech domain's errors
included; ElevenLabs' sockets have their own (``gateway/elevenlabs/errors.py``).

A socket sends the error as an ``error`` event (its session goes on) or, when the session ends, before its close code
(``gateway/sessions/serving.py``).
"""

from __future__ import annotations

from gateway.http.errors import OpenAIError, as_openai_error

__all__ = ["socket_error"]


def socket_error(exc: BaseException) -> OpenAIError:
    """The error object a socket of the OpenAI family sends for ``exc`` (a failure that is not an :class:`Exception`
    is answered as an unexpected error)."""
    return as_openai_error(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
