"""Request ids and one structured log line per request, written when the response has been sent completely.

The access log line is written when the response has been sent completely (for a stream: after its last chunk), so
it can carry what only the end knows: audio seconds produced, time to first audio byte, the final status. The same
middleware counts the request in the HTTP metrics (``gateway/observability/http_metrics.py``), and a WebSocket there
and in its span by how its handshake was answered: a refusal by the HTTP status the client got.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from typing import TYPE_CHECKING, Any

from litestar import Request
from litestar.enums import ScopeType
from litestar.status_codes import HTTP_101_SWITCHING_PROTOCOLS, HTTP_403_FORBIDDEN, HTTP_500_INTERNAL_SERVER_ERROR

from gateway.http.errors import ResponseTruncatedError, error_response
from gateway.http.request_record import RECORD_KEY, RequestRecord
from gateway.observability.http_metrics import HttpMetrics
from gateway.observability.logs import UNFINISHED_RESPONSE_LOGGED
from lifecycle import naming

if TYPE_CHECKING:
    from collections.abc import Callable

    from litestar.plugins.prometheus import PrometheusConfig
    from litestar.types import ASGIApp, ExceptionHandler, HTTPScope, Message, Receive, Scope, Send

    from gateway.observability.http_metrics import Span
    from gateway.observability.tracing import RequestTrace, Tracing

__all__ = ["REQUEST_ID_HEADER", "log_access", "request_tracking_middleware"]

REQUEST_ID_HEADER = "x-request-id"
_REQUEST_ID_HEADER = REQUEST_ID_HEADER.encode()
_SAFE_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")

access_log = naming.logger("access")


def _request_id(scope: Scope) -> str:
    for name, value in scope.get("headers", ()):
        if name == _REQUEST_ID_HEADER:
            candidate = value.decode("latin-1")
            if _SAFE_REQUEST_ID.match(candidate):  # echo only what cannot inject into logs or headers
                return candidate
    return uuid.uuid4().hex


def request_tracking_middleware(prometheus: PrometheusConfig, tracing: Tracing) -> Callable[[ASGIApp], ASGIApp]:
    """Litestar middleware: accept or make a request id and echo it, make the caller's trace (``traceparent``) or a
    new one current for the request's task, log one JSON line when the response is complete, and count the request
    in the ``<prefix>_request*`` metrics of Litestar's Prometheus middleware.

    One layer instead of two, and the metrics' labelled children looked up once per label set, because this runs
    on every request: the cost of a cache hit is mostly what surrounds it.
    """
    metrics = HttpMetrics(prometheus)

    def wrap(app: ASGIApp) -> ASGIApp:
        async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] == ScopeType.HTTP:
                request_trace = tracing.begin(scope["headers"], f"{scope['method']} {scope['path_template']}")
                await _tracked(app, scope, receive, send, metrics.measure(scope, scope["method"]), request_trace)
            elif scope["type"] == ScopeType.WEBSOCKET:
                request_trace = tracing.begin(scope["headers"], f"WEBSOCKET {scope['path_template']}")
                await _measured(app, scope, receive, send, metrics.measure(scope, "websocket"), request_trace)
            else:
                await app(scope, receive, send)

        return middleware

    return wrap


async def _tracked(  # noqa: PLR0917 - one request's parts
    app: ASGIApp, scope: HTTPScope, receive: Receive, send: Send, span: Span | None, request_trace: RequestTrace
) -> None:
    record = RequestRecord(
        request_id=_request_id(scope), method=scope["method"], path=scope["path"], trace_id=request_trace.trace_id
    )
    scope.setdefault("state", {})[RECORD_KEY] = record
    tracked = _TrackedSend(send, record, span)
    try:
        await app(scope, receive, tracked.send)
    except Exception as exc:
        if not record.status:
            # Raised by a middleware before any response (a refused credential, a JSON body too deep, no service
            # token): answered here, through the route's own table (OpenAI's, or its API family's), so that the
            # answer carries its request id and the access line and the metrics its real status and code.
            await _answer(exc, scope, receive, tracked.send)
        elif not _is_truncation(exc):
            raise  # a failure after the response began that is not a truncation: a bug to see
        else:
            # Logged where it happened; returning with the response incomplete makes uvicorn close the connection
            # without the last chunk, so the client sees the body cut, and no traceback is written.
            record.truncated = True
            UNFINISHED_RESPONSE_LOGGED.set(True)
    finally:
        record.duration_ms = round((time.perf_counter() - record.started) * 1000, 2)
        if span is not None:
            span.end(record.status or 200)
        log_access(record)
        request_trace.end(record.status or 200)


async def _answer(exc: Exception, scope: HTTPScope, receive: Receive, send: Send) -> None:
    request: Request[Any, Any, Any] = Request(scope, receive)
    response = _handler_of(scope, exc)(request, exc)
    await response.to_asgi_response(None, request)(scope, receive, send)


def _handler_of(scope: HTTPScope, exc: Exception) -> ExceptionHandler[Any]:
    """The handler the matched route's exception table has for ``exc`` (its most specific class); the app's (OpenAI's)
    when no route matched."""
    route_handler = scope.get("route_handler")
    table = route_handler.resolve_exception_handlers() if route_handler is not None else {}
    for cls in type(exc).__mro__:
        if (handler := table.get(cls)) is not None:
            return handler
    return error_response


def _is_truncation(exc: BaseException | None) -> bool:
    """Whether ``exc`` is, or was caused by, a :class:`ResponseTruncatedError`: Litestar re-raises an error caught
    after the response started as its own exception, from the streaming response's exception group."""
    while exc is not None:
        if isinstance(exc, ResponseTruncatedError):
            return True
        if isinstance(exc, BaseExceptionGroup):
            return any(_is_truncation(inner) for inner in exc.exceptions)
        exc = exc.__cause__
    return False


async def _measured(  # noqa: PLR0917 - one socket's parts
    app: ASGIApp, scope: Scope, receive: Receive, send: Send, span: Span | None, request_trace: RequestTrace
) -> None:
    handshake = _HandshakeSend(send, span)
    try:
        await app(scope, receive, handshake.send)
    finally:
        status = handshake.status or HTTP_500_INTERNAL_SERVER_ERROR  # unanswered: uvicorn answers 500
        if span is not None:
            # An accepted socket as Litestar's middleware counts one (200: what it ends with is no HTTP status); a
            # refused handshake by the status the client got, so that refusals show by route and status.
            span.end(200 if status == HTTP_101_SWITCHING_PROTOCOLS else status)
        request_trace.end(status)


class _HandshakeSend:
    """One socket's ``send``: notes the HTTP status its handshake was answered with, and when a refusal was sent."""

    __slots__ = ("_send", "_span", "status")

    def __init__(self, send: Send, span: Span | None) -> None:
        self._send = send
        self._span = span
        self.status: int | None = None

    async def send(self, message: Message) -> None:
        if self.status is None:
            self._note_answer(message)
        elif message["type"] == "websocket.http.response.body" and not message.get("more_body", False):
            self._body_sent()
        await self._send(message)

    def _note_answer(self, message: Message) -> None:
        if message["type"] == "websocket.accept":
            self.status = HTTP_101_SWITCHING_PROTOCOLS
        elif message["type"] == "websocket.close":  # closed before it was accepted: the server answers 403
            self.status = HTTP_403_FORBIDDEN
            self._body_sent()
        elif message["type"] == "websocket.http.response.start":  # refused with an HTTP answer (a denial response)
            self.status = message["status"]

    def _body_sent(self) -> None:
        if self._span is not None:
            self._span.body_sent()


class _TrackedSend:
    """One response's ``send``: notes the status and when the body went, and adds the request id header."""

    __slots__ = ("_record", "_send", "_span")

    def __init__(self, send: Send, record: RequestRecord, span: Span | None) -> None:
        self._send = send
        self._record = record
        self._span = span

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self._record.status = message["status"]
            headers = list(message.get("headers", ()))
            headers.append((_REQUEST_ID_HEADER, self._record.request_id.encode()))
            message = {**message, "headers": headers}
        elif message["type"] == "http.response.body" and self._span is not None:
            self._span.body_sent()
        await self._send(message)


def log_access(record: RequestRecord) -> None:
    """Write ``record`` as its request's access line (also for refusals made below the application)."""
    if not access_log.isEnabledFor(logging.INFO):
        return  # nothing to build: at ``log_level: warning`` a request costs no log line at all
    # ``handle`` a record made here rather than ``info()``, which would also walk the stack for the caller's file
    # and line, which the JSON lines never show.
    access_log.handle(
        access_log.makeRecord(
            access_log.name, logging.INFO, "", 0, "request", (), None, extra={"record": record.as_log()}
        )
    )
