"""One JSON object per log line, for the gateway's own loggers and uvicorn's."""

from __future__ import annotations

import json
import logging
from typing import Any

__all__ = ["JsonLogFormatter", "WebSocketFrameRedactor"]


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
    """At debug level the ``websockets`` library logs every frame it sends and receives on uvicorn's error logger
    (``"< %s"`` with the frame, its text included: appended input, a first message's token). The line keeps the
    frame's type and size and loses its content."""

    _FRAME_LINES = frozenset({"< %s", "> %s"})

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg in self._FRAME_LINES and isinstance(record.args, tuple) and record.args:
            frame = record.args[0]
            opcode, data = getattr(frame, "opcode", None), getattr(frame, "data", b"")
            name = getattr(opcode, "name", "frame")
            record.args = (f"{name} [{len(data)} bytes]",)
        return True


_ENCODER = json.JSONEncoder(default=str)  # what ``json.dumps(entry, default=str)`` writes, without a new encoder
