"""Why a connection or request is refused before the application sees it, in which API family's words, and which
idle connections make room at the cap: the pieces :mod:`gateway.http.connection_limits`' protocol is built from.

A refusal is the gateway's own (:class:`~gateway.http.refusals.ProtocolRefusalError`); its body is the one the app
would give an error of the request's route: each API family declares its body on its routes' ``opt``
(:data:`REFUSAL_BODY`, as it declares its exception handlers on them), the app its default, and
:func:`refusal_bodies` routes the request's method and path through the app to find it (a method the path does not
take, or a path under a route's, the family that answers its 405 or 404). A refusal before the request line is known
(a garbled or unfinished one, a socket that sent nothing in time), or for a path under no route, gets the app's
default: OpenAI's body.
"""

from __future__ import annotations

import math
import urllib.parse
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, cast

import httptools

from gateway.http.errors import refusal_body
from gateway.http.refusals import ProtocolRefusalError
from gateway.http.routing_errors import handler_near, routed_handler
from lifecycle import naming

if TYPE_CHECKING:
    from collections.abc import Callable

    from litestar import Litestar

__all__ = [
    "REFUSAL_BODY",
    "ReclaimableConnections",
    "RefusalBodies",
    "RefusalBody",
    "RequestTarget",
    "openai_bodies",
    "over_capacity",
    "parser_refusal",
    "refusal_bodies",
    "request_line_target",
    "target_of",
    "too_many_from_address",
]

logger = naming.logger("connections")

_REFUSAL_WARNING_INTERVAL_S = 10.0

REFUSAL_BODY = "refusal_body"
"""The ``opt`` key under which an API family's routes (and the app, for its default) carry its :data:`RefusalBody`."""

RefusalBody: TypeAlias = "Callable[[Exception], dict[str, Any]]"
"""An API family's error body for an exception: its one table's entry, as its exception handlers send it."""
RequestTarget: TypeAlias = tuple[str, str]
"""A request's method and (decoded) path, as far as its request line was read."""
RefusalBodies: TypeAlias = "Callable[[ProtocolRefusalError, RequestTarget | None], dict[str, Any]]"
"""The body a refusal of a request to this target (``None``: not known) is answered with."""


def openai_bodies(refusal: ProtocolRefusalError, _: RequestTarget | None) -> dict[str, Any]:
    """OpenAI's body whatever the target: a protocol not handed the app's (:func:`refusal_bodies`)."""
    return refusal_body(refusal)


def refusal_bodies(app: Litestar) -> RefusalBodies:
    """The body of a refusal as the route its request is for answers errors: the :data:`REFUSAL_BODY` of the handler
    the app routes its method and path to; the app's own for a request it routes nowhere, or not known."""
    default: RefusalBody = app.opt.get(REFUSAL_BODY, refusal_body)

    def body(refusal: ProtocolRefusalError, target: RequestTarget | None) -> dict[str, Any]:
        family: RefusalBody = default if target is None else _routed_body(app, target, default)
        return family(refusal)

    return body


def _routed_body(app: Litestar, target: RequestTarget, default: RefusalBody) -> RefusalBody:
    """The body of the handler the request is routed to; for one the routing refuses (another method, a path under a
    route), of the family its 404 or 405 is answered by (``gateway/http/routing_errors.py``)."""
    method, path = target
    # A socket's handshake is a GET the app routes as a WebSocket (a scope without a method): the path's handler.
    handler = routed_handler(app, method, path) or handler_near(app, path)
    return default if handler is None else cast("RefusalBody", handler.opt.get(REFUSAL_BODY, default))


def target_of(method: bytes | str, url: bytes) -> RequestTarget | None:
    """The method and decoded path of a request line's target, as uvicorn decodes it (``None``: not a URL)."""
    try:
        raw_path = httptools.parse_url(url).path or b""
        path = raw_path.decode("ascii")
        name = method.decode("ascii") if isinstance(method, bytes) else method
    except (httptools.HttpParserInvalidURLError, UnicodeDecodeError):
        return None
    return name, urllib.parse.unquote(path) if "%" in path else path


def request_line_target(data: bytes) -> RequestTarget | None:
    """The target of the request line ``data`` begins with, when it holds the whole line (a connection refused before
    its bytes are parsed: the first read nearly always holds the line)."""
    line, ended, _ = data.partition(b"\n")
    parts = line.rstrip(b"\r").split(b" ")
    if not ended or len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
        return None
    return target_of(parts[0], parts[1])


class _Reclaimable(Protocol):
    def reclaim(self) -> None: ...


class ReclaimableConnections:
    """The connections without a request in progress, oldest first: the ones closed to make room at the cap."""

    def __init__(self) -> None:
        self._connections: dict[_Reclaimable, None] = {}  # insertion-ordered: oldest first
        self._refused_since_warning = 0
        self._warned_at = -math.inf

    def note_refusal(self, now: float, open_connections: int) -> None:
        """Log refusals at the cap as one warning per :data:`_REFUSAL_WARNING_INTERVAL_S`, not one per connection."""
        self._refused_since_warning += 1
        if now - self._warned_at >= _REFUSAL_WARNING_INTERVAL_S:
            logger.warning(
                "%d connection(s) refused with 503: %d open, every one busy (server.max_connections)",
                self._refused_since_warning,
                open_connections,
            )
            self._refused_since_warning, self._warned_at = 0, now

    def add(self, connection: _Reclaimable) -> None:
        self._connections.pop(connection, None)
        self._connections[connection] = None

    def discard(self, connection: _Reclaimable) -> None:
        self._connections.pop(connection, None)

    def reclaim_oldest(self) -> bool:
        """Close the oldest one; False when there is none."""
        for connection in self._connections:
            self.discard(connection)
            connection.reclaim()
            return True
        return False


def over_capacity() -> ProtocolRefusalError:
    return ProtocolRefusalError(
        503, "The server has too many open connections; retry soon.", "too_many_connections", retry_after_s=1
    )


def too_many_from_address() -> ProtocolRefusalError:
    return ProtocolRefusalError(
        429,
        "Too many open connections from your address; close some or retry soon.",
        "too_many_connections",
        retry_after_s=1,
    )


def parser_refusal(exc: httptools.HttpParserError) -> ProtocolRefusalError:
    if "Invalid HTTP version" in str(exc):  # HTTP/1.2, HTTP/3.0: well-formed, but not a version spoken here
        return ProtocolRefusalError(
            505, "This HTTP version is not supported: speak HTTP/1.1.", "http_version_not_supported"
        )
    return ProtocolRefusalError(400, "Invalid HTTP request received.", "invalid_http_request")
