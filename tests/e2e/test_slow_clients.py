"""What a tenant's slow clients hold of a live gateway: a body counts among its tenant's ``bodies_in_flight`` until its
last byte reaches the server (not until the application reads it), and a tenant's own body minimum rate and realtime
idle timeout (``limits.body_min_rate_bytes_per_s``, ``limits.session_idle_timeout_s``) hold for its next connections
as soon as the admin API changes them."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from websockets.asyncio.client import connect

from auth.keys import generate_api_key, hash_api_key
from harness.gateway_process import GatewayProcess
from tests.realtime_client import Session

if TYPE_CHECKING:
    from collections.abc import Iterator

ADMIN_TOKEN = "slow-clients-admin-" + uuid.uuid4().hex
SINGLE = generate_api_key()  # bodies_in_flight 1, and a minimum rate of 1 B/s so that a held body is not cut
PLAIN = generate_api_key()  # the server's minimum rate and idle timeout
RATE_INTERVAL_S = 1.0
SERVER_MIN_RATE = 1000  # bytes per second
SERVER_IDLE_S = 30.0
BODY_WAIT_S = 0.5  # limits.body_wait_s, the default
SPEECH = json.dumps({"model": "tones", "input": "Hello.", "voice": "alloy", "response_format": "pcm"}).encode()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    config = {
        "server": {"body_min_rate_bytes_per_s": SERVER_MIN_RATE, "body_rate_interval_s": RATE_INTERVAL_S},
        "realtime": {"idle_timeout_s": SERVER_IDLE_S},
        "auth": {
            "admin_token": ADMIN_TOKEN,
            "tenants": [
                {
                    "name": "single",
                    "api_key_sha256": [hash_api_key(SINGLE)],
                    "limits": {"bodies_in_flight": 1, "body_min_rate_bytes_per_s": 1},
                },
                {"name": "plain", "api_key_sha256": [hash_api_key(PLAIN)]},
            ],
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


def trickled(port: int, key: str, bytes_per_s: int, seconds: float = 2.5) -> tuple[int, bytes]:
    """A speech request whose body (``seconds`` worth at ``bytes_per_s``, JSON padded with spaces) is written a tenth
    of a second's worth at a time."""
    length = int(bytes_per_s * seconds)
    body = SPEECH[:-1] + b" " * (length - len(SPEECH)) + b"}"
    piece = bytes_per_s // 10
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(speech_head(key, len(body)))
        for start in range(0, len(body), piece):
            try:
                sock.sendall(body[start : start + piece])
            except OSError:  # cut: the answer says why
                break
            time.sleep(0.1)
        return answer_of(sock)


def admin_sets(gateway: GatewayProcess, name: str, limits: dict[str, Any]) -> str:
    """Create or replace tenant ``name`` with ``limits``; a new key of it."""
    admin = {"authorization": f"Bearer {ADMIN_TOKEN}"}
    with httpx.Client(base_url=gateway.base_url, headers=admin, timeout=10) as client:
        tenant = client.post("/admin/tenants", json={"name": name, "limits": limits})
        assert tenant.status_code == 201, tenant.text
        assert {field: tenant.json()["limits"][field] for field in limits} == limits  # shown in its limits
        created = client.post(f"/admin/tenants/{name}/keys")
        assert created.status_code == 201, created.text
        return str(created.json()["key"])


def test_a_tenants_minimum_body_rate_holds_and_changes_without_a_restart(gateway: GatewayProcess) -> None:
    """A body at 400 B/s: cut by the server's 1,000 B/s for a tenant without its own rate, served for one whose rate
    is 100 B/s, and cut again on that tenant's next connection once the admin API raises its rate to 2,000 B/s."""
    status, answer = trickled(gateway.port, PLAIN, 400)
    assert (status, error_code(answer)) == (408, "request_timeout")
    assert b"slower than 1000 bytes per second" in answer
    key = admin_sets(gateway, "phones", {"body_min_rate_bytes_per_s": 100})
    status, answer = trickled(gateway.port, key, 400)
    assert status == 200, answer[:300]
    admin_sets(gateway, "phones", {"body_min_rate_bytes_per_s": 2000})
    status, answer = trickled(gateway.port, key, 400)
    assert (status, error_code(answer)) == (408, "request_timeout")
    assert b"slower than 2000 bytes per second" in answer


@pytest.mark.parametrize("path", ["/v1/audio/speech/stream", "/v1/realtime?model=tones"])
async def test_a_tenants_idle_timeout_holds_and_changes_without_a_restart(gateway: GatewayProcess, path: str) -> None:
    """Both WebSocket dialects: a session of a tenant whose idle timeout is 0.5 s is closed idle after about that
    (the server's is 30 s); once the admin API lifts the tenant's own, its next session is not."""
    key = admin_sets(gateway, f"idle-{len(path)}", {"session_idle_timeout_s": 0.5})
    url = gateway.base_url.replace("http://", "ws://") + path
    headers = {"authorization": f"Bearer {key}"}
    async with connect(url, additional_headers=headers) as socket_:
        session = Session(socket_)
        opened = time.perf_counter()
        await session.until_closed(timeout_s=10)
        idle_for = time.perf_counter() - opened
        error = next(event for _, event in session.events if event["type"] == "error")["error"]
    assert error["code"] == "session_idle_timeout"
    assert "idle for 0.5 s" in error["message"]
    assert socket_.close_code == 1000 and 0.4 <= idle_for < 3
    admin_sets(gateway, f"idle-{len(path)}", {"session_idle_timeout_s": None})
    async with connect(url, additional_headers=headers) as socket_:
        session = Session(socket_)
        with contextlib.suppress(TimeoutError):
            await session.until_closed(timeout_s=2)
        assert socket_.close_code is None  # still open after four times the old timeout
