"""The limits one server enforces on every connection, from its ``server`` settings."""

from __future__ import annotations

import resource
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.http.client_address import ProxyTrust
from lifecycle import naming

if TYPE_CHECKING:
    from gateway.settings import ServerSettings

__all__ = ["ConnectionLimits"]

logger = naming.logger("connections")

#: Open files kept back from the connection cap for everything else the process holds (engine pipes, Redis
#: connections, the listening socket, log files): at least this many, or a quarter of the limit.
_RESERVED_FILES = 64


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """The limits one server enforces on every connection (``server`` settings).

    Built by :meth:`from_settings` only, and with no defaults of its own: a limit added here that it does not pass
    is a type error, not a limit silently running at another value than the configured one.
    """

    max_header_bytes: int
    max_headers: int
    header_timeout_s: float
    max_connections: int
    body_min_rate_bytes_per_s: int
    body_rate_interval_s: float
    body_timeout_s: float | None
    max_connections_per_address: int
    proxies: ProxyTrust

    @classmethod
    def from_settings(cls, server: ServerSettings) -> ConnectionLimits:
        """The configured limits, with the connection cap lowered to what the open-file limit allows."""
        return cls(
            max_header_bytes=server.max_header_bytes,
            max_headers=server.max_headers,
            header_timeout_s=server.header_timeout_s,
            max_connections=_fit_open_file_limit(server.max_connections),
            body_min_rate_bytes_per_s=server.body_min_rate_bytes_per_s,
            body_rate_interval_s=server.body_rate_interval_s,
            body_timeout_s=server.body_timeout_s,
            max_connections_per_address=server.max_connections_per_address,
            proxies=ProxyTrust(server.trusted_proxies),
        )

    @property
    def body_min_interval_bytes(self) -> float:
        """What a body must bring in each interval (unless it ends in it), at the server's minimum rate."""
        return self.body_min_rate_bytes_per_s * self.body_rate_interval_s


def _fit_open_file_limit(max_connections: int) -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return max_connections
    fitting = max(soft - max(_RESERVED_FILES, soft // 4), 1)
    if fitting < max_connections:
        logger.warning(
            "server.max_connections lowered from %d to %d to fit the open-file limit (%d)",
            max_connections,
            fitting,
            soft,
        )
        return fitting
    return max_connections
