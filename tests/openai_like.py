"""An OpenAI-compatible speech server that is no engine node (it has no ``/readyz``): the upstream of a front's
``kind: openai`` engine, as OpenAI itself would be, keeping what it was sent."""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["OpenAILike"]


class OpenAILike(ThreadingHTTPServer):
    """An OpenAI-compatible server that is no engine node (no ``/readyz``), keeping the headers it was sent."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _OpenAILikeHandler)
        self.seen: list[dict[str, Any]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):  # a front that stopped while probing: no news
            super().handle_error(request, client_address)


class _OpenAILikeHandler(BaseHTTPRequestHandler):
    server: OpenAILike

    def do_GET(self) -> None:
        self._send(200 if self.path == "/v1/models" else 404, b'{"object": "list", "data": []}')

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        self.server.seen.append({"headers": {k.lower(): v for k, v in self.headers.items()}, "json": body})
        self._send(200, b"\0\0" * 2400)

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass
