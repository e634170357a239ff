"""The addresses a remote engine sends to: one per configured URL and IP address, each with its health, its load
and its circuit breaker.

A host name is resolved here rather than by the HTTP client so that every address it has (a Kubernetes headless
Service: one per pod) is balanced, probed and broken separately. Requests connect to the address but keep the
URL's host name in the ``Host`` header and the TLS server name, so virtual hosts and certificates still work.
"""

from __future__ import annotations

import asyncio
import ipaddress
import itertools
import socket
from typing import TYPE_CHECKING, Any, TypeAlias

import httpx

from engines.breaker import CircuitBreaker
from engines.status import EndpointStatus
from lifecycle import naming

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable

    from engines.breaker import BreakerSettings

__all__ = ["EndpointAddress", "EndpointSet", "EndpointSlots", "Resolver", "resolve_addresses"]

logger = naming.logger("remote")

_NOT_PROBED = "not probed yet"

Resolver: TypeAlias = "Callable[[str], Awaitable[list[str] | str]]"
"""A base URL → the IP addresses of its host, or why there are none (:func:`resolve_addresses`, the system's)."""


class EndpointAddress:
    """One address of one configured endpoint URL."""

    def __init__(self, url: str, address: str | None, breaker: BreakerSettings) -> None:
        self.url = url
        self.address = address
        self.breaker = CircuitBreaker(breaker)
        self.healthy = False
        self.in_flight = 0
        self.unhealthy_reason: str | None = _NOT_PROBED if address is not None else None
        """Why it is unhealthy now (its probe's failure, an unreachable request); ``None`` while healthy."""
        self.last_error: str | None = None
        """The last failure of a request sent to it, which its breaker counted. Apart from the health reason: the
        probes that follow a failure (a node replacing a hung worker is ``starting``) must not hide its cause."""
        self.probe_models = False
        """Probe ``/models`` even though the base URL ends with ``/v1`` (the server has no ``/readyz``)."""
        self.engine_node = False
        """Its last healthy probe said it is a chattts-gateway engine node (``engines/remote/context.py``): it gets the
        tenant context and custom voices' speakers."""
        self._base = httpx.URL(url)

    @property
    def usable(self) -> bool:
        """Healthy, and its breaker lets at least a trial through."""
        return self.healthy and self.breaker.state != "open"

    def target(self, path: str) -> tuple[httpx.URL, dict[str, str], dict[str, Any]]:
        """The URL of the absolute ``path`` at this address, with the headers and request extensions that keep the
        configured host name (``Host``, TLS server name)."""
        assert self.address is not None
        url = self._base.copy_with(host=self.address, path=path)
        extensions: dict[str, Any] = {"sni_hostname": self._base.host} if self._base.scheme == "https" else {}
        return url, {"Host": self._base.netloc.decode("ascii")}, extensions

    def api_path(self, path: str) -> str:
        """``path`` under the base URL (``/audio/speech`` → ``/v1/audio/speech``)."""
        return self._base.path.rstrip("/") + path

    def probe_path(self) -> str:
        """The server root's ``/readyz`` when the base URL ends with ``/v1`` (a chattts-gateway node), else
        ``/models`` under the base URL (every OpenAI-compatible API has it)."""
        base = self._base.path.rstrip("/")
        if base.endswith("/v1") and not self.probe_models:
            return base.removesuffix("/v1") + "/readyz"
        return base + "/models"

    def mark_healthy(self, *, engine_node: bool = False) -> None:
        """A probe answered 200; ``engine_node``: with the engine node's marker header."""
        if not self.healthy:
            logger.info("endpoint %s (%s) is healthy%s", self.url, self.address, " (an engine node)" * engine_node)
        self.healthy = True
        self.engine_node = engine_node
        self.unhealthy_reason = None  # last_error stays: the last failure is worth seeing after a recovery too

    def mark_unhealthy(self, reason: str) -> None:
        if self.healthy:
            logger.warning("endpoint %s (%s) taken out: %s", self.url, self.address, reason)
        self.healthy = False
        self.unhealthy_reason = reason

    def status(self) -> EndpointStatus:
        return EndpointStatus(
            url=self.url,
            address=self.address,
            state="healthy" if self.healthy else "unhealthy",
            in_flight=self.in_flight,
            breaker=self.breaker.state,
            reason=self.unhealthy_reason,
            last_error=self.last_error,
        )


class EndpointSet:
    """Every address of every configured URL, kept in step with what the host names resolve to."""

    def __init__(self, urls: Iterable[str], breaker: BreakerSettings, resolver: Resolver | None = None) -> None:
        self._urls = list(urls)
        self._breaker = breaker
        self._resolver = resolver or resolve_addresses
        self._by_url: dict[str, list[EndpointAddress]] = {url: [] for url in self._urls}

    def all(self) -> list[EndpointAddress]:
        return [endpoint for url in self._urls for endpoint in self._by_url[url]]

    def routable(self) -> list[EndpointAddress]:
        """The resolved addresses (the ones that can be probed and sent to)."""
        return [endpoint for endpoint in self.all() if endpoint.address is not None]

    async def resolve(self) -> None:
        """Resolve every URL's host again; addresses that stay keep their state, in-flight count and breaker."""
        results = await asyncio.gather(*(self._resolver(url) for url in self._urls))
        for url, result in zip(self._urls, results, strict=True):
            self._update(url, result)

    def _update(self, url: str, result: list[str] | str) -> None:
        current = {endpoint.address: endpoint for endpoint in self._by_url[url] if endpoint.address is not None}
        if isinstance(result, str):  # resolution failed
            if current:
                return  # a passing DNS failure: keep the addresses we had, their probes tell whether they work
            unresolved = EndpointAddress(url, None, self._breaker)
            unresolved.unhealthy_reason = result
            self._by_url[url] = [unresolved]
            return
        if set(result) != set(current):
            logger.info("endpoint %s resolves to %s", url, ", ".join(result))
        self._by_url[url] = [current.get(address) or EndpointAddress(url, address, self._breaker) for address in result]


async def resolve_addresses(url: str) -> list[str] | str:
    """The IP addresses of the URL's host (in resolver order, without repeats), or why they cannot be had."""
    parsed = httpx.URL(url)
    host = parsed.host
    try:
        return [str(ipaddress.ip_address(host))]
    except ValueError:
        pass
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        return f"cannot resolve {host}: {exc.strerror or exc}"
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class EndpointSlots:
    """A remote engine's endpoints as the scheduler's slot source: each usable address has ``max_in_flight`` slots."""

    def __init__(self, endpoints: EndpointSet, max_in_flight: int) -> None:
        self._endpoints = endpoints
        self._max_in_flight = max_in_flight
        self._turn = itertools.count()

    def free_slot(self) -> EndpointAddress | None:
        usable = self._usable()
        # Ties go round-robin, so that idle endpoints share the load instead of the first one taking it all.
        turn = next(self._turn)
        order = sorted(range(len(usable)), key=lambda i: (usable[i].in_flight, (i - turn) % len(usable)))
        for index in order:
            endpoint = usable[index]
            if endpoint.in_flight < self._max_in_flight and endpoint.breaker.would_allow():
                return endpoint
        return None

    def take(self, holder: EndpointAddress) -> None:
        holder.in_flight += 1
        holder.breaker.allow()  # a half-open breaker counts the trial now (would_allow said it may)

    def give_back(self, holder: EndpointAddress) -> None:
        holder.in_flight -= 1
        holder.breaker.release()

    def total_slots(self) -> int:
        return self._max_in_flight * len(self._usable())

    def free_slots(self) -> int:
        return sum(max(0, self._max_in_flight - endpoint.in_flight) for endpoint in self._usable())

    def _usable(self) -> list[EndpointAddress]:
        return [endpoint for endpoint in self._endpoints.all() if endpoint.usable]
