"""Keeping the credentials that WebSocket clients put in the query string (browsers' ``?token=``, ElevenLabs'
``?authorization=``) out of uvicorn's connection log lines."""

from __future__ import annotations

import logging
import re
from urllib.parse import unquote_plus

__all__ = ["QueryTokenRedactor"]

_CREDENTIAL_NAMES = frozenset({"token", "authorization"})
_QUERY = re.compile(r"\?([^\s\"]+)")


class QueryTokenRedactor(logging.Filter):
    """uvicorn logs each WebSocket's path with its query string (``"WebSocket /path?token=..." [accepted]``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and any(isinstance(a, str) and "?" in a for a in record.args):
            record.args = tuple(_redact(a) if isinstance(a, str) else a for a in record.args)
        if isinstance(record.msg, str) and "?" in record.msg:
            record.msg = _redact(record.msg)
        return True


def _redact(text: str) -> str:
    return _QUERY.sub(lambda query: "?" + "&".join(map(_redact_pair, query[1].split("&"))), text)


def _redact_pair(pair: str) -> str:
    # A name is matched as the server reads it, percent-decoded: ``%74oken=`` is a ``token=`` too.
    name, equals, _ = pair.partition("=")
    if equals and unquote_plus(name).strip().lower() in _CREDENTIAL_NAMES:
        return f"{name}=[redacted]"
    return pair
