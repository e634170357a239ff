"""Keeping the ``?token=`` credential of browser WebSocket clients out of uvicorn's connection log lines."""

from __future__ import annotations

import logging
import re

__all__ = ["QueryTokenRedactor"]

_TOKEN_IN_QUERY = re.compile(r"(?<=[?&]token=)[^&\s\"]+")


class QueryTokenRedactor(logging.Filter):
    """uvicorn logs each WebSocket's path with its query string (``"WebSocket /path?token=..." [accepted]``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and any(isinstance(a, str) and "token=" in a for a in record.args):
            record.args = tuple(_redact(a) if isinstance(a, str) else a for a in record.args)
        if isinstance(record.msg, str) and "token=" in record.msg:
            record.msg = _redact(record.msg)
        return True


def _redact(text: str) -> str:
    return _TOKEN_IN_QUERY.sub("[redacted]", text)
