"""Keeping the credentials that WebSocket clients put in the query string (browsers' ``?token=``, ElevenLabs'
``?authorization=``) out of uvicorn's connection log lines."""

from __future__ import annotations

import logging
import re

__all__ = ["QueryTokenRedactor"]

_CREDENTIAL_NAMES = ("token=", "authorization=")
_CREDENTIAL_IN_QUERY = re.compile(r"(?:(?<=[?&]token=)|(?<=[?&]authorization=))[^&\s\"]+", re.IGNORECASE)


class QueryTokenRedactor(logging.Filter):
    """uvicorn logs each WebSocket's path with its query string (``"WebSocket /path?token=..." [accepted]``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and any(isinstance(a, str) and _names_one(a) for a in record.args):
            record.args = tuple(_redact(a) if isinstance(a, str) else a for a in record.args)
        if isinstance(record.msg, str) and _names_one(record.msg):
            record.msg = _redact(record.msg)
        return True


def _names_one(text: str) -> bool:
    lowered = text.lower()
    return any(name in lowered for name in _CREDENTIAL_NAMES)


def _redact(text: str) -> str:
    return _CREDENTIAL_IN_QUERY.sub("[redacted]", text)
