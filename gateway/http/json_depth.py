"""A bound on how deeply JSON may nest, checked before any parser sees it.

Python's ``json`` and msgspec both recurse per level and give up with a ``RecursionError`` around 1,000 levels: a
500 and a traceback, for a 2-kilobyte body sent without credentials. Neither parser takes a depth limit, so this
module measures the depth itself: a count of brackets (C speed) settles nearly every body, and only a body with more
brackets than the limit is scanned properly, with a regular expression that skips string literals.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from litestar.enums import ScopeType

from gateway.http.refusals import JsonTooDeepError

if TYPE_CHECKING:
    from collections.abc import Callable

    from litestar.types import ASGIApp, Receive, ReceiveMessage, Scope, Send

__all__ = ["json_depth_exceeds", "json_depth_middleware"]

#: A string literal (skipped whole) or one bracket.
_TOKENS_BYTES = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)
_TOKENS_TEXT = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)
_OPENERS_BYTES, _CLOSERS_BYTES = frozenset(b"[{"), frozenset(b"]}")
_OPENERS_TEXT, _CLOSERS_TEXT = frozenset("[{"), frozenset("]}")
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def _openers(data: bytes | str) -> int:
    if isinstance(data, bytes):
        return data.count(b"[") + data.count(b"{")
    return data.count("[") + data.count("{")


def json_depth_exceeds(data: bytes | str, max_depth: int) -> bool:
    """Whether ``data`` nests arrays and objects deeper than ``max_depth`` (brackets inside strings do not count)."""
    if _openers(data) <= max_depth:
        return False  # cannot nest deeper than it has opening brackets
    tokens, openers, closers = (
        (_TOKENS_BYTES, _OPENERS_BYTES, _CLOSERS_BYTES)
        if isinstance(data, bytes)
        else (_TOKENS_TEXT, _OPENERS_TEXT, _CLOSERS_TEXT)
    )
    depth = 0
    for match in tokens.finditer(data):  # type: ignore[arg-type]  # the pattern's type follows the data's
        first = match.group()[0]
        if first in openers:
            depth += 1
            if depth > max_depth:
                return True
        elif first in closers:  # else a string literal
            depth -= 1
    return False


class _DepthCheckedReceive:
    """A request's ``receive`` that refuses the body, once complete, if it nests too deeply."""

    __slots__ = ("_chunks", "_max_depth", "_openers", "_receive")

    def __init__(self, receive: Receive, max_depth: int) -> None:
        self._receive = receive
        self._max_depth = max_depth
        self._chunks: list[bytes] = []
        self._openers = 0

    async def __call__(self) -> ReceiveMessage:
        message = await self._receive()
        if message["type"] == "http.request":
            if body := message.get("body", b""):
                self._chunks.append(body)  # a reference: Litestar keeps the same chunks
                self._openers += _openers(body)
            if not message.get("more_body", False):
                chunks, self._chunks = self._chunks, []
                if self._openers > self._max_depth and json_depth_exceeds(b"".join(chunks), self._max_depth):
                    raise JsonTooDeepError(self._max_depth)
        return message


def _is_form(scope: Scope) -> bool:
    """A multipart upload carries audio, whose bytes may hold any brackets: it is no JSON, and its handler parses no
    JSON from it."""
    content_type = next((value for name, value in scope["headers"] if name == b"content-type"), b"")
    return content_type[:10].lower() == b"multipart/"


def json_depth_middleware(max_depth: int) -> Callable[[ASGIApp], ASGIApp]:
    """Litestar middleware: a request body nested deeper than ``max_depth`` gets 400 (``json_too_deep``).

    The check runs as the body is received, so it answers before the handler's JSON parser recurses; the error is
    raised from ``receive`` and the route's API family's exception table turns it into the response.
    """

    def wrap(app: ASGIApp) -> ASGIApp:
        async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] == ScopeType.HTTP and scope["method"] in _BODY_METHODS and not _is_form(scope):
                receive = _DepthCheckedReceive(receive, max_depth)
            await app(scope, receive, send)

        return middleware

    return wrap
