"""Connection-level limits, enforced in the HTTP protocol before the application sees a request.

uvicorn's ``httptools`` protocol (the fast one the server runs) has an idle keep-alive timeout, but no limit on the
size or number of request headers, no deadline for receiving the headers or the body, and a concurrency cap that
answers only once the headers have arrived, in plain text. So one unfinished 10 MB header is buffered whole, and a
socket that sends nothing, or a header a byte at a time, is held for ever: a few hundred of them exhaust the open
files and the server stops answering ``/healthz``. :class:`GuardedHttpToolsProtocol` adds what is missing:

- request heads larger than ``max_header_bytes`` or with more than ``max_headers`` lines: 431;
- a head not complete ``header_timeout_s`` after the connect (or after its first byte, on a kept-alive
  connection): 408 (closed silently when nothing was sent at all);
- a body that arrives slower than ``body_min_rate_bytes_per_s`` over an interval of ``body_rate_interval_s`` (the
  server reading all the while; the rate is the caller's own once the application knows it: a tenant's
  ``limits.body_min_rate_bytes_per_s``), or, when ``body_timeout_s`` is set, is not complete that long after its
  head: 408, and the application sees the client go away;
- at most ``max_connections_per_address`` open connections, HTTP and upgraded WebSockets alike, from one client
  address (``gateway/http/client_address.py``: a connection from a trusted proxy counts against the client its latest
  request was forwarded for): one more gets a 429 with ``Retry-After`` as soon as it sends its request;
- at most ``max_connections`` open connections: at the cap the oldest connection that holds no request in progress
  (idle, or still sending its head) is closed to make room, as nginx reuses its idle keep-alive connections; when
  every connection is busy, the new one gets a 503 with ``Retry-After`` as soon as it sends its request;
- a head pipelined behind a request in progress gets its deadline once that request's response is complete (uvicorn
  stops reading meanwhile), so a head trickled behind a response cannot keep the connection for ever;
- what RFC 9112 refuses and nginx answers 400 (505 for a version other than HTTP/1.0 and 1.1): an HTTP/1.1 request
  without ``Host``, one with two ``Host`` headers, an HTTP/0.9-style request line, ``Transfer-Encoding`` on
  HTTP/1.0 (a framing an HTTP/1.0 peer does not have: a smuggling vector between proxies).

Every refusal closes the connection, with the error body of the API family the request's path belongs to
(``gateway/http/connection_refusals.py``: ElevenLabs' on its routes; OpenAI's on its own, on paths the app does not
route, and before the request line is known). Each request's scope carries the
:class:`~gateway.http.arriving_body.ArrivingBody` this protocol ends as soon as the body's last byte is parsed (or the
client leaves, or the body is cut), so that what counts a body while it arrives stops counting it then, not when the
application gets round to reading it.
"""

from __future__ import annotations

import functools
import json
import uuid
from collections import Counter
from typing import TYPE_CHECKING, Any, ClassVar, cast

import httptools
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from gateway.http.arriving_body import ArrivingBody
from gateway.http.client_address import address_key
from gateway.http.connection_caps import ConnectionLimits
from gateway.http.connection_refusals import (
    ReclaimableConnections,
    RefusalBodies,
    RequestTarget,
    openai_bodies,
    over_capacity,
    parser_refusal,
    request_line_target,
    target_of,
    too_many_from_address,
)
from gateway.http.refusals import ProtocolRefusalError
from gateway.http.request_record import RequestRecord
from gateway.http.tracking import log_access
from gateway.http.upgraded_connections import (
    ReleasesAddressOnClose,
    peer_address,
    release_address,
    releasing_address_on_close,
)
from gateway.observability.refusals import count_refusal
from lifecycle import naming

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable

    from uvicorn.protocols.http.httptools_impl import RequestResponseCycle


__all__ = ["ConnectionLimits", "GuardedHttpToolsProtocol", "guarded_http_protocol"]

logger = naming.logger("connections")

#: How long a connection over the cap may take to send its first bytes (to be answered 503) before it is dropped.
_OVER_CAPACITY_GRACE_S = 1.0


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's ``httptools`` protocol with the limits of :class:`ConnectionLimits` (see the module docstring).

    Use :func:`guarded_http_protocol` to get a subclass bound to one server's limits.
    """

    limits: ClassVar[ConnectionLimits]
    reclaimable: ClassVar[ReclaimableConnections]
    per_address: ClassVar[Counter[str]]
    refusal_bodies: ClassVar[RefusalBodies]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.ws_protocol_class is not None:  # an upgraded WebSocket keeps its address's count until it closes
            self.ws_protocol_class = releasing_address_on_close(self.ws_protocol_class)
        self._deadline: asyncio.TimerHandle | None = None
        self._receiving_head = True  # from the connect, or a request's first byte, until its headers are complete
        self._head_bytes = 0  # bytes received while a head is incomplete: bounds what an endless header buffers
        self._parsed_head_bytes = 0
        self._header_lines = 0
        self._request_line_read = False  # the request line of the head being parsed: its target known
        self._hosts = 0
        self._transfer_encoding = False
        self._over_capacity = False
        self._address: str | None = None
        """The client address key this connection counts against (``None``: not counted per address)."""
        self._over_address_cap = False
        self._from_proxy = False
        """Whether the peer is a trusted proxy: the connection counts against the client each request is for."""
        self._body_interval_bytes = 0
        self._body_interval_excused = False
        """Whether the server stopped reading the body during the interval (then the client is not to blame)."""
        self._body_due: float | None = None
        self._body: ArrivingBody | None = None
        """The body of the request whose head was parsed last, until it has ended."""

    # Connection life

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        peer = peer_address(transport)  # None: a Unix socket's, which has no address
        self._from_proxy = peer is not None and self.limits.proxies.trusts(peer)
        if peer is not None and not self._from_proxy and not self._count_address(address_key(peer)):
            self._over_address_cap = True
            self._arm(_OVER_CAPACITY_GRACE_S, functools.partial(self._drop_silent, too_many_from_address()))
            return
        if len(self.connections) > self.limits.max_connections and not self.reclaimable.reclaim_oldest():
            self._over_capacity = True
            self._arm(_OVER_CAPACITY_GRACE_S, functools.partial(self._drop_silent, over_capacity()))
            return
        self.reclaimable.add(self)
        self._arm(self.limits.header_timeout_s, self._head_timed_out)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._end_body()
        self.reclaimable.discard(self)
        self._uncount_address()
        super().connection_lost(exc)

    def _count_address(self, key: str) -> bool:
        """Count this connection against ``key``; False (and not counted) when that address is at its cap."""
        if self.per_address[key] >= self.limits.max_connections_per_address:
            return False
        self.per_address[key] += 1
        self._address = key
        return True

    def _uncount_address(self) -> None:
        if self._address is not None:
            release_address(self.per_address, self._address)
            self._address = None

    def _count_forwarded_client(self) -> None:
        """On a trusted proxy's connection, count it against the client this request is forwarded for (instead of
        the one its previous request was for)."""
        forwarded = (value for name, value in self.headers if name == b"x-forwarded-for")
        client = self.limits.proxies.forwarded_client(forwarded)
        key = None if client is None else address_key(client)
        if key == self._address:
            return
        self._uncount_address()
        if key is not None and not self._count_address(key):
            raise too_many_from_address()

    def reclaim(self) -> None:
        """Close this connection (it has no request in progress) to make room for a new one."""
        self._disarm()
        self.transport.close()

    def handle_websocket_upgrade(self) -> None:
        self._disarm()  # the WebSocket protocol takes the connection over, with its own timeouts
        self.reclaimable.discard(self)
        super().handle_websocket_upgrade()
        # This protocol's connection_lost is never called once the WebSocket has the transport: the WebSocket
        # protocol releases the address's count when its connection is lost (a connection lost meanwhile is only
        # reported on the next turn of the loop, to the transport's protocol by then).
        if self._address is not None:
            release = functools.partial(release_address, self.per_address, self._address)
            self._address = None
            websocket = self.transport.get_protocol()
            if isinstance(websocket, ReleasesAddressOnClose):
                websocket.release_address = release
            else:
                release()

    # Parsing

    def data_received(self, data: bytes) -> None:
        if self._over_address_cap:
            self._refuse(too_many_from_address(), request_line_target(data))
            return
        if self._over_capacity:
            self._refuse_over_capacity(request_line_target(data))
            return
        self._unset_keepalive_if_required()
        if self._receiving_head:
            self._head_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
        except httptools.HttpParserError as exc:
            refusal = exc.__context__ if isinstance(exc.__context__, ProtocolRefusalError) else None
            self._refuse(refusal or parser_refusal(exc))
        else:
            if self._receiving_head and self._head_bytes > self.limits.max_header_bytes:
                self._refuse(
                    ProtocolRefusalError(431, "The request headers are too large.", "request_headers_too_large")
                )

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._receiving_head = True
        self._header_lines = 0
        self._request_line_read = False
        self._hosts = 0
        self._transfer_encoding = False
        self._parsed_head_bytes = 0
        if self._deadline is None and not self._request_in_progress():
            # A kept-alive connection's next request: its head is due from its first byte. (A request pipelined
            # behind one still in progress waits for it; uvicorn stops reading once its head is complete.)
            self._arm(self.limits.header_timeout_s, self._head_timed_out)

    def on_url(self, url: bytes) -> None:
        super().on_url(url)  # first: a target refused as too long is known as far as it came (_past_target)
        self._count_head(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._request_line_read = True  # a header follows the request line
        self._header_lines += 1
        if self._header_lines > self.limits.max_headers:
            raise ProtocolRefusalError(
                431, f"A request may carry at most {self.limits.max_headers} headers.", "request_headers_too_large"
            )
        self._count_head(len(name) + len(value) + 4)  # with ": " and CRLF, as on the wire
        lowered = name.lower()
        self._hosts += lowered == b"host"
        self._transfer_encoding |= lowered == b"transfer-encoding"
        super().on_header(name, value)

    def _count_head(self, size: int) -> None:
        # A head that arrives whole in one read is parsed before data_received can look at its size: count it here.
        self._parsed_head_bytes += size
        if self._parsed_head_bytes > self.limits.max_header_bytes:
            raise ProtocolRefusalError(431, "The request headers are too large.", "request_headers_too_large")

    def on_headers_complete(self) -> None:
        self._request_line_read = True
        self._check_conformance()
        if self._from_proxy:
            self._count_forwarded_client()
        self._receiving_head = False
        self._head_bytes = 0
        self.reclaimable.discard(self)
        self._disarm()
        if not self.parser.should_upgrade():
            self._body = ArrivingBody(self.limits.body_min_rate_bytes_per_s)
            self._body.attach(cast("dict[str, Any]", self.scope))  # before uvicorn starts the application on it
        super().on_headers_complete()
        if not self.parser.should_upgrade():
            self._watch_body()

    def on_body(self, body: bytes) -> None:
        self._body_interval_bytes += len(body)
        super().on_body(body)
        self._body_interval_excused |= self.flow.read_paused  # the application's buffer is full: uvicorn stops reading

    def on_message_complete(self) -> None:
        self._disarm()
        self._end_body()  # the last byte is in: whatever counts the body while it arrives stops now
        self._receiving_head = True  # what comes next is the head of another request
        self._request_line_read = False
        super().on_message_complete()

    def _end_body(self) -> None:
        if (body := self._body) is not None:
            self._body = None
            body.end()

    def on_response_complete(self) -> None:
        pipelined = bool(self.pipeline)
        super().on_response_complete()
        if self.transport.is_closing():
            return
        if self._receiving_head and self._head_bytes and self._deadline is None:
            # The next request's head began while this one was in progress: it is due from now.
            self._arm(self.limits.header_timeout_s, self._head_timed_out)
        if not pipelined:
            self.reclaimable.add(self)  # idle until its next request: uvicorn's keep-alive timeout runs

    def _check_conformance(self) -> None:
        """Refuse, as nginx does, the request heads RFC 9112 rejects (see the module docstring)."""
        version = self.parser.get_http_version()
        if version == "0.9":
            raise ProtocolRefusalError(400, "HTTP/0.9 requests are not supported.", "invalid_http_request")
        if version not in {"1.0", "1.1"}:
            raise ProtocolRefusalError(
                505, f"HTTP/{version} is not supported: speak HTTP/1.1.", "http_version_not_supported"
            )
        if self._hosts > 1 or (version == "1.1" and not self._hosts):
            raise ProtocolRefusalError(
                400, "An HTTP/1.1 request needs exactly one Host header.", "invalid_http_request"
            )
        if version == "1.0" and self._transfer_encoding:
            raise ProtocolRefusalError(
                400, "Transfer-Encoding is not allowed in an HTTP/1.0 request.", "invalid_http_request"
            )

    def send_400_response(self, msg: str) -> None:
        self._refuse(ProtocolRefusalError(400, msg, "invalid_http_request"))

    # Deadlines and refusals

    def _request_in_progress(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete

    def _arm(self, delay_s: float, callback: Callable[[], object]) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(delay_s, callback)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _head_timed_out(self) -> None:
        self._deadline = None
        if self._request_in_progress():
            return
        if self._head_bytes == 0 and self.cycle is None:
            self.transport.close()  # connected and never said anything: nobody to answer
            return
        self._refuse(ProtocolRefusalError(408, "The request headers did not arrive in time.", "request_timeout"))

    # The body's deadlines: an interval at a time, and the optional total (``body_timeout_s``).

    def _watch_body(self) -> None:
        timeout_s = self.limits.body_timeout_s
        self._body_due = None if timeout_s is None else self.loop.time() + timeout_s
        self._start_body_interval()

    def _start_body_interval(self) -> None:
        self._body_interval_bytes = 0
        self._body_interval_excused = self._server_not_reading()
        interval_s = self.limits.body_rate_interval_s
        if self._body_due is not None and (left_s := self._body_due - self.loop.time()) <= interval_s:
            self._arm(max(left_s, 0.0), self._body_timed_out)
        else:
            self._arm(interval_s, self._body_interval_ended)

    def _server_not_reading(self) -> bool:
        """Whether the client cannot send the body now: the application has not asked for it yet (the client waits
        for ``100 Continue``), or uvicorn stopped reading (the application's buffer is full, or the request waits
        behind a pipelined one)."""
        cycle = self.cycle
        return self.flow.read_paused or (cycle is not None and cycle.waiting_for_100_continue)

    def _body_interval_ended(self) -> None:
        self._deadline = None
        if (cycle := self._awaiting_body()) is None:
            return
        excused = self._body_interval_excused or self._server_not_reading()
        rate = self.limits.body_min_rate_bytes_per_s if self._body is None else self._body.min_rate_bytes_per_s
        if not excused and self._body_interval_bytes < rate * self.limits.body_rate_interval_s:
            self._refuse_body(cycle, f"The request body arrived slower than {rate} bytes per second.")
        else:
            self._start_body_interval()

    def _body_timed_out(self) -> None:
        self._deadline = None
        if (cycle := self._awaiting_body()) is not None:
            self._refuse_body(cycle, "The request body did not arrive in time.")

    def _awaiting_body(self) -> RequestResponseCycle | None:
        cycle = self.cycle
        return None if cycle is None or not cycle.more_body or cycle.disconnected else cycle

    def _refuse_body(self, cycle: RequestResponseCycle, message: str) -> None:
        if cycle.response_complete:  # answered already; uvicorn drops what still comes, but not at any rate
            self._disarm()
            self.transport.close()
            return
        # The application waits for the rest of the body: _refuse tells it the client went away (uvicorn then drops
        # what it still sends), and answers 408 unless its response has begun.
        self._refuse(ProtocolRefusalError(408, message, "request_timeout"))

    def _refuse_over_capacity(self, target: RequestTarget | None) -> None:
        self.reclaimable.note_refusal(self.loop.time(), len(self.connections) - 1)
        self._refuse(over_capacity(), target)

    def _drop_silent(self, refusal: ProtocolRefusalError) -> None:
        """Close a connection over a cap that sent nothing within the grace, counted as the refusal it would have
        got: a flood of silent sockets shows in the metric as one of requests would."""
        count_refusal("connection", refusal.status_code, refusal.kind)
        self.transport.close()

    def _refuse(self, refusal: ProtocolRefusalError, target: RequestTarget | None = None) -> None:
        """Answer ``refusal`` and close, in the body of the family of ``target`` (default: the request being
        parsed, as far as it is known)."""
        self._disarm()
        self._end_body()  # no more of it will be read
        self.reclaimable.discard(self)
        if self.transport.is_closing():
            return
        count_refusal("connection", refusal.status_code, refusal.kind)
        self._log_refusal(refusal)
        if (cycle := self.cycle) is not None and not cycle.response_complete:
            # A request is in progress here (its body timed out, or one pipelined behind it broke a limit): it is
            # told the client went away, and what it still sends is dropped; a response begun leaves no room.
            cycle.disconnected = True
            cycle.message_event.set()
            if cycle.response_started:
                self.transport.close()
                return
        body = json.dumps(type(self).refusal_bodies(refusal, target or self._request_target())).encode()
        head = [STATUS_LINE[refusal.status_code]]
        head.extend(b"%s: %s\r\n" % (name, value) for name, value in self.server_state.default_headers)
        head.append(b"content-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n" % len(body))
        if refusal.retry_after_s is not None:
            head.append(b"retry-after: %d\r\n" % refusal.retry_after_s)
        self.transport.write(b"".join([*head, b"\r\n", body]))
        self.transport.close()

    def _request_target(self) -> RequestTarget | None:
        """The method and path of the request being parsed, once its target is whole: its head complete, a header of
        it parsed, or bytes after the target parsed."""
        scope: dict[str, Any] | None = getattr(self, "scope", None)  # uvicorn makes one when a request begins
        if scope is not None and not self._receiving_head and (path := scope.get("path")) is not None:
            return scope["method"], path
        if self._receiving_head and (self._request_line_read or self._past_target()):
            return target_of(self.parser.get_method(), self.url)
        return None

    def _past_target(self) -> bool:
        """Whether the parser took more of this head than its method, a space and its target: the target has ended
        (a first header that never ends, say). Blank lines before a request line count too: at worst an unfinished
        target then picks the refusal's body."""
        if not self.url:
            return False
        return self._head_bytes > len(self.parser.get_method()) + 1 + len(self.url)

    def _log_refusal(self, refusal: ProtocolRefusalError) -> None:
        """The refusal's access line, as the application writes one for each answer it gives: the request's method
        and path when its head was read (``-`` before), the status and code it is answered with."""
        scope: dict[str, Any] | None = getattr(self, "scope", None)
        method, path = ("-", "-") if scope is None or self._receiving_head else (scope["method"], scope["path"])
        record = RequestRecord(
            request_id=uuid.uuid4().hex, method=method, path=path, status=refusal.status_code, code=refusal.kind
        )
        log_access(record)


def guarded_http_protocol(
    limits: ConnectionLimits, refusal_bodies: RefusalBodies = openai_bodies
) -> type[GuardedHttpToolsProtocol]:
    """The protocol class to give ``uvicorn.run(http=...)``: :class:`GuardedHttpToolsProtocol` bound to ``limits``,
    to one registry of reclaimable connections shared by all of the server's connections, and to the bodies its
    refusals are answered with (the app's: ``connection_refusals.refusal_bodies(app)``; OpenAI's by default)."""
    return type(
        "GuardedHttpToolsProtocol",
        (GuardedHttpToolsProtocol,),
        {
            "limits": limits,
            "reclaimable": ReclaimableConnections(),
            "per_address": Counter(),
            "refusal_bodies": staticmethod(refusal_bodies),
        },
    )
