"""Why a connection or request is refused before the application sees it, and which idle connections make room at
the cap: the pieces :mod:`gateway.http.connection_limits`' protocol is built from."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Protocol

from gateway.http.errors import INVALID_REQUEST, SERVER_ERROR
from lifecycle import naming

if TYPE_CHECKING:
    import httptools

__all__ = [
    "ReclaimableConnections",
    "Refusal",
    "over_capacity",
    "parser_refusal",
    "too_many_from_address",
]

logger = naming.logger("connections")

_REFUSAL_WARNING_INTERVAL_S = 10.0


class Refusal(Exception):  # noqa: N818 - not an error of the server's: the reason a request is refused
    """Raised from a parser callback to refuse the request being parsed."""

    def __init__(
        self, status: int, message: str, code: str, *, kind: str = INVALID_REQUEST, retry_after_s: int | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.code = status, message, code
        self.kind, self.retry_after_s = kind, retry_after_s


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


def over_capacity() -> Refusal:
    return Refusal(
        503,
        "The server has too many open connections; retry soon.",
        "too_many_connections",
        kind=SERVER_ERROR,
        retry_after_s=1,
    )


def too_many_from_address() -> Refusal:
    return Refusal(
        429,
        "Too many open connections from your address; close some or retry soon.",
        "too_many_connections",
        kind="requests",  # as OpenAI names the exhausted budget of a 429
        retry_after_s=1,
    )


def parser_refusal(exc: httptools.HttpParserError) -> Refusal:
    if "Invalid HTTP version" in str(exc):  # HTTP/1.2, HTTP/3.0: well-formed, but not a version spoken here
        return Refusal(505, "This HTTP version is not supported: speak HTTP/1.1.", "http_version_not_supported")
    return Refusal(400, "Invalid HTTP request received.", "invalid_http_request")
