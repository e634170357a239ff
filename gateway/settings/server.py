"""The HTTP server's settings (``server``): where it listens, its connection limits, its profile."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "ENGINE_NODE_MIN_BODY_BYTES",
    "ServerSettings",
]


ENGINE_NODE_MIN_BODY_BYTES = 128 * 1024
"""The least ``server.max_body_bytes`` of an engine node: 4,096 characters of input and of instructions (16 KiB each
at most in UTF-8) and a speaker of 16,384 characters (48 KiB), with room to spare."""


class ServerSettings(BaseModel):
    """HTTP server knobs."""

    model_config = ConfigDict(extra="forbid")

    host: str = "127.0.0.1"
    """Address to bind."""
    port: int = Field(default=8000, ge=0, le=65535)
    """Port to bind."""
    tls_certfile: Path | None = None
    """PEM certificate (its chain after it): with ``tls_keyfile``, the gateway serves HTTPS and WSS on ``port``
    (``chattts-gateway serve --tls-certfile … --tls-keyfile …`` says the same); see
    [TLS](realtime.md#tls-wss-for-the-sdks-realtime-helpers)."""
    tls_keyfile: Path | None = Field(default=None, repr=False)
    """The certificate's PEM private key (unencrypted); both or neither."""
    max_body_bytes: int = Field(default=64 * 1024, ge=1024)
    """Largest request body accepted; larger bodies get ``413`` in the error body of the route's API family (OpenAI's;
    ElevenLabs' on its paths). An engine node (``profile:
    engine``) takes at least ``131072`` (what a front sends at most: the longest input and instructions and a custom
    voice's speaker)."""
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    """``debug``, ``info``, ``warning`` or ``error``."""
    shutdown_grace_s: int = Field(default=30, ge=0)
    """On SIGTERM: stop accepting; realtime sessions take no more text, finish the segment being spoken and close
    with 1012; in-flight HTTP streams finish; all within this long in total, then the engines stop."""
    send_timeout_s: float = Field(default=30.0, gt=0)
    """A client that leaves one write of its response unread this long (it stopped reading) counts as gone: its
    response is abandoned, releasing its concurrent-stream lease and its synthesis and recording its usage, and the
    connection is closed."""
    playground: bool = True
    """Serve the playground page at ``/`` and ``/playground``: try the speech API from a browser, hearing the audio
    as it streams (public; its API calls carry the key pasted into it)."""
    profile: Literal["gateway", "engine"] = "gateway"
    """``engine``: run as an **engine node**, the engine tier behind front gateways (their ``kind: openai`` engines).
    Every request but the probes must carry ``auth.service_token`` as ``Authorization: Bearer …`` (else ``401``, or a
    refused WebSocket handshake; never in a URL), and ``/readyz`` shows pids and engine reasons only with it; there
    are no tenants, per-tenant limits, audio cache, custom voices (``404``) or admin API (``404``) of its own; it
    schedules, counts and labels each request as the tenant its front names (``service`` when the front names none;
    see [What crosses the hop](deployment.md#what-crosses-the-hop-and-whom-each-tier-trusts)). Needs
    ``auth.service_token``; ``auth.tenants``, ``auth.admin_token`` and ``auth.jwt`` are refused (they belong to the
    front). See [Two tiers](deployment.md#two-tiers-gateways-in-front-of-engine-nodes)."""
    max_header_bytes: int = Field(default=16 * 1024, ge=1024, le=1024 * 1024)
    """Largest request head (request line and headers) accepted; a larger one gets ``431`` (in the error body of the
    API family its path belongs to: OpenAI's; ElevenLabs' on its paths) and the connection is closed. An unfinished
    head is cut off once it passes the limit, so an endless header costs the server at most this plus one socket
    read."""
    max_headers: int = Field(default=100, ge=8, le=10_000)
    """Most header lines in one request; more get ``431``."""
    header_timeout_s: float = Field(default=10.0, gt=0)
    """Time a connection has to deliver a complete request head, counted from the connect (or, on a kept-alive
    connection, from the next request's first byte); then ``408`` and the connection is closed (silently when nothing
    was sent at all). Idle and byte-at-a-time ("slowloris") sockets cannot pile up."""
    body_min_rate_bytes_per_s: int = Field(default=1024, ge=1)
    """Least rate a request body must keep arriving at (a tenant may have its own:
    ``limits.body_min_rate_bytes_per_s``; what bursty clients need is measured in
    [security.md](security.md#idle-and-slow-clients)), measured over each ``body_rate_interval_s`` from the end of
    its head: an interval that brings fewer bytes than this rate times its length, without ending the body, gets
    ``408`` (``request_timeout``), the connection is closed and the request is logged with status ``499`` (no
    traceback). Stops the "slow POST": a body dripped a byte at a time to hold a connection (cut after one interval,
    where a single total time held it for all of that time), while a large body on a slow but steady link — a 10 MiB
    voice sample over a poor uplink — takes as long as it needs. An interval in which the server itself was not
    reading is not held against the client (the application had not asked for the body yet: a client waiting for
    ``100 Continue``; or its buffer was full)."""
    body_rate_interval_s: float = Field(default=10.0, gt=0)
    """The interval over which ``body_min_rate_bytes_per_s`` is measured (so a body must bring 10 KiB in each 10 s
    unless it ends); the first interval is a body's grace for its first bytes. Shorter cuts a dripping body sooner;
    longer forgives a link that stalls for a while and then catches up."""
    body_timeout_s: float | None = Field(default=None, gt=0)
    """Optional bound on the whole body's time, however fast it arrives: then 408 and the connection is closed.
    ``None`` (the default): no bound but the minimum rate, which holds a body's time to its size over
    ``body_min_rate_bytes_per_s`` and one interval, so a 10 MiB voice sample on a slow link is not cut at an arbitrary
    total. (Before the minimum rate this was the only body deadline, 30 s: configurations that set it keep it.)"""
    keep_alive_timeout_s: int = Field(default=5, ge=1)
    """An idle keep-alive connection is closed after this many seconds between requests."""
    max_connections_per_address: int = Field(default=256, ge=1)
    """Open connections one client address may hold, HTTP and realtime WebSockets alike (an upgraded WebSocket counts
    until it closes); one more gets ``429`` (``too_many_connections``, ``Retry-After: 1``) as soon as it sends its
    request (a WebSocket upgrade included), so one address cannot take the connections everyone else needs (the
    slot-exhaustion attack, with idle sockets, unfinished requests or open sessions). An IPv6 client counts by its
    /64 network, which one host commonly holds whole: it cannot dodge the cap with a fresh address per connection. A
    connection from one of ``trusted_proxies`` counts against the client its latest request was forwarded for, not
    against the proxy."""
    max_auth_failures_per_address: int = Field(default=20, ge=1)
    """Credentials (API keys, JWTs) one client address may present and have refused (``401``/``403``) within
    ``auth_failure_window_s``. Past it, a request or realtime socket from that address whose credential has not
    authenticated on this replica lately gets ``429`` (``too_many_failed_authentications``, with ``Retry-After``
    until the oldest refusal leaves the window; a socket closes with ``1013``) before its credential is looked up.
    Stops key guessing and the store flood that comes with it: every well-formed key otherwise costs a Redis lookup,
    found or not, so a stranger sending random keys as fast as it can loads the store like a busy tenant. A tenant
    whose key has authenticated on this replica (from any address; the last 10,000 credentials are remembered, as
    keyed hashes) goes on being served from the throttled address, so a stranger behind the same NAT does not lock it
    out; a valid key never used on this replica waits, from that address, for ``Retry-After`` like a guess (nothing
    tells the two apart). Requests without a credential are not counted (their ``401`` costs nothing). One warning
    line per throttled address. Counted per replica, in memory."""
    auth_failure_window_s: int = Field(default=60, ge=1)
    """The moving window over which ``max_auth_failures_per_address`` counts refused credentials."""
    max_connections: int = Field(default=1000, ge=1)
    """Open connections (HTTP and WebSocket). At the cap the oldest connection with no request in progress (idle, or
    still sending its head) is closed to make room; when every connection is busy, a new one gets ``503`` with
    OpenAI's body and ``Retry-After: 1`` as soon as it sends its request (dropped after 1 s if it sends nothing).
    Lowered at start, with a warning, to the open-file limit (``ulimit -n``) minus a reserve of a quarter of it (at
    least 64). What tenants hold for long (WebSocket sessions open, request bodies still arriving) is shared fairly
    when the replica is crowded: once they reach 80 % of this cap and two tenants or more hold them, a tenant already
    holding its fair share (those 80 % divided among the tenants holding anything) is refused one more (``429``
    ``concurrency_limit_exceeded`` for a body, an ``error`` event and close code ``1013`` for a session), while a
    tenant under its share still gets in; each tenant is also held to its own ``open_sessions`` and
    ``bodies_in_flight`` ([tenants](configuration.md#auth))."""
    max_json_depth: int = Field(default=32, ge=2, le=512)
    """Deepest nesting of arrays and objects in a JSON request body; deeper bodies get ``400`` (``code:
    json_too_deep``) before any parser sees them. Realtime messages have the same bound (32) and get an ``error``
    event."""
    trusted_proxies: list[str] = Field(default_factory=list)
    """Addresses or networks (``10.0.0.0/8``) of the reverse proxies in front of the gateway; anything else is
    refused at start. Only for connections from them are ``X-Forwarded-For`` / ``X-Forwarded-Proto`` believed and the
    client address taken from them: the last address in ``X-Forwarded-For`` that is not a trusted proxy's (each proxy
    appends the address it was called from, so entries a client forges come before its proxy's and are never taken).
    That address is what every per-address limit counts (``max_connections_per_address``,
    ``max_auth_failures_per_address``, ``realtime.max_unauthenticated_per_address``, the admin throttle) and what the
    access log shows. Empty: forwarding headers are ignored, so a caller cannot forge an address to dodge a
    per-address limit or to charge its failures to someone else (uvicorn alone believes them from ``127.0.0.1``);
    behind a proxy, list it, or every caller shares the proxy's address: one cap for all of them, and a stranger's
    failed admin attempts throttle the admin too."""

    @field_validator("trusted_proxies")
    @classmethod
    def _proxies_are_addresses(cls, proxies: list[str]) -> list[str]:
        for proxy in proxies:
            try:
                ipaddress.ip_network(proxy, strict=False)
            except ValueError:
                raise ValueError(f"{proxy!r} is not an IP address or network") from None
        return proxies

    @model_validator(mode="after")
    def _tls_has_both_files(self) -> ServerSettings:
        if (self.tls_certfile is None) != (self.tls_keyfile is None):
            raise ValueError("tls_certfile and tls_keyfile go together: give both, or neither for plain HTTP")
        return self
