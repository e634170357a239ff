"""What a socket over its budget costs after it is refused, end to end on a real gateway (issue #47, part 2): a client
that ignores the close frame and keeps sending is cut off at once instead of read for uvicorn's 10 s close timeout
(``gateway/http/websocket_close.py``); many sockets of one tenant share the tenant's budget on the replica
(``gateway/sessions/budget.py``); each refusal is counted in ``tts_requests_refused_total{source="socket"}``."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from typing import TYPE_CHECKING, Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.client import ClientProtocol
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Response
from websockets.uri import parse_uri

from auth.keys import generate_api_key, hash_api_key
from harness.gateway_process import GatewayProcess

if TYPE_CHECKING:
    from collections.abc import Iterator

FLOODER_KEY = generate_api_key()
MANY_KEY = generate_api_key()
POLITE_KEY = generate_api_key()
MODEL = "gpt-realtime"
MESSAGES_PER_S = 20  # a socket's, with 1 s of burst
TENANT_MESSAGES_PER_S = 30  # all of one tenant's sockets together
REALTIME = f"/v1/realtime?model={MODEL}"
UVICORN_CLOSE_TIMEOUT_S = 10.0  # how long uvicorn reads a closed socket, waiting for the client's close reply
RETRIEVE = json.dumps({"type": "conversation.item.retrieve", "item_id": "missing", "event_id": "e" * 1000})


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    config = {
        "realtime": {
            "max_socket_messages_per_s": MESSAGES_PER_S,
            "max_tenant_socket_messages_per_s": TENANT_MESSAGES_PER_S,
            "socket_burst_s": 1.0,
        },
        "auth": {
            "tenants": [
                {"name": "flooder", "api_key_sha256": [hash_api_key(FLOODER_KEY)]},
                {"name": "many", "api_key_sha256": [hash_api_key(MANY_KEY)]},
                {"name": "polite", "api_key_sha256": [hash_api_key(POLITE_KEY)]},
            ]
        },
        "engines": {"tones": {"kind": "synthetic", "workers": 1}},
        "aliases": {MODEL: ["tones"]},
    }
    with GatewayProcess(config, tmp_path_factory.mktemp("socket-policy-close")) as process:
        yield process


def ws(gateway: GatewayProcess, path: str) -> str:
    return gateway.base_url.replace("http://", "ws://") + path


def handshake(gateway: GatewayProcess, key: str) -> tuple[socket.socket, ClientProtocol]:
    """A WebSocket opened with websockets' own protocol over a plain socket, so that the test decides what is read:
    after the handshake, nothing (a client that ignores the server's close frame)."""
    uri = parse_uri(ws(gateway, REALTIME))
    protocol = ClientProtocol(uri)
    request = protocol.connect()
    request.headers["Authorization"] = f"Bearer {key}"
    protocol.send_request(request)
    raw = socket.create_connection((uri.host, uri.port), timeout=20)
    raw.sendall(b"".join(protocol.data_to_send()))
    while not any(isinstance(event, Response) for event in protocol.events_received()):
        protocol.receive_data(raw.recv(65536))
    assert protocol.handshake_exc is None, protocol.handshake_exc
    return raw, protocol


def send_until_refused(raw: socket.socket, protocol: ClientProtocol, limit_s: float) -> tuple[float, int]:
    """Send one message after another, reading nothing, until the connection refuses them (reset, broken pipe, or a
    send that blocks past the socket's timeout: the server no longer reads) or ``limit_s``; how long that took from
    the first send, and the bytes sent."""
    started = time.monotonic()
    sent = 0
    try:
        while time.monotonic() - started < limit_s:
            protocol.send_text(RETRIEVE.encode())
            frame = b"".join(protocol.data_to_send())
            raw.sendall(frame)
            sent += len(frame)
    except OSError:
        pass
    return time.monotonic() - started, sent


def test_a_flooder_that_ignores_the_close_is_cut_off_at_once(gateway: GatewayProcess) -> None:
    before = gateway.refusals()[("socket", 429, "rate_limit_exceeded")]
    raw, protocol = handshake(gateway, FLOODER_KEY)
    with raw:
        elapsed_s, sent = send_until_refused(raw, protocol, limit_s=UVICORN_CLOSE_TIMEOUT_S + 5)
    # Before: uvicorn read (and discarded) what came for its whole close timeout, then closed.
    assert elapsed_s < 3.5, f"the server kept reading for {elapsed_s:.1f} s after the close ({sent:,} bytes sent)"
    assert gateway.refusals()[("socket", 429, "rate_limit_exceeded")] == before + 1
    assert "Traceback" not in gateway.log()


async def test_a_client_that_stops_sending_still_gets_the_error_and_the_close(gateway: GatewayProcess) -> None:
    headers = {"Authorization": f"Bearer {POLITE_KEY}"}
    async with connect(ws(gateway, REALTIME), additional_headers=headers) as client:
        for _ in range(MESSAGES_PER_S + 1):
            await client.send(RETRIEVE)
        received = await events_until_closed(client)
    assert client.close_code == 1008
    assert received[-1]["type"] == "error"
    assert received[-1]["error"]["code"] == "rate_limit_exceeded"
    assert "on one connection" in received[-1]["error"]["message"]


async def events_until_closed(client: ClientConnection) -> list[dict[str, Any]]:
    received: list[dict[str, Any]] = []
    with pytest.raises(ConnectionClosed) as closed:
        async with asyncio.timeout(15):
            while True:
                received.append(json.loads(await client.recv()))
    assert closed.value.rcvd is not None, "the server did not send a close frame"
    return received


async def test_a_tenants_sockets_share_its_budget(gateway: GatewayProcess) -> None:
    # Four sockets, each within its own budget (15 messages of its 20), together twice the tenant's 30.
    headers = {"Authorization": f"Bearer {MANY_KEY}"}
    sockets = [await connect(ws(gateway, REALTIME), additional_headers=headers) for _ in range(4)]
    before = gateway.refusals()[("socket", 429, "rate_limit_exceeded")]

    async def send_and_read(client: ClientConnection) -> tuple[int | None, list[dict[str, Any]]]:
        try:
            for _ in range(15):
                await client.send(RETRIEVE)
            received: list[dict[str, Any]] = []
            async with asyncio.timeout(5):
                while len([e for e in received if e.get("type") == "error"]) < 15:
                    received.append(json.loads(await client.recv()))
        except (ConnectionClosed, TimeoutError):
            pass
        finally:
            await client.close()
        return client.close_code, received

    outcomes = await asyncio.gather(*(send_and_read(client) for client in sockets))
    refused = [events for code, events in outcomes if code == 1008]
    assert refused, "the tenant's sockets together sent twice its budget, and none was refused"
    for events in refused:
        last = [e for e in events if e.get("type") == "error"][-1]
        assert last["error"]["code"] == "rate_limit_exceeded"
        assert "on all of your sockets together" in last["error"]["message"]
    answered = sum(1 for _, events in outcomes for e in events if e.get("error", {}).get("code") == "item_not_found")
    assert answered <= TENANT_MESSAGES_PER_S + 10, "more messages served than the tenant's budget (and a refill)"
    assert gateway.refusals()[("socket", 429, "rate_limit_exceeded")] == before + len(refused)
