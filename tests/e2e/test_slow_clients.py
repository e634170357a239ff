"""What a tenant's slow clients hold of a live gateway: a body counts among its tenant's ``bodies_in_flight`` until its
last byte reaches the server (not until the application reads it)."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import pytest

from auth.keys import generate_api_key, hash_api_key
from harness.gateway_process import GatewayProcess

if TYPE_CHECKING:
    from collections.abc import Iterator

SINGLE = generate_api_key()  # bodies_in_flight 1
BODY_WAIT_S = 0.5  # limits.body_wait_s, the default
SPEECH = json.dumps({"model": "tones", "input": "Hello.", "voice": "alloy", "response_format": "pcm"}).encode()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    config = {
        "auth": {
            "tenants": [{"name": "single", "api_key_sha256": [hash_api_key(SINGLE)], "limits": {"bodies_in_flight": 1}}]
        },
        "engines": {"tones": {"kind": "synthetic", "workers": 2}},
        "aliases": {},
    }
    with GatewayProcess(config, tmp_path_factory.mktemp("slow-clients")) as process:
        yield process


def speech_head(key: str, length: int = len(SPEECH)) -> bytes:
    return (
        f"POST /v1/audio/speech HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer {key}\r\nConnection: close\r\n"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


def answer_of(sock: socket.socket, timeout_s: float = 10.0) -> tuple[int, bytes]:
    """The status and whole answer of a ``Connection: close`` request."""
    sock.settimeout(timeout_s)
    received = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            received += chunk
    return int(received.split(b" ", 2)[1]), received


def sent_whole(port: int, key: str) -> tuple[int, bytes]:
    """A speech request whose head and body go in one write: the body is in as soon as the head is."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(speech_head(key) + SPEECH)
        return answer_of(sock)


class SlowBody:
    """A speech request whose body is sent a byte at a time, one every ``every_s``, until :meth:`finish`."""

    def __init__(self, port: int, key: str, every_s: float = 0.2) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sent = 1
        self.sock.sendall(speech_head(key) + SPEECH[:1])
        self._every_s = every_s
        self._finish = threading.Event()
        self._thread = threading.Thread(target=self._drip, daemon=True)
        self._thread.start()

    def _drip(self) -> None:
        while not self._finish.wait(self._every_s) and self.sent < len(SPEECH) - 1:
            with contextlib.suppress(OSError):  # refused and closed: the answer says so
                self.sock.sendall(SPEECH[self.sent : self.sent + 1])
            self.sent += 1

    def pause(self) -> None:
        self._finish.set()
        self._thread.join()

    def finish(self) -> tuple[int, bytes]:
        """Send the rest at once; the answer."""
        self.pause()
        with self.sock:
            with contextlib.suppress(OSError):
                self.sock.sendall(SPEECH[self.sent :])
            return answer_of(self.sock)


def error_code(answer: bytes) -> str:
    return str(json.loads(answer.partition(b"\r\n\r\n")[2])["error"]["code"])


def test_a_body_that_has_arrived_holds_no_place_among_bodies_in_flight(gateway: GatewayProcess) -> None:
    """``single`` may have one body arriving. While a body of its drips in, 20 requests whose bodies came with their
    heads are all served: they hold nothing while the app gets round to them (before: each counted until its handler
    read the body, and the dripping body's place was taken, so all 20 got 429). A second dripping body is refused;
    once the first is in, another is let in."""
    slow = SlowBody(gateway.port, SINGLE)
    try:
        time.sleep(0.3)  # its head is in and counted
        with ThreadPoolExecutor(20) as pool:
            statuses = list(pool.map(lambda _: sent_whole(gateway.port, SINGLE)[0], range(20)))
        assert statuses == [200] * 20
        asked = time.monotonic()
        second = SlowBody(gateway.port, SINGLE)
        with second.sock:
            status, answer = answer_of(second.sock)
            second.pause()
        assert (status, error_code(answer)) == (429, "concurrency_limit_exceeded"), answer
        assert b"still sending" in answer
        assert time.monotonic() - asked >= BODY_WAIT_S * 0.9  # it waited for its own body first
    finally:
        status, answer = slow.finish()
    assert status == 200, answer[:300]
    third = SlowBody(gateway.port, SINGLE)
    time.sleep(0.3)
    assert third.finish()[0] == 200


def test_a_body_a_moment_behind_its_head_waits_for_itself_instead_of_a_429(gateway: GatewayProcess) -> None:
    """While ``single``'s one place is held by a dripping body, a request of it whose body follows its head 0.2 s
    later (a client whose own loop is busy writes them apart) waits for its body (``limits.body_wait_s``), which then
    needs no place: it is served (before: 429 as soon as its head was read)."""
    slow = SlowBody(gateway.port, SINGLE)
    try:
        time.sleep(0.3)  # its head is in and counted
        with socket.create_connection(("127.0.0.1", gateway.port)) as sock:
            sock.sendall(speech_head(SINGLE))
            time.sleep(0.2)
            sock.sendall(SPEECH)
            status, answer = answer_of(sock)
        assert status == 200, answer[:300]
    finally:
        assert slow.finish()[0] == 200
