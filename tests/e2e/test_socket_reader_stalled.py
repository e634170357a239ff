"""A socket client that stops reading its audio is dropped, not held (``gateway/http/websocket_close.py``): its
session ends "client too slow" after ``server.send_timeout_s``, and its connection, whose close frame could not even be
written, is aborted ``FLUSH_AFTER_CLOSE_S`` later instead of waiting for ever to flush what it holds, which kept its
place under ``server.max_connections_per_address`` (every later request from its address got a 429)."""

from __future__ import annotations

import json
import socket
import time
from typing import TYPE_CHECKING

import httpx
import pytest
from websockets.client import ClientProtocol
from websockets.http11 import Response
from websockets.uri import parse_uri

from gateway.http.websocket_close import FLUSH_AFTER_CLOSE_S
from harness.gateway_process import GatewayProcess

if TYPE_CHECKING:
    from collections.abc import Iterator

SEND_TIMEOUT_S = 0.5


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    config = {
        "server": {"send_timeout_s": SEND_TIMEOUT_S, "max_connections_per_address": 1},
        "engines": {"chattts": None, "tones": {"kind": "synthetic", "workers": 1}},
    }
    with GatewayProcess(config, tmp_path_factory.mktemp("reader-stalled")) as process:
        yield process


def stalled_reader(gateway: GatewayProcess) -> socket.socket:
    """A stream socket asking for minutes of audio, over a socket whose receive buffer is small and never read."""
    uri = parse_uri(gateway.base_url.replace("http://", "ws://") + "/v1/audio/speech/stream")
    protocol = ClientProtocol(uri)
    protocol.send_request(protocol.connect())
    raw = socket.socket()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    raw.connect((uri.host, uri.port))
    raw.sendall(b"".join(protocol.data_to_send()))
    while not any(isinstance(event, Response) for event in protocol.events_received()):
        protocol.receive_data(raw.recv(1))  # byte by byte: nothing past the handshake is read
    assert protocol.handshake_exc is None, protocol.handshake_exc
    protocol.send_text(json.dumps({"type": "session.update", "session": {"model": "tones"}}).encode())
    sentences = "".join(f"Sentence {i} is here, and it is a fairly long one indeed. " for i in range(15))
    for _ in range(4):  # about three minutes of 24 kHz PCM
        protocol.send_text(json.dumps({"type": "input.append", "text": sentences}).encode())
    raw.sendall(b"".join(protocol.data_to_send()))
    return raw


def test_a_client_that_stops_reading_loses_its_connection_and_its_place(gateway: GatewayProcess) -> None:
    held = stalled_reader(gateway)
    try:
        started = time.monotonic()
        with httpx.Client(base_url=gateway.base_url, timeout=5) as http:
            assert http.get("/healthz").status_code == 429  # the address's one connection is the stalled socket's
            deadline = started + SEND_TIMEOUT_S + FLUSH_AFTER_CLOSE_S + 10
            while (status := http.get("/healthz").status_code) == 429 and time.monotonic() < deadline:
                time.sleep(0.5)
        assert status == 200, f"the stalled connection still held its place after {time.monotonic() - started:.1f} s"
        assert '"client too slow"' in gateway.log()
    finally:
        held.close()
