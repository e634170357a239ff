"""Keeping the credentials that WebSocket clients put in the query string (browsers' ``?token=``, ElevenLabs'
``?authorization=``, and whatever name a client guesses: ``?xi-api-key=``, ``?api_key=``) out of uvicorn's connection
log lines: only the values of the sockets' known options are kept, every other value is redacted."""

from __future__ import annotations

import logging
import re
from urllib.parse import unquote_plus

__all__ = ["QueryTokenRedactor"]

_OPTION_NAMES = frozenset({
    "model", "intent",  # OpenAI Realtime's, and this gateway's sockets'
    "model_id", "output_format", "inactivity_timeout", "sync_alignment", "auto_mode", "enable_ssml_parsing",
    "enable_logging", "seed", "language_code", "apply_text_normalization",  # ElevenLabs' sockets'
})  # fmt: skip
"""The query parameters the sockets read as options, whose values are kept: a name not among them may carry a
credential under a name the gateway never reads (it is refused, but uvicorn has logged the line by then)."""
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
    # A name is matched as the server reads it, percent-decoded: ``%6Dodel=`` is a ``model=`` too.
    name, equals, _ = pair.partition("=")
    if equals and unquote_plus(name).strip().lower() not in _OPTION_NAMES:
        return f"{name}=[redacted]"
    return pair
