"""Who a per-address limit counts a client as: one rule for the connection caps and the credential throttles.

Two things are decided here. The *address* of a client: its peer address, or, for a connection from one of
``server.trusted_proxies``, the last address in ``X-Forwarded-For`` that is not a trusted proxy's (each proxy appends
the address it was called from, so what a client writes itself comes first and is never taken): the same rule as
uvicorn's ``ProxyHeadersMiddleware``, which puts that address in the ASGI scope. And the *key* it is counted under: an
IPv4 address as it is, an IPv6 address by its /64 network (a host is commonly given a whole /64 and could otherwise
take a fresh address for every connection or guess), an IPv4-mapped IPv6 address as its IPv4.
"""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["ProxyTrust", "address_key"]

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def address_key(host: str) -> str:
    """The key a client at ``host`` is counted under (a name that is no IP address, a test client's: as it is)."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


class ProxyTrust:
    """The reverse proxies whose forwarding headers are believed (``server.trusted_proxies``)."""

    def __init__(self, proxies: Iterable[str]) -> None:
        self._networks: tuple[Network, ...] = tuple(ipaddress.ip_network(proxy, strict=False) for proxy in proxies)

    def trusts(self, host: str) -> bool:
        """Whether ``host`` is one of the trusted proxies (never a name that is no IP address)."""
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            return False
        return any(ip in network for network in self._networks)

    def forwarded_client(self, x_forwarded_for: Iterable[bytes]) -> str | None:
        """The client a trusted proxy forwarded for, from the values of its ``X-Forwarded-For`` headers: the last
        address that is not a trusted proxy's. ``None`` without one (the proxy's own request, or every hop trusted)."""
        hops = [hop.strip() for value in x_forwarded_for for hop in value.decode("latin-1").split(",")]
        for hop in reversed(hops):
            host = _without_port(hop)
            if not self.trusts(host):
                return host or None
        return None


def _without_port(hop: str) -> str:
    """``1.2.3.4:80`` -> ``1.2.3.4``, ``[::1]:80`` -> ``::1``; anything else as it is."""
    if hop.startswith("["):
        return hop[1 : hop.find("]")] if "]" in hop else hop
    if hop.count(":") == 1:
        return hop.partition(":")[0]
    return hop
