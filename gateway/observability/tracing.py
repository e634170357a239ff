"""W3C trace context for every request, and OpenTelemetry spans when an OTLP endpoint is configured.

A request's ``traceparent`` is read (or, when it has none, a trace id is made), kept in OpenTelemetry's context for
the request's whole task, written as ``trace_id`` on every log line the request causes (``logs.py``) and passed on to
an engine node (``engines/remote/backend.py`` injects it), whose own lines then carry the same id.

Spans are made only when ``tracing.otlp_endpoint`` is set: then OpenTelemetry's SDK exports them over OTLP/HTTP
(a server span per request, children for what :func:`span` wraps). Unset, the OpenTelemetry API is used alone: no
span objects, no exporter; a request costs a header lookup and two context switches.
"""

from __future__ import annotations

import secrets
from contextlib import contextmanager
from typing import TYPE_CHECKING

from litestar.status_codes import HTTP_500_INTERNAL_SERVER_ERROR
from opentelemetry import context, trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, StatusCode, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

    from opentelemetry.trace import Span, Tracer

__all__ = ["RequestTrace", "Tracing", "TracingSettings", "current_trace_id", "span"]

_PROPAGATOR = TraceContextTextMapPropagator()
_TRACE_HEADERS = frozenset({b"traceparent", b"tracestate"})
_TRACER_NAME = "chattts_gateway"
_TRACER_KEY = context.create_key("chattts_gateway.tracer")
"""Where the request's context keeps the tracer its child spans come from (each app has its own provider)."""


class TracingSettings(BaseModel):
    """Trace context and OpenTelemetry spans."""

    model_config = ConfigDict(extra="forbid")

    otlp_endpoint: str | None = None
    """Where spans are exported over OTLP/HTTP (protobuf), e.g. ``http://otel-collector:4318/v1/traces``. Unset (the
    default): no spans are made; ``traceparent`` is still read, passed on to engine nodes and logged as
    ``trace_id``."""
    service_name: str = "chattts-gateway"
    """The ``service.name`` of the exported spans (e.g. ``chattts-gateway-node`` on engine nodes)."""
    export_delay_ms: int = Field(default=5000, ge=10, le=60_000)
    """How long finished spans wait to be exported together (OpenTelemetry's batch processor's schedule delay)."""


class RequestTrace:
    """One request's place in its trace, current in its task from :meth:`Tracing.begin` until :meth:`end`."""

    __slots__ = ("_span", "_token", "trace_id")

    def __init__(self, span: Span, token: object) -> None:
        self._span = span
        self._token = token
        self.trace_id = format(span.get_span_context().trace_id, "032x")

    def end(self, status: int) -> None:
        """End the request's span with the HTTP status its client got (a WebSocket's: 101, or its refusal's)."""
        if self._span.is_recording():
            self._span.set_attribute("http.response.status_code", status)
            if status >= HTTP_500_INTERNAL_SERVER_ERROR:
                # OpenTelemetry's HTTP conventions for a server span: a 5xx is an error, named by its code; a 4xx is
                # the client's, and leaves the status unset.
                self._span.set_attribute("error.type", str(status))
                self._span.set_status(StatusCode.ERROR)
            self._span.end()
        context.detach(self._token)  # type: ignore[arg-type]  # the token attach gave


class Tracing:
    """The process's tracing: spans exported when ``settings.otlp_endpoint`` is set, trace context either way."""

    def __init__(self, settings: TracingSettings) -> None:
        self._tracer: Tracer | None = None
        self._shutdown: Callable[[], None] | None = None
        if settings.otlp_endpoint is not None:
            self._tracer, self._shutdown = _exporting_tracer(settings)

    def begin(self, headers: Iterable[tuple[bytes, bytes]], name: str) -> RequestTrace:
        """Make the request's trace current in this task: its caller's ``traceparent``, or a new trace."""
        parent = _PROPAGATOR.extract({k.decode(): v.decode("latin-1") for k, v in headers if k in _TRACE_HEADERS})
        if self._tracer is not None:
            request_span: Span = self._tracer.start_span(name, context=parent, kind=SpanKind.SERVER)
            parent = context.set_value(_TRACER_KEY, self._tracer, parent)
        else:
            request_span = trace.get_current_span(parent)
            if not request_span.get_span_context().is_valid:
                request_span = NonRecordingSpan(_new_span_context())
        return RequestTrace(request_span, context.attach(trace.set_span_in_context(request_span, parent)))

    def close(self) -> None:
        """Export what is left (at the gateway's shutdown)."""
        if self._shutdown is not None:
            self._shutdown()


@contextmanager
def span(name: str, *, current: bool = True) -> Iterator[None]:
    """A child span of the current request's around the block, when its spans are exported; nothing otherwise.

    ``current=False`` for a block that yields (an async generator or context manager that hands its caller control
    while open): its span is not made current, which would leak into the caller's context; what the block calls
    then hangs under the request's span, not this one.
    """
    tracer: Tracer | None = context.get_value(_TRACER_KEY)  # type: ignore[assignment]  # only begin sets it
    if tracer is None:
        yield
    elif current:
        with tracer.start_as_current_span(name):
            yield
    else:
        child = tracer.start_span(name)
        try:
            yield
        finally:
            child.end()


def current_trace_id() -> str | None:
    """The trace id of the request this task serves (32 hex digits), if any."""
    span_context = trace.get_current_span().get_span_context()
    return format(span_context.trace_id, "032x") if span_context.is_valid else None


def _new_span_context() -> SpanContext:
    # Not sampled: nothing records it; it only names the trace in logs and on the hop to an engine node.
    return SpanContext(
        trace_id=secrets.randbits(128) or 1,
        span_id=secrets.randbits(64) or 1,
        is_remote=False,
        trace_flags=TraceFlags(TraceFlags.DEFAULT),
    )


def _exporting_tracer(settings: TracingSettings) -> tuple[Tracer, Callable[[], None]]:
    # Imported only when spans are exported: the SDK and the exporter (protobuf) cost start-up time otherwise.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # noqa: PLC0415
    from opentelemetry.sdk.resources import Resource  # noqa: PLC0415
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
    from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: PLC0415

    # A provider of our own rather than the global one: it can be set once per process, and tests build many apps.
    provider = TracerProvider(resource=Resource.create({"service.name": settings.service_name}))
    exporter = OTLPSpanExporter(endpoint=settings.otlp_endpoint)
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=settings.export_delay_ms))
    return provider.get_tracer(_TRACER_NAME), provider.shutdown
