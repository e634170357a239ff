"""One JSON object per log line, for the gateway's own loggers and uvicorn's."""

from __future__ import annotations

import contextvars
import json
import logging
from typing import Any

from gateway.observability.tracing import current_trace_id

__all__ = [
    "HANDSHAKE_REFUSAL_LOGGED",
    "UNFINISHED_RESPONSE_LOGGED",
    "JsonLogFormatter",
    "LoggedTruncationFilter",
    "WebSocketFrameRedactor",
]

UNFINISHED_RESPONSE_LOGGED: contextvars.ContextVar[bool] = contextvars.ContextVar("unfinished_logged", default=False)
"""Set (``gateway/http/tracking.py``) in the task of a request the gateway ended short and logged: uvicorn's own line
about the unfinished response, written in the same task afterwards, then says nothing new."""
HANDSHAKE_REFUSAL_LOGGED: contextvars.ContextVar[bool] = contextvars.ContextVar("refusal_logged", default=False)
"""Set (``gateway/sessions/serving.py``) in the task of a WebSocket handshake the gateway refused with an HTTP answer
(a 401, a 429) and logged: uvicorn's websockets-sansio protocol (0.54) never counts such an answer as the handshake's
end, and its error line afterwards, in the same task, says nothing true."""


class JsonLogFormatter(logging.Formatter):
    """One JSON object per line; request records are flattened into it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._stamp = (-1, "")  # the last second formatted, and its text: lines come many to a second

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": self._time(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(getattr(record, "record", {}))
        if "trace_id" not in entry and (trace_id := current_trace_id()) is not None:
            entry["trace_id"] = trace_id  # any line written while a request is served names its trace
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return _ENCODER.encode(entry)

    def _time(self, record: logging.LogRecord) -> str:
        second, text = self._stamp
        if int(record.created) != second:
            text = self.formatTime(record, "%Y-%m-%dT%H:%M:%S")
            self._stamp = (int(record.created), text)
        return text


class WebSocketFrameRedactor(logging.Filter):
    """At debug level the ``websockets`` library logs, on uvicorn's error logger, every frame it sends and receives
    (``"< %s"`` with the frame, its text included: appended input, a first message's token) and every handshake header
    (``"< %s: %s"``: ``Authorization`` and ElevenLabs' ``xi-api-key`` included). Frames keep their type and size and
    lose their content; credential headers lose their value. (The query string's ``?token=`` is
    ``gateway/sessions/redaction.py``'s.)"""

    _FRAME_LINES = frozenset({"< %s", "> %s"})
    _HEADER_LINES = frozenset({"< %s: %s", "> %s: %s"})
    _SECRET_HEADERS = frozenset(
        {"authorization", "proxy-authorization", "cookie", "set-cookie", "sec-websocket-protocol", "xi-api-key"}
    )  # browsers can only send a token as a subprotocol; ElevenLabs' clients send theirs as xi-api-key

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if not isinstance(args, tuple) or not args:
            return True
        if record.msg in self._FRAME_LINES:
            frame = args[0]
            opcode, data = getattr(frame, "opcode", None), getattr(frame, "data", b"")
            if opcode is not None:
                record.args = (f"{getattr(opcode, 'name', opcode)} [{len(data)} bytes]",)
        elif record.msg in self._HEADER_LINES and str(args[0]).lower() in self._SECRET_HEADERS:
            record.args = (args[0], "[redacted]")
        return True


class LoggedTruncationFilter(logging.Filter):
    """Drops uvicorn's "ASGI callable returned without completing response." for a response the gateway ended short
    on purpose and has logged already, with its cause (``gateway/http/tracking.py``), and its "... without completing
    handshake." for a WebSocket handshake the gateway refused with an HTTP answer and has logged (its session line,
    with the status): uvicorn says so at error level for every refused handshake, though the refusal went out whole.
    For any other they stay."""

    _UNFINISHED = "ASGI callable returned without completing response."
    _HANDSHAKE = "ASGI callable returned without completing handshake."

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg == self._UNFINISHED:
            return not UNFINISHED_RESPONSE_LOGGED.get()
        if record.msg == self._HANDSHAKE:
            return not HANDSHAKE_REFUSAL_LOGGED.get()
        return True


_ENCODER = json.JSONEncoder(default=str)  # what ``json.dumps(entry, default=str)`` writes, without a new encoder
