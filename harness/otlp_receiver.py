"""An OTLP/HTTP traces receiver on loopback: what a collector would be, for the tests and the tracing bench."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

if TYPE_CHECKING:
    from collections.abc import Iterator

    from opentelemetry.proto.trace.v1.trace_pb2 import Span

__all__ = ["OtlpReceiver"]


class OtlpReceiver(ThreadingHTTPServer):
    """Keeps every span it is sent, with its service's name; serves in a thread of its own while used as a context."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _ExportHandler)
        self.spans: list[tuple[str, Span]] = []
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1/traces"

    def of_trace(self, trace_id: str) -> list[tuple[str, Span]]:
        """``(service name, span)`` of each span received of the trace ``trace_id`` (32 hex digits)."""
        with self.lock:
            return [(service, span) for service, span in self.spans if span.trace_id.hex() == trace_id]

    def __enter__(self) -> OtlpReceiver:
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *_: object) -> None:
        self.shutdown()
        self.server_close()


class _ExportHandler(BaseHTTPRequestHandler):
    server: OtlpReceiver

    def do_POST(self) -> None:
        export = ExportTraceServiceRequest.FromString(self.rfile.read(int(self.headers["Content-Length"])))
        received = list(_spans(export))
        with self.server.lock:
            self.server.spans.extend(received)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_: Any) -> None:
        pass  # a line per export on stderr would bury the test's output


def _spans(export: ExportTraceServiceRequest) -> Iterator[tuple[str, Span]]:
    for resource_spans in export.resource_spans:
        attributes = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                yield attributes["service.name"], span
