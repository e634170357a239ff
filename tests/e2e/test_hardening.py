"""Hardening (issues #14 and #23), against real gateway processes: connection-level limits in front of everything,
per-address limits, the admin API's guard, and error paths and logs.

Each gateway has what its tests need: ``guarded`` (short header timeout, a fast body rate check and a body total,
debug logging, one tenant), ``crowded`` (started under a 256 open-file limit), ``capped`` (four connections at most),
``administered`` (an admin token and a Redis of its own, stopped for the outage test), ``locked`` (eight connections,
for the slot-exhaustion attack), ``per_address`` (three connections per address), ``proxied`` (127.0.0.1 a trusted
proxy) and ``sentried`` (keys in a Redis of its own, five refused credentials per address). Raw sockets speak
HTTP/1.1 where clients would not misbehave; other client addresses are 127.0.0.0/8's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import httpx
import psutil
import pytest
import yaml
from redis import Redis
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from auth.keys import generate_api_key, hash_api_key
from engines.synthetic import voice_frequency
from harness.gateway_process import CONSOLE_SCRIPT, GatewayProcess, exact_engines, free_port
from tests.audio_decode import DURATION_TOLERANCE_S, decode_audio, dominant_frequency
from tests.redis_server import RedisServer
from tests.starting import running_together
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

KEY = generate_api_key()
TWO_BODIES_KEY = generate_api_key()
ADMIN_TOKEN = "hardening-admin-" + uuid.uuid4().hex  # 48 characters
HEADER_TIMEOUT_S = 2.0
BODY_MIN_RATE = 2000  # bytes per second, over each interval
BODY_RATE_INTERVAL_S = 1.0
BODY_TIMEOUT_S = 5.0
KEEP_ALIVE_TIMEOUT_S = 1
MiB = 1 << 20
NESTED_1000 = "[" * 1000 + "]" * 1000


def guarded_config() -> dict[str, Any]:
    return {
        "server": {
            "header_timeout_s": HEADER_TIMEOUT_S,
            "body_min_rate_bytes_per_s": BODY_MIN_RATE,
            "body_rate_interval_s": BODY_RATE_INTERVAL_S,
            "body_timeout_s": BODY_TIMEOUT_S,
            "keep_alive_timeout_s": KEEP_ALIVE_TIMEOUT_S,
            "log_level": "debug",
        },
        "auth": {"tenants": [{"name": "acme", "api_key_sha256": [hash_api_key(KEY)]}]},
        "engines": {
            "tones": {"kind": "synthetic", "workers": 1, "options": {"seconds_per_char": 0.02}},
            # Real time, small chunks: a stream is still running when its worker is killed.
            "steady": {"kind": "synthetic", "workers": 1, "options": {"rtf": 1.0, "chunk_ms": 20}},
        },
        "aliases": {},
    }


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with GatewayProcess(guarded_config(), tmp_path_factory.mktemp("guarded")) as process:
        yield process


def bearer(key: str = KEY) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def speech(model: str, text: str) -> dict[str, Any]:
    return {"model": model, "input": text, "voice": "alloy", "response_format": "pcm"}


# ---------------------------------------------------------------------------------------------------- raw HTTP
def read_until_closed(sock: socket.socket, timeout_s: float) -> bytes:
    """Everything the server sends until it closes the connection; fails if it is still open after ``timeout_s``."""
    sock.settimeout(timeout_s)
    received = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            received += chunk
    return received


def exchange(port: int, data: bytes, timeout_s: float = 10.0) -> tuple[float, bytes]:
    """Send ``data`` on a new connection; the seconds until the server closed it, and what it answered."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        started = time.monotonic()
        sock.sendall(data)
        received = read_until_closed(sock, timeout_s)
        return time.monotonic() - started, received


def parse_response(raw: bytes) -> tuple[int, dict[str, str], Any]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
    return int(status_line.split()[1]), headers, json.loads(body) if body else None


def assert_openai_error(raw: bytes, status: int, code: str) -> dict[str, str]:
    got_status, headers, body = parse_response(raw)
    assert got_status == status, raw
    assert headers["content-type"].startswith("application/json")
    assert set(body["error"]) == {"message", "type", "param", "code"} and body["error"]["code"] == code
    return headers


def assert_elevenlabs_error(raw: bytes, status: int, code: str, message: str) -> dict[str, str]:
    """ElevenLabs' error body exactly (``{"detail": {"status", "message"}}``), as its routes answer errors."""
    got_status, headers, body = parse_response(raw)
    assert got_status == status, raw
    assert headers["content-type"].startswith("application/json")
    assert body == {"detail": {"status": code, "message": message}}
    return headers


def head(method: str, path: str, *extra: str, content_length: int | None = None) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: gateway", *extra]
    if content_length is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {content_length}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def log_lines(gateway: GatewayProcess) -> list[str]:
    return [line for line in gateway.log().splitlines() if line.strip()]


def access_lines(gateway: GatewayProcess, status: int, code: str) -> list[dict[str, Any]]:
    """The access log lines of answers with ``status`` and error ``code``."""
    lines = []
    for line in log_lines(gateway):
        with contextlib.suppress(ValueError):
            entry = json.loads(line)
            if entry.get("logger") == "chattts_gateway.access" and (entry.get("status"), entry.get("code")) == (
                status,
                code,
            ):
                lines.append(entry)
    return lines


def wait_for_log(gateway: GatewayProcess, predicate: Any, timeout_s: float = 10.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in log_lines(gateway):
            with contextlib.suppress(ValueError):
                if predicate(entry := json.loads(line)):
                    return dict(entry)
        time.sleep(0.05)
    pytest.fail(f"no such log line after {timeout_s} s:\n{gateway.log()[-3000:]}")


# ------------------------------------------------------------------------------------- 1. request heads and bodies
def send_endless_header(port: int, limit_bytes: int) -> int:
    """Send one header value without end; the bytes the kernel took before the server cut the connection off."""
    sent = 0
    chunk = b"a" * 65536
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.settimeout(10)
        try:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: gateway\r\nX-Endless: ")
            while sent < limit_bytes:
                sock.sendall(chunk)
                sent += len(chunk)
        except OSError:  # reset or broken pipe: the server closed the connection
            return sent
    pytest.fail(f"the server took {sent} bytes of one header")


def test_ten_endless_headers_are_cut_off_and_server_memory_stays_within_16_mib(guarded: GatewayProcess) -> None:
    """Ten clients each try to send a 64 MiB header. Must hold: every one is cut off before it has sent it all (the
    server reads at most ``max_header_bytes`` and one socket read past it, then closes), and the server's resident
    memory, sampled throughout, never grows by more than 16 MiB (before the limits: +118 MB for ten 10 MB headers)."""
    assert guarded.process is not None
    server = psutil.Process(guarded.process.pid)
    baseline = server.memory_info().rss
    with ThreadPoolExecutor(10) as pool:
        clients = [pool.submit(send_endless_header, guarded.port, 64 * MiB) for _ in range(10)]
        peak = baseline
        while not all(client.done() for client in clients):
            peak = max(peak, server.memory_info().rss)
            time.sleep(0.01)
        sent = [client.result() for client in clients]
    assert all(amount < 64 * MiB for amount in sent)
    assert peak - baseline < 16 * MiB, f"RSS grew by {(peak - baseline) / MiB:.1f} MiB"
    assert httpx.get(f"{guarded.base_url}/healthz", timeout=5).status_code == 200


@pytest.mark.parametrize(
    "request_head",
    [
        head("GET", "/healthz", "X-Big: " + "a" * 40_000),
        head("GET", "/healthz", *(f"X-Header-{n}: {n}" for n in range(120))),
    ],
    ids=["one-40-kb-header", "120-headers"],
)
def test_oversized_heads_get_431_with_openai_body(guarded: GatewayProcess, request_head: bytes) -> None:
    _, answer = exchange(guarded.port, request_head)
    assert_openai_error(answer, 431, "request_headers_too_large")


def test_pipelined_requests_are_all_answered_in_order(guarded: GatewayProcess) -> None:
    """The guard follows uvicorn's request life (pipelining included): limits reset with every request."""
    requests = b"".join(
        head("GET", "/healthz", f"X-Request-Id: pipelined-{n}", *(f"X-Filler-{i}: {'a' * 200}" for i in range(60)))
        for n in range(3)
    )  # three heads of 12+ kB each: together over max_header_bytes
    _, answer = exchange(guarded.port, requests + head("GET", "/healthz", "Connection: close"))
    assert answer.count(b"HTTP/1.1 200 OK") == 4
    assert [f"pipelined-{n}".encode() in answer for n in range(3)] == [True] * 3
    assert answer.index(b"pipelined-0") < answer.index(b"pipelined-1") < answer.index(b"pipelined-2")


def test_a_malformed_request_gets_400_with_openai_body(guarded: GatewayProcess) -> None:
    """Before: uvicorn's plain-text "Invalid HTTP request received."."""
    _, answer = exchange(guarded.port, b"NOT HTTP AT ALL\r\n\r\n")
    assert_openai_error(answer, 400, "invalid_http_request")


@pytest.mark.parametrize(
    ("request_head", "status", "code"),
    [
        (b"GET /healthz HTTP/1.1\r\n\r\n", 400, "invalid_http_request"),  # HTTP/1.1 without Host
        (b"GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, "invalid_http_request"),
        (b"GET /healthz HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n", 400, "invalid_http_request"),
        (b"GET /healthz HTTP/2.0\r\nHost: gateway\r\n\r\n", 505, "http_version_not_supported"),
        (b"GET /healthz HTTP/1.2\r\nHost: gateway\r\n\r\n", 505, "http_version_not_supported"),
        (b"GET /healthz\r\n\r\n", 400, "invalid_http_request"),  # an HTTP/0.9-style request line
        (
            b"POST /healthz HTTP/1.0\r\nHost: gateway\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            400,
            "invalid_http_request",
        ),
    ],
    ids=["no-host", "two-hosts", "two-hosts-http-1.0", "http-2.0", "http-1.2", "http-0.9", "chunked-http-1.0"],
)
def test_heads_rfc_9112_refuses_get_what_nginx_answers(
    guarded: GatewayProcess, request_head: bytes, status: int, code: str
) -> None:
    """Before: every one of these was served (a 200 for /healthz)."""
    before = guarded.refusals()
    _, answer = exchange(guarded.port, request_head)
    assert_openai_error(answer, status, code)
    assert guarded.refusals() - before == {("connection", status, code): 1}


ELEVENLABS_SPEECH = "/v1/text-to-speech/alloy"
HEAD_TOO_LARGE = "The request headers are too large."
ONE_HOST = "An HTTP/1.1 request needs exactly one Host header."


@pytest.mark.parametrize(
    ("request_head", "status", "code", "message"),
    [
        (head("POST", ELEVENLABS_SPEECH, "X-Big: " + "a" * 40_000), 431, "request_headers_too_large", HEAD_TOO_LARGE),
        (
            head("GET", "/v1/voices", *(f"X-Header-{n}: {n}" for n in range(120))),
            431,
            "request_headers_too_large",
            "A request may carry at most 100 headers.",
        ),
        (f"POST {ELEVENLABS_SPEECH} HTTP/1.1\r\n\r\n".encode(), 400, "invalid_http_request", ONE_HOST),
        (b"GET /v1/voices HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, "invalid_http_request", ONE_HOST),
        (
            b"GET /v1/user/subscription HTTP/2.0\r\nHost: gateway\r\n\r\n",
            505,
            "http_version_not_supported",
            "HTTP/2.0 is not supported: speak HTTP/1.1.",
        ),
    ],
    ids=["one-40-kb-header", "120-headers", "no-host", "two-hosts", "http-2.0"],
)
def test_refusals_on_elevenlabs_paths_carry_elevenlabs_body(
    guarded: GatewayProcess, request_head: bytes, status: int, code: str, message: str
) -> None:
    """The protocol's refusals of a request to one of ElevenLabs' paths answer in ElevenLabs' shape, as its routes
    answer errors (before: OpenAI's ``{"error": ...}``, which ElevenLabs' SDKs do not read); counted as before."""
    before = guarded.refusals()
    _, answer = exchange(guarded.port, request_head)
    assert_elevenlabs_error(answer, status, code, message)
    assert guarded.refusals() - before == {("connection", status, code): 1}


def test_a_head_to_an_elevenlabs_path_that_never_completes_gets_its_408(guarded: GatewayProcess) -> None:
    _, answer = exchange(guarded.port, b"GET /v1/voices HTTP/1.1\r\nHost: gateway\r\nX-Slow: ")
    assert_elevenlabs_error(answer, 408, "request_timeout", "The request headers did not arrive in time.")


def test_a_stalled_body_to_an_elevenlabs_path_gets_its_408(guarded: GatewayProcess) -> None:
    request = head("POST", ELEVENLABS_SPEECH, f"xi-api-key: {KEY}", content_length=1000) + b'{"text": "slow'
    _, answer = exchange(guarded.port, request)
    message = f"The request body arrived slower than {BODY_MIN_RATE} bytes per second."
    assert_elevenlabs_error(answer, 408, "request_timeout", message)


def test_a_first_header_that_never_ends_is_refused_in_its_paths_body(guarded: GatewayProcess) -> None:
    """The request line is whole, though no header of it ever is: its path is known."""
    _, answer = exchange(guarded.port, b"GET /v1/voices HTTP/1.1\r\nX-Big: " + b"a" * 40_000)
    assert_elevenlabs_error(answer, 431, "request_headers_too_large", HEAD_TOO_LARGE)


@pytest.mark.parametrize(
    ("request_head", "status", "code"),
    [
        (b"NOT HTTP AT ALL\r\n\r\n", 400, "invalid_http_request"),
        (b"GET /v1/voices/" + b"a" * 40_000, 431, "request_headers_too_large"),  # a target that never ends
        (head("GET", "/v1/nowhere", "X-Big: " + "a" * 40_000), 431, "request_headers_too_large"),  # routed nowhere
    ],
    ids=["garbled-line", "endless-target", "unrouted-path"],
)
def test_refusals_without_a_familys_path_keep_openai_body(
    guarded: GatewayProcess, request_head: bytes, status: int, code: str
) -> None:
    """A refusal before its path is known, and one of a request the app routes nowhere (its own 404 is OpenAI's),
    answer in OpenAI's body."""
    _, answer = exchange(guarded.port, request_head)
    assert_openai_error(answer, status, code)


def test_http_1_0_without_host_is_still_served(guarded: GatewayProcess) -> None:
    _, answer = exchange(guarded.port, b"GET /healthz HTTP/1.0\r\n\r\n")
    assert parse_response(answer)[0] == 200


def test_a_head_trickled_behind_a_response_in_progress_is_cut_off_at_its_deadline(guarded: GatewayProcess) -> None:
    """Before: a second head sent a byte every half second behind a request still being answered had no deadline,
    and the connection stayed open for as long as the bytes came (here 100 s)."""
    body = json.dumps(speech("steady", "x" * 40)).encode()  # 2 s of audio at real time: in progress for 2 s
    first = head("POST", "/v1/audio/speech", *[f"{k}: {v}" for k, v in bearer().items()], content_length=len(body))
    trickled = b"GET /healthz HTTP/1.1\r\nHost: gateway\r\nX-Trickle: " + b"a" * 200
    received, closed = b"", False
    with socket.create_connection(("127.0.0.1", guarded.port)) as sock:
        started = time.monotonic()
        sock.sendall(first + body + trickled[:1])
        sock.settimeout(0.5)
        for byte in trickled[1:]:  # a byte every half second, for longer than the response and its deadline
            try:
                with contextlib.suppress(TimeoutError):
                    if not (chunk := sock.recv(65536)):
                        closed = True
                        break
                    received += chunk
                sock.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):  # closed while a byte was on its way
                closed = True
                break
        elapsed = time.monotonic() - started
    assert received.startswith(b"HTTP/1.1 200 OK")
    assert closed, "the connection was still open when the trickle ended"
    assert elapsed < 2.0 + HEADER_TIMEOUT_S + 3  # the response, then the header timeout (slack for a busy machine)


def test_a_head_that_never_completes_gets_408_after_the_header_timeout(guarded: GatewayProcess) -> None:
    elapsed, answer = exchange(guarded.port, b"GET /healthz HTTP/1.1\r\nHost: gateway\r\nX-Slow: ")
    assert_openai_error(answer, 408, "request_timeout")
    assert HEADER_TIMEOUT_S * 0.9 <= elapsed < HEADER_TIMEOUT_S + 5


def test_a_connection_that_sends_nothing_is_closed_after_the_header_timeout(guarded: GatewayProcess) -> None:
    elapsed, answer = exchange(guarded.port, b"")
    assert answer == b""
    assert HEADER_TIMEOUT_S * 0.9 <= elapsed < HEADER_TIMEOUT_S + 5


def test_an_idle_kept_alive_connection_is_closed_after_the_keep_alive_timeout(guarded: GatewayProcess) -> None:
    with socket.create_connection(("127.0.0.1", guarded.port)) as sock:
        sock.sendall(head("GET", "/healthz"))
        received = read_until_closed(sock, timeout_s=KEEP_ALIVE_TIMEOUT_S + 5)  # answered, then closed when idle
    status, headers, body = parse_response(received)
    assert status == 200 and body == {"status": "ok"} and "close" not in headers.get("connection", "")


def test_a_stalled_body_gets_408_after_one_rate_interval_without_a_traceback(guarded: GatewayProcess) -> None:
    body_start = b'{"model": "tones", "input": "slow'
    elapsed, answer = exchange(
        guarded.port, head("POST", "/v1/audio/speech", f"Authorization: Bearer {KEY}", content_length=1000) + body_start
    )
    assert_openai_error(answer, 408, "request_timeout")
    assert BODY_RATE_INTERVAL_S * 0.9 <= elapsed < BODY_RATE_INTERVAL_S + 3
    wait_for_log(guarded, lambda entry: entry.get("path") == "/v1/audio/speech" and entry.get("status") == 499)
    assert "Traceback" not in guarded.log()


def trickle(port: int, request_head: bytes, body: bytes, piece: int, every_s: float) -> tuple[float, bytes, int]:
    """Send ``request_head``, then ``body`` ``piece`` bytes every ``every_s`` seconds until it is sent or the server
    answers. Returns the seconds until the server answered (or closed), what it answered, and the body bytes sent."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        started = time.monotonic()
        sock.sendall(request_head)
        sent = 0
        while sent < len(body) and not select.select([sock], [], [], every_s)[0]:
            try:
                sock.sendall(body[sent : sent + piece])
            except OSError:  # closed while a piece was on its way
                break
            sent = min(sent + piece, len(body))
        answered_s = time.monotonic() - started
        return answered_s, read_until_closed(sock, timeout_s=10), sent


def speech_head(body_length: int) -> bytes:
    return head(
        "POST", "/v1/audio/speech", f"Authorization: Bearer {KEY}", "Connection: close", content_length=body_length
    )


def test_a_dripped_body_is_cut_after_one_rate_interval(guarded: GatewayProcess) -> None:
    """A "slow POST": a byte every 0.1 s of a 2,000-byte body, far below the minimum rate. Before: a body had one
    total time (``body_timeout_s``, 30 s by default), so the drip held its connection for all of it."""
    body = json.dumps(speech("tones", "drip " * 400)).encode()[:2000]
    answered_s, answer, sent = trickle(guarded.port, speech_head(len(body)), body, piece=1, every_s=0.1)
    assert_openai_error(answer, 408, "request_timeout")
    assert b"slower than 2000 bytes per second" in answer
    assert BODY_RATE_INTERVAL_S * 0.9 <= answered_s < BODY_RATE_INTERVAL_S + 3 and sent < 100


def test_a_large_body_on_a_slow_but_steady_link_is_served(guarded: GatewayProcess) -> None:
    """48 kB at 16 kB/s: three seconds, longer than any total a body could be given that would also cut the drip
    above within its second (before: ``body_timeout_s`` was that total, 2 s in this gateway's config, and cut it)."""
    body = json.dumps(speech("tones", "steady")).encode()[:-1] + b" " * 48_000 + b"}"  # valid JSON, 48 kB
    answered_s, answer, sent = trickle(guarded.port, speech_head(len(body)), body, piece=1600, every_s=0.1)
    response_head, _, chunked = answer.partition(b"\r\n\r\n")
    assert response_head.startswith(b"HTTP/1.1 200 OK"), answer[:500]
    assert sent == len(body) and answered_s > 2.5
    audio = decode_audio(dechunk(chunked), "pcm")
    assert audio.duration == pytest.approx(len("steady") * 0.02, abs=0.01)  # the tones engine: 0.02 s a character


def dechunk(data: bytes) -> bytes:
    """The body of a response in chunked transfer encoding."""
    body = b""
    while True:
        size_line, _, data = data.partition(b"\r\n")
        if not (size := int(size_line.split(b";")[0], 16)):
            return body
        body, data = body + data[:size], data[size + 2 :]


def test_a_body_dripped_after_an_early_answer_is_cut_silently_too(guarded: GatewayProcess) -> None:
    """A body announced over ``max_body_bytes`` gets 413 from its head, and the connection stays open for the body
    to be read and dropped: that body must keep the minimum rate too. Before: the drip kept the connection (every
    byte stopped the keep-alive timer) until the body's total time, which then wrote a 408 after the 413."""
    with socket.create_connection(("127.0.0.1", guarded.port)) as sock:
        started, answered_s = time.monotonic(), math.inf
        sock.sendall(head("POST", "/v1/audio/speech", f"Authorization: Bearer {KEY}", content_length=70_000))
        received = b""
        with contextlib.suppress(ConnectionResetError, BrokenPipeError):
            while time.monotonic() - started < BODY_RATE_INTERVAL_S + 5:  # a byte every 0.1 s until it is closed
                if select.select([sock], [], [], 0.1)[0]:
                    if not (chunk := sock.recv(65536)):
                        break
                    received += chunk
                    answered_s = min(answered_s, time.monotonic() - started)
                sock.sendall(b" ")
        closed_s = time.monotonic() - started
    assert received.startswith(b"HTTP/1.1 413") and answered_s < 1.0
    assert received.count(b"HTTP/1.1 ") == 1  # the 413 alone
    assert BODY_RATE_INTERVAL_S * 0.9 <= closed_s < BODY_RATE_INTERVAL_S + 3


def test_body_timeout_s_still_bounds_a_body_however_steady(guarded: GatewayProcess) -> None:
    """The optional total: 40 kB at 4 kB/s, twice the minimum rate, is cut at ``body_timeout_s`` (5 s)."""
    body = json.dumps(speech("tones", "long")).encode()[:-1] + b" " * 40_000 + b"}"
    answered_s, answer, sent = trickle(guarded.port, speech_head(len(body)), body, piece=400, every_s=0.1)
    assert_openai_error(answer, 408, "request_timeout")
    assert b"did not arrive in time" in answer
    assert BODY_TIMEOUT_S * 0.9 <= answered_s < BODY_TIMEOUT_S + 3 and sent < len(body)


def test_a_client_gone_mid_upload_is_logged_as_499_without_a_traceback(guarded: GatewayProcess) -> None:
    """Before: a 500 with a traceback at error level, for a client that simply went away."""
    marker = uuid.uuid4().hex
    with socket.create_connection(("127.0.0.1", guarded.port)) as sock:
        sock.sendall(
            head(
                "POST",
                "/v1/audio/speech",
                f"Authorization: Bearer {KEY}",
                f"X-Request-Id: {marker}",
                content_length=60_000,
            )
            + b'{"model": "tones", "input": "'
            + b"a" * 1000
        )
        time.sleep(0.2)  # let the handler start reading the body: the disconnect must come mid-upload
    entry = wait_for_log(guarded, lambda line: line.get("request_id") == marker)
    assert entry["status"] == 499
    entries = [json.loads(line) for line in log_lines(guarded)]
    assert not [line for line in entries if line["level"] == "error"]
    assert "Traceback" not in guarded.log()


def test_json_nested_1000_deep_gets_400_with_openai_body(guarded: GatewayProcess) -> None:
    """Before: msgspec's RecursionError, a 500 with a traceback, without authentication. Now a caller without
    credentials gets its 401 before the body is read, and one with them the depth limit's 400."""
    body = '{"model": "tones", "voice": "alloy", "input": ' + NESTED_1000 + "}"
    url, json_type = f"{guarded.base_url}/v1/audio/speech", {"content-type": "application/json"}
    assert httpx.post(url, content=body, headers=json_type, timeout=10).status_code == 401
    response = httpx.post(url, content=body, headers=json_type | bearer(), timeout=10)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "json_too_deep"
    assert set(response.json()["error"]) == {"message", "type", "param", "code"}
    # within the limit, the usual validation answers
    shallow = httpx.post(
        f"{guarded.base_url}/v1/audio/speech",
        json={**speech("tones", "x"), "input": [[["x"]]]},
        headers=bearer(),
        timeout=10,
    )
    assert shallow.status_code == 400 and shallow.json()["error"]["param"] == "input"


async def test_json_nested_1000_deep_on_the_realtime_socket_gets_an_error_event(guarded: GatewayProcess) -> None:
    """Before: the socket closed with 4500 and no event."""
    url = guarded.base_url.replace("http://", "ws://") + "/v1/audio/speech/stream"
    async with connect(url, additional_headers=bearer()) as sock:
        assert json.loads(await sock.recv())["type"] == "session.created"
        await sock.send(NESTED_1000)
        error = json.loads(await asyncio.wait_for(sock.recv(), 10))
        assert error["type"] == "error" and error["error"]["code"] == "json_too_deep"
        await sock.send(json.dumps({"type": "session.update", "session": {"model": "tones"}}))
        reply = json.loads(await asyncio.wait_for(sock.recv(), 10))
        assert reply["type"] == "session.updated", reply  # the session goes on


# ------------------------------------------------------------------------------------------------------- 2. logs
async def test_debug_logs_carry_neither_frame_text_nor_a_first_message_token(guarded: GatewayProcess) -> None:
    """At ``log_level: debug`` websockets logs every frame on uvicorn's logger; before, with its text."""
    phrase = f"secret phrase {uuid.uuid4().hex}"
    url = guarded.base_url.replace("http://", "ws://") + "/v1/audio/speech/stream"
    async with connect(url) as sock:
        await sock.send(json.dumps({"type": "session.update", "token": KEY, "session": {"model": "tones"}}))
        assert json.loads(await asyncio.wait_for(sock.recv(), 10))["type"] == "session.created"
        await sock.send(json.dumps({"type": "input.append", "text": phrase + "."}))
        await sock.send(json.dumps({"type": "input.flush"}))
        async with asyncio.timeout(20):
            while json.loads(await sock.recv())["type"] != "audio.done":
                pass
    frames = wait_for_log(
        guarded, lambda entry: entry["logger"] == "uvicorn.error" and entry["message"].startswith("< TEXT")
    )
    assert "bytes]" in frames["message"]
    log = guarded.log()
    assert KEY not in log and phrase not in log and hash_api_key(KEY) not in log


async def test_every_line_is_one_json_object_when_a_worker_dies_mid_stream(guarded: GatewayProcess) -> None:
    """Before: uvicorn's multi-line plain-text traceback. Checks every line the gateway (and its workers, which share
    its output) wrote since it started, debug level included."""
    pid = guarded.wait_engine("steady", ready_workers=1)["pids"][0]
    async with (
        httpx.AsyncClient(base_url=guarded.base_url, timeout=30) as http,
        http.stream(
            "POST",
            "/v1/audio/speech",
            json=speech("steady", "x" * 100),
            headers=bearer(),
        ) as reply,
    ):
        assert reply.status_code == 200
        chunks = reply.aiter_raw()
        await anext(chunks)
        os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(httpx.HTTPError):
            async for _ in chunks:
                pass
    await asyncio.to_thread(guarded.wait_engine, "steady", 15.0, ready_workers=1)
    # A job that fails inside its worker: the worker logs the engine's traceback (one JSON line, as the server does).
    async with httpx.AsyncClient(base_url=guarded.base_url, timeout=30) as http:
        with contextlib.suppress(httpx.RemoteProtocolError):  # it fails after its first chunk: a truncated body
            await http.post("/v1/audio/speech", json=speech("steady", "x" * 40 + " #fail-after=1"), headers=bearer())
    lines = log_lines(guarded)
    assert any("injected failure" in line and "Traceback" in line for line in lines), "no worker traceback logged"
    assert len(lines) > 20
    for line in lines:
        entry = json.loads(line)  # fails the test on any line that is not one JSON object
        assert isinstance(entry, dict) and {"time", "level", "logger", "message"} <= set(entry)


async def test_a_stream_cut_after_its_first_byte_is_one_line_a_count_and_a_truncated_access_line(
    guarded: GatewayProcess,
) -> None:
    """Before: uvicorn's "Exception in ASGI application" with a traceback, and an access line like any other 200."""
    request_id = "cut-" + uuid.uuid4().hex
    headers = bearer() | {"x-request-id": request_id}
    async with httpx.AsyncClient(base_url=guarded.base_url, timeout=30) as http:
        with pytest.raises(httpx.RemoteProtocolError):  # the body ends without chunked encoding's last chunk
            await http.post("/v1/audio/speech", json=speech("steady", "x" * 40 + " #fail-after=2"), headers=headers)
        metrics = (await http.get("/metrics")).text
    entries = [json.loads(line) for line in log_lines(guarded)]
    mine = [entry for entry in entries if entry.get("request_id") == request_id]
    (cut,) = [entry for entry in mine if entry["message"] == "response truncated"]
    assert cut["level"] == "warning" and cut["engine"] == "steady" and "injected failure" in cut["cause"]
    (access,) = [entry for entry in mine if entry["logger"] == "chattts_gateway.access"]
    assert access["status"] == 200 and access["truncated"] is True
    # a worker logs its engine's error
    server = [entry for entry in entries if entry["logger"] != "chattts_gateway.worker"]
    assert not [entry for entry in server if "ASGI" in entry["message"] or "Traceback" in entry.get("exception", "")]
    assert 'tts_responses_truncated_total{engine="steady"}' in metrics


# ------------------------------------------------------------------------------------ 3. idle sockets and the cap
class LimitedGatewayProcess(GatewayProcess):
    """A gateway started with a soft open-file limit (``ulimit -n``) lowered to ``open_files``."""

    def __init__(self, config: dict[str, Any], workdir: Path, open_files: int) -> None:
        super().__init__(config, workdir)
        self.open_files = open_files

    def start(self, timeout_s: float = 60.0) -> GatewayProcess:
        # A small Python launcher lowers the limit and execs the server: preexec_fn is unsafe with threads around.
        launcher = (
            "import os, resource, sys; hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]; "
            "resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), hard)); "
            "os.execv(sys.argv[2], sys.argv[2:])"
        )
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    launcher,
                    str(self.open_files),
                    str(CONSOLE_SCRIPT),
                    "serve",
                    "--port",
                    str(self.port),
                    "--config",
                    str(self.config_path),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
            )
        self._wait_settled(timeout_s)
        return self


@pytest.fixture(scope="module")
def crowded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    config = {
        "server": {"header_timeout_s": 3.0},
        "engines": {"tones": {"kind": "synthetic", "workers": 1}},
        "aliases": {},
    }
    with LimitedGatewayProcess(config, tmp_path_factory.mktemp("crowded"), open_files=256) as process:
        yield process


def test_300_idle_sockets_under_256_open_files_do_not_stop_healthz(crowded: GatewayProcess) -> None:
    """Before: the open files ran out, and /healthz and speech requests failed while the sockets stayed open for ever.

    Must hold: with 300 sockets connected and silent, /healthz answers within a second and a speech request is
    served; the server stays under its open-file limit; every idle socket is closed by the header timeout.
    """
    assert crowded.process is not None
    idle = [socket.create_connection(("127.0.0.1", crowded.port)) for _ in range(300)]
    try:
        started = time.monotonic()
        health = httpx.get(f"{crowded.base_url}/healthz", timeout=1.0)
        assert health.status_code == 200 and time.monotonic() - started < 1.0
        spoken = httpx.post(f"{crowded.base_url}/v1/audio/speech", json=speech("tones", "still served"), timeout=10)
        assert spoken.status_code == 200 and spoken.content
        assert psutil.Process(crowded.process.pid).num_fds() < 256
        for sock in idle:  # each one closed (by eviction at the cap, or by the 3 s header timeout)
            assert read_until_closed(sock, timeout_s=3.0 + 5) == b""
    finally:
        for sock in idle:
            sock.close()


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    config = {
        "server": {"max_connections": 4, "body_timeout_s": 30.0},
        "engines": {"tones": {"kind": "synthetic", "workers": 1}},
        "aliases": {},
    }
    with GatewayProcess(config, tmp_path_factory.mktemp("capped")) as process:
        yield process


def test_over_the_connection_cap_a_new_connection_gets_a_fast_503(capped: GatewayProcess) -> None:
    """Four connections each hold a request in progress (the server has asked for its body: ``100 Continue``); a
    fifth gets 503 with OpenAI's body and ``Retry-After`` at once, not a hang; one freed, requests are served again.
    Each refusal has its access line (before: none, so the log showed no sign of the cap)."""
    before, logged = capped.refusals(), len(access_lines(capped, 503, "too_many_connections"))
    busy, refused = [], 1
    for _ in range(4):
        sock = socket.create_connection(("127.0.0.1", capped.port))
        sock.settimeout(10)
        sock.sendall(head("POST", "/v1/audio/speech", "Expect: 100-continue", content_length=100))
        assert sock.recv(1024).startswith(b"HTTP/1.1 100 Continue")  # the application is reading its body
        busy.append(sock)
    try:
        elapsed, answer = exchange(capped.port, head("GET", "/healthz"), timeout_s=5)
        headers = assert_openai_error(answer, 503, "too_many_connections")
        assert headers["retry-after"] == "1" and elapsed < 1.0
        busy.pop().close()
        deadline = time.monotonic() + 5
        while (status := httpx.get(f"{capped.base_url}/healthz", timeout=5).status_code) != 200:
            assert time.monotonic() < deadline, status  # the freed connection is forgotten within moments
            refused += 1
    finally:
        for sock in busy:
            sock.close()
    assert capped.refusals() - before == {("connection", 503, "too_many_connections"): refused}
    wait_until(lambda: len(access_lines(capped, 503, "too_many_connections")) - logged == refused, what="the lines")


def test_over_the_connection_cap_an_elevenlabs_path_gets_elevenlabs_503(capped: GatewayProcess) -> None:
    """The request line of a connection refused at the cap is read for its path (nothing else of it is parsed)."""
    busy = []
    try:
        for _ in range(4):
            sock = socket.create_connection(("127.0.0.1", capped.port))
            sock.settimeout(10)
            sock.sendall(head("POST", "/v1/audio/speech", "Expect: 100-continue", content_length=100))
            assert sock.recv(1024).startswith(b"HTTP/1.1 100 Continue")
            busy.append(sock)
        _, answer = exchange(capped.port, head("POST", ELEVENLABS_SPEECH, content_length=10), timeout_s=5)
        message = "The server has too many open connections; retry soon."
        headers = assert_elevenlabs_error(answer, 503, "too_many_connections", message)
        assert headers["retry-after"] == "1"
    finally:
        for sock in busy:
            sock.close()


# ---------------------------------------------------------------------------------------------------- 4. admin
def refused_start(config: dict[str, Any], workdir: Path, env: dict[str, str] | None = None) -> tuple[int, str]:
    path = workdir / "gateway.yaml"
    path.write_text(yaml.safe_dump(exact_engines(config)))
    done = subprocess.run(
        [str(CONSOLE_SCRIPT), "serve", "--port", str(free_port()), "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("config_token", "env_token"),
    [
        ("", None),
        ("short-but-not-32-characters", None),
        (None, ""),
    ],
    ids=["empty", "short", "empty-env"],
)
def test_an_empty_or_short_admin_token_refuses_to_start(
    tmp_path: Path,
    config_token: str | None,
    env_token: str | None,
) -> None:
    """Before: an empty token started, and /admin answered without any Authorization header."""
    auth: dict[str, Any] = {"required": True}
    if config_token is not None:
        auth["admin_token"] = config_token
    env = {"CHATTTS_GATEWAY_AUTH__ADMIN_TOKEN": env_token} if env_token is not None else None
    config = {"auth": auth, "engines": {"tones": {"kind": "synthetic"}}, "aliases": {}}
    status, output = refused_start(config, tmp_path, env)
    assert status != 0
    lines = output.strip().splitlines()
    assert len(lines) == 1 and "auth.admin_token" in lines[0] and "32 characters" in lines[0], output
    if config_token:
        assert config_token not in output


@pytest.fixture(scope="module")
def admin_redis() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    yield server
    server.remove()


@pytest.fixture(scope="module")
def administered(admin_redis: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    config = {
        "redis_url": admin_redis.url,
        "auth": {
            "required": True,
            "admin_token": ADMIN_TOKEN,
            "tenants": [{"name": "acme", "api_key_sha256": [hash_api_key(KEY)]}],
        },
        "engines": {"tones": {"kind": "synthetic", "workers": 1}},
        "aliases": {},
    }
    with GatewayProcess(config, tmp_path_factory.mktemp("administered")) as process:
        yield process


@pytest.mark.parametrize(
    "authorization",
    [ADMIN_TOKEN, f"Basic {ADMIN_TOKEN}", f"Token {ADMIN_TOKEN}", ""],
    ids=["bare-token", "basic", "other-scheme", "missing"],
)
def test_the_admin_token_is_accepted_only_as_bearer(administered: GatewayProcess, authorization: str) -> None:
    """Before: ``Authorization: <token>`` without "Bearer" was accepted."""
    headers = {"authorization": authorization} if authorization else {}
    refused = httpx.get(f"{administered.base_url}/admin/tenants", headers=headers, timeout=5)
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"
    accepted = httpx.get(f"{administered.base_url}/admin/tenants", headers=bearer(ADMIN_TOKEN), timeout=5)
    assert accepted.status_code == 200


def test_usage_during_a_redis_outage_gets_503_with_retry_after(
    administered: GatewayProcess,
    admin_redis: RedisServer,
) -> None:
    """Before: a 500 (the usage store's error was not in the error table)."""
    assert httpx.get(f"{administered.base_url}/v1/usage", headers=bearer(), timeout=5).status_code == 200
    admin_redis.stop()
    try:
        during = httpx.get(f"{administered.base_url}/v1/usage", headers=bearer(), timeout=10)
    finally:
        admin_redis.start()
    assert during.status_code == 503, during.text
    assert int(during.headers["retry-after"]) >= 1
    assert during.json()["error"]["code"] == "backend_unavailable"


def test_failed_admin_attempts_are_throttled_per_address_and_logged_without_the_token(
    administered: GatewayProcess,
) -> None:
    """From 127.0.0.2: wrong tokens get 401 until the throttle answers 429 with ``Retry-After``, then even the right
    token does. 127.0.0.1 is not affected. Each failure is one warning line, which never holds the token presented."""
    wrong = "wrong-" + uuid.uuid4().hex
    before = administered.refusals()
    with httpx.Client(
        base_url=administered.base_url, timeout=5, transport=httpx.HTTPTransport(local_address="127.0.0.2")
    ) as attacker:
        statuses = [attacker.get("/admin/tenants", headers=bearer(wrong)).status_code for _ in range(12)]
        throttled = attacker.get("/admin/tenants", headers=bearer(ADMIN_TOKEN))
    refused = administered.refusals() - before
    assert refused == {
        ("admin", 401, "invalid_api_key"): statuses.count(401),
        ("admin", 429, "rate_limit_exceeded"): 13 - statuses.count(401),
    }
    assert statuses[0] == 401 and 429 in statuses
    assert statuses.index(429) <= 10 and set(statuses[statuses.index(429) :]) == {429}
    assert throttled.status_code == 429 and 1 <= int(throttled.headers["retry-after"]) <= 60
    assert throttled.json()["error"]["code"] == "rate_limit_exceeded"
    unaffected = httpx.get(f"{administered.base_url}/admin/tenants", headers=bearer(ADMIN_TOKEN), timeout=5)
    assert unaffected.status_code == 200
    warnings = [
        entry
        for entry in map(json.loads, log_lines(administered))
        if entry["logger"] == "chattts_gateway.admin" and entry.get("client") == "127.0.0.2"
    ]
    assert warnings and all(entry["level"] == "warning" for entry in warnings)
    assert wrong not in administered.log() and ADMIN_TOKEN not in administered.log()


def test_admin_requests_without_a_token_are_refused_but_never_throttle_the_admin(administered: GatewayProcess) -> None:
    """Before: a request without any Authorization header counted as a failed attempt, so a monitor or crawler
    sharing the admin's address (it guesses nothing) locked the admin out after ten requests."""
    before = administered.refusals()
    with httpx.Client(
        base_url=administered.base_url, timeout=5, transport=httpx.HTTPTransport(local_address="127.0.0.6")
    ) as shared:
        statuses = [shared.get("/admin/tenants").status_code for _ in range(3 * 10)]
        admin = shared.get("/admin/tenants", headers=bearer(ADMIN_TOKEN))
    assert statuses == [401] * 30
    assert admin.status_code == 200
    assert administered.refusals() - before == {}  # nor counted as refusals: they guess nothing


# ------------------------------------------------------------------------------------------- forwarded addresses
def proxied_config(trusted_proxies: list[str]) -> dict[str, Any]:
    return {
        "server": {"trusted_proxies": trusted_proxies},
        "auth": {"required": True, "admin_token": ADMIN_TOKEN},
        "engines": {"tones": {"kind": "synthetic", "workers": 1}},
        "aliases": {},
    }


def admin_attempts(gateway: GatewayProcess, forwarded_for: list[str], token: str) -> list[int]:
    with httpx.Client(base_url=gateway.base_url, timeout=5) as client:  # from 127.0.0.1, as a local proxy would be
        return [
            client.get("/admin/tenants", headers=bearer(token) | {"x-forwarded-for": address}).status_code
            for address in forwarded_for
        ]


@pytest.fixture(scope="module")
def forwarding(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, GatewayProcess]]:
    """A gateway that trusts no proxy and one that trusts 127.0.0.1, started together; each is one test's own (its
    admin throttle is what the test looks at)."""
    gateways = {
        "untrusted": GatewayProcess(proxied_config([]), tmp_path_factory.mktemp("untrusted")),
        "trusted": GatewayProcess(proxied_config(["127.0.0.1"]), tmp_path_factory.mktemp("trusted")),
    }
    with running_together(list(gateways.values())):
        yield gateways


def test_a_forged_forwarded_address_does_not_dodge_the_admin_throttle(forwarding: dict[str, GatewayProcess]) -> None:
    """Before: uvicorn believed X-Forwarded-For from 127.0.0.1, so 30 wrong tokens, each from a new forged address,
    got 30 x 401 and never 429."""
    gateway = forwarding["untrusted"]
    statuses = admin_attempts(gateway, [f"198.51.100.{n}" for n in range(1, 31)], "wrong-" + uuid.uuid4().hex)
    assert statuses[0] == 401 and 429 in statuses
    assert statuses.index(429) <= 10


def test_behind_a_trusted_proxy_a_strangers_attempts_do_not_lock_the_admin_out(
    forwarding: dict[str, GatewayProcess],
) -> None:
    gateway = forwarding["trusted"]
    stranger = admin_attempts(gateway, ["198.51.100.7"] * 12, "wrong-" + uuid.uuid4().hex)
    admin = admin_attempts(gateway, ["198.51.100.8"], ADMIN_TOKEN)
    log = [json.loads(line) for line in log_lines(gateway)]
    assert stranger[0] == 401 and stranger[-1] == 429  # throttled by its own forwarded address
    assert admin == [200]  # the proxy's other callers are not
    assert any(entry.get("client") == "198.51.100.7" for entry in log if entry["logger"] == "chattts_gateway.admin")


# --------------------------------------------------------------------------------- credentials before bodies
@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    config = {
        "server": {"max_connections": 8, "body_timeout_s": 30.0},  # a config from before the minimum rate still works
        "auth": {
            "tenants": [
                {"name": "acme", "api_key_sha256": [hash_api_key(KEY)]},
                {"name": "pair", "api_key_sha256": [hash_api_key(TWO_BODIES_KEY)], "limits": {"bodies_in_flight": 2}},
            ]
        },
        "engines": {
            "tones": {"kind": "synthetic", "workers": 1, "options": {"seconds_per_char": 0.01}},
            "steady": {"kind": "synthetic", "workers": 1, "options": {"rtf": 1.0, "chunk_ms": 50}},  # real time
            "steady3": {"kind": "synthetic", "workers": 3, "options": {"rtf": 1.0, "chunk_ms": 50}},
        },
        "aliases": {},
    }
    with GatewayProcess(config, tmp_path_factory.mktemp("locked")) as process:
        yield process


def test_a_bad_credential_is_a_401_from_the_head_and_frees_the_connection(locked: GatewayProcess) -> None:
    """Before: the body was read first, so this socket held its connection for body_timeout_s and then got 408. Its
    access line says 401 and the code (before: status 0), with the request id the answer carries (before: none)."""
    before = locked.refusals()
    elapsed, answer = exchange(
        locked.port,
        head("POST", "/v1/audio/speech", "Authorization: Bearer sk-wrong", content_length=65000) + b"{",
        timeout_s=5,
    )
    headers = assert_openai_error(answer, 401, "invalid_api_key")
    assert headers["connection"] == "close"
    assert elapsed < 2.0
    wait_until(
        lambda: any(
            line["request_id"] == headers["x-request-id"] for line in access_lines(locked, 401, "invalid_api_key")
        ),
        what="the refusal's access line",
    )
    _, answer = exchange(locked.port, head("POST", "/v1/audio/speech", content_length=65000) + b"{", timeout_s=5)
    assert_openai_error(answer, 401, "invalid_api_key")  # no credential at all: it guesses nothing, is not counted
    assert locked.refusals() - before == {("credentials", 401, "invalid_api_key"): 1}


def test_a_response_being_streamed_holds_none_of_its_tenants_bodies_in_flight(locked: GatewayProcess) -> None:
    """A tenant's body counts among its ``bodies_in_flight`` (2 here) only while it arrives: three of its responses
    stream at once. (That a third body arriving at once is refused is shown in process:
    tests/unit/gateway/test_bodies_in_flight.py.)"""
    with (
        httpx.Client(base_url=locked.base_url, headers=bearer(TWO_BODIES_KEY), timeout=30) as client,
        contextlib.ExitStack() as held,
    ):
        for _ in range(3):
            reply = held.enter_context(client.stream("POST", "/v1/audio/speech", json=speech("steady3", "x" * 60)))
            assert reply.status_code == 200, reply.read()
            assert next(reply.iter_raw())  # its audio has begun, and goes on for seconds


STREAM_TEXT = "x" * 120  # six seconds of speech, spoken at real time by the steady engine


def stream_speech(gateway: GatewayProcess, first_audio: threading.Event) -> bytes:
    """One streamed mp3 response of STREAM_TEXT, whole; ``first_audio`` is set once its first bytes are in."""
    received = b""
    with (
        httpx.Client(base_url=gateway.base_url, headers=bearer(), timeout=30) as client,
        client.stream(
            "POST", "/v1/audio/speech", json={**speech("steady", STREAM_TEXT), "response_format": "mp3"}
        ) as reply,
    ):
        assert reply.status_code == 200
        for chunk in reply.iter_raw():
            received += chunk
            first_audio.set()
    return received


def test_sockets_without_credentials_cannot_take_a_tenants_connections_or_its_stream(locked: GatewayProcess) -> None:
    """The slot-exhaustion attack: heads of speech requests with no credential and one byte of a 65,000-byte body,
    from more sockets than the connection cap. Must hold: at least 95 % of a tenant's fresh requests are served, and
    a stream it started before the attack, still running when the attack ends, is untouched: all its audio arrives
    and decodes to the whole six seconds of its voice's tone."""
    first_audio, attackers = threading.Event(), []
    with ThreadPoolExecutor(1) as pool:
        stream = pool.submit(stream_speech, locked, first_audio)
        assert first_audio.wait(10), "the stream did not start"
        try:
            for _ in range(3 * 8):
                sock = socket.create_connection(("127.0.0.1", locked.port))
                sock.sendall(head("POST", "/v1/audio/speech", content_length=65000) + b"{")
                attackers.append(sock)
            served = 0
            with httpx.Client(base_url=locked.base_url, headers=bearer(), timeout=10) as client:
                for n in range(20):
                    reply = client.post("/v1/audio/speech", json=speech("tones", f"fresh request {n}"))
                    served += reply.status_code == 200
            assert not stream.done(), "the stream ended before the attack did: it proves nothing"
        finally:
            for sock in attackers:
                sock.close()
        audio = decode_audio(stream.result(timeout=30), "mp3")
    assert served >= 19  # the bar: at least 95 % of them
    assert audio.duration == pytest.approx(len(STREAM_TEXT) * 0.05, abs=DURATION_TOLERANCE_S)
    assert dominant_frequency(audio) == pytest.approx(voice_frequency("alloy"), abs=5)


# ------------------------------------------------------------------------------------------ per-address caps
@pytest.fixture(scope="module")
def per_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    config = {"server": {"max_connections_per_address": 3}, "engines": {"tones": {"kind": "synthetic"}}, "aliases": {}}
    with GatewayProcess(config, tmp_path_factory.mktemp("per-address")) as process:
        yield process


def connected_from(address: str, port: int) -> socket.socket:
    """A connection to the gateway from ``address`` (any 127.0.0.0/8 address is this machine's)."""
    sock = socket.socket()
    sock.bind((address, 0))
    sock.connect(("127.0.0.1", port))
    return sock


def test_one_address_holds_at_most_its_connections_and_others_are_served(per_address: GatewayProcess) -> None:
    """The fourth connection from 127.0.0.2 is refused, whatever address its X-Forwarded-For claims (no proxy is
    trusted here: a forged header gains nothing)."""
    held: list[socket.socket] = []
    try:
        for _ in range(3):  # idle connections from 127.0.0.2: its whole allowance
            held.append(connected_from("127.0.0.2", per_address.port))
        time.sleep(0.2)
        with connected_from("127.0.0.2", per_address.port) as extra:
            extra.sendall(head("GET", "/healthz", "X-Forwarded-For: 198.51.100.9"))
            answer = read_until_closed(extra, timeout_s=5)
        headers = assert_openai_error(answer, 429, "too_many_connections")
        assert headers["retry-after"] == "1"
        other = httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.3"), timeout=5)
        with other:
            assert other.get(f"{per_address.base_url}/healthz").status_code == 200
    finally:
        for sock in held:
            sock.close()
    with httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2"), timeout=5) as again:
        # Closed ones no longer count, once the server has seen them close (a busy machine may take a while).
        wait_until(
            lambda: again.get(f"{per_address.base_url}/healthz").status_code == 200, what="the closed ones let go"
        )


def test_over_its_address_s_cap_an_elevenlabs_path_gets_elevenlabs_429(per_address: GatewayProcess) -> None:
    held = [connected_from("127.0.0.4", per_address.port) for _ in range(3)]
    try:
        time.sleep(0.2)
        _, answer = exchange_from("127.0.0.4", per_address.port, head("GET", "/v1/user/subscription"))
        message = "Too many open connections from your address; close some or retry soon."
        headers = assert_elevenlabs_error(answer, 429, "too_many_connections", message)
        assert headers["retry-after"] == "1"
    finally:
        for sock in held:
            sock.close()


def test_a_connection_over_its_address_s_cap_that_sends_nothing_is_dropped_within_a_second(
    per_address: GatewayProcess,
) -> None:
    before = per_address.refusals()
    held = [connected_from("127.0.0.2", per_address.port) for _ in range(3)]
    try:
        time.sleep(0.2)
        with connected_from("127.0.0.2", per_address.port) as silent:
            started = time.monotonic()
            assert read_until_closed(silent, timeout_s=5) == b""
            assert time.monotonic() - started < 1.0 + 1.0
    finally:
        for sock in held:
            sock.close()
    # Counted though it heard nothing: a flood of silent sockets shows in the metric.
    assert per_address.refusals() - before == {("connection", 429, "too_many_connections"): 1}


async def test_upgraded_websockets_count_against_their_address(per_address: GatewayProcess) -> None:
    """Three realtime sessions from 127.0.0.2 are its whole allowance: one more connection from it, HTTP or
    WebSocket, is refused with 429 until a session closes. Before: a WebSocket stopped counting once upgraded, so one
    address could hold any number of sessions."""
    url = per_address.base_url.replace("http://", "ws://") + "/v1/audio/speech/stream"
    async with contextlib.AsyncExitStack() as sessions:
        held = []
        for _ in range(3):
            sock = await asyncio.to_thread(connected_from, "127.0.0.2", per_address.port)
            held.append(await sessions.enter_async_context(connect(url, sock=sock)))
            assert json.loads(await asyncio.wait_for(held[-1].recv(), 10))["type"] == "session.created"
        _, answer = await asyncio.to_thread(exchange_from, "127.0.0.2", per_address.port, head("GET", "/healthz"))
        assert_openai_error(answer, 429, "too_many_connections")
        extra = await asyncio.to_thread(connected_from, "127.0.0.2", per_address.port)
        with pytest.raises(InvalidStatus) as refused:
            async with connect(url, sock=extra):
                pass
        assert refused.value.response.status_code == 429
        await held.pop().close()

        def served() -> bool:  # once the server has seen the close (a busy machine may take a while)
            _, answer = exchange_from("127.0.0.2", per_address.port, head("GET", "/healthz"))
            return parse_response(answer)[0] == 200

        await asyncio.to_thread(wait_until, served, 15.0, "the closed socket let go")


def exchange_from(address: str, port: int, data: bytes) -> tuple[float, bytes]:
    """:func:`exchange`, from ``address``: the request is sent with ``Connection: close``."""
    with connected_from(address, port) as sock:
        started = time.monotonic()
        sock.sendall(data.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n", 1))
        received = read_until_closed(sock, timeout_s=10)
        return time.monotonic() - started, received


# ---------------------------------------------------------------------------- behind a trusted reverse proxy
@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """127.0.0.1 plays the trusted proxy: what it forwards for (``X-Forwarded-For``) is the client."""
    config = {
        "server": {
            "trusted_proxies": ["127.0.0.1"],
            "max_connections_per_address": 2,
            "max_auth_failures_per_address": 5,
        },
        "auth": {"tenants": [{"name": "acme", "api_key_sha256": [hash_api_key(KEY)]}]},
        "engines": {"tones": {"kind": "synthetic", "workers": 1}},
        "aliases": {},
    }
    with GatewayProcess(config, tmp_path_factory.mktemp("proxied")) as process:
        yield process


def read_one_response(sock: socket.socket) -> bytes:
    """One response with a Content-Length, leaving the connection open."""
    sock.settimeout(10)
    received = b""
    while b"\r\n\r\n" not in received:
        received += sock.recv(65536)
    response_head, _, body = received.partition(b"\r\n\r\n")
    length = int(parse_response(response_head + b"\r\n\r\n")[1]["content-length"])
    while len(body) < length:
        body += sock.recv(65536)
    return response_head + b"\r\n\r\n" + body


def forwarded_healthz(forwarded_for: str) -> bytes:
    return head("GET", "/healthz", f"X-Forwarded-For: {forwarded_for}")


def test_behind_a_trusted_proxy_connections_count_against_the_forwarded_client(proxied: GatewayProcess) -> None:
    """Two kept-alive proxy connections carrying 198.51.100.7's requests are its whole allowance: a third request
    for it is refused, even with an address forged before the one its proxy added, while other clients behind the
    same proxy are served. Before: a trusted proxy's connections were not counted per address at all."""
    held = []
    try:
        for _ in range(2):
            sock = socket.create_connection(("127.0.0.1", proxied.port))
            sock.sendall(forwarded_healthz("198.51.100.7"))
            assert read_one_response(sock).startswith(b"HTTP/1.1 200 OK")
            held.append(sock)
        for forwarded_for in ["198.51.100.7", "198.51.100.8, 198.51.100.7"]:  # the second: .7 forged .8 itself
            _, answer = exchange(proxied.port, forwarded_healthz(forwarded_for))
            assert_openai_error(answer, 429, "too_many_connections")
        _, answer = exchange(
            proxied.port, head("GET", "/healthz", "X-Forwarded-For: 198.51.100.8", "Connection: close")
        )
        assert parse_response(answer)[0] == 200
        held.pop().close()
        time.sleep(0.2)
        _, answer = exchange(
            proxied.port, head("GET", "/healthz", "X-Forwarded-For: 198.51.100.7", "Connection: close")
        )
        assert parse_response(answer)[0] == 200
    finally:
        for sock in held:
            sock.close()


def models_statuses(
    gateway: GatewayProcess,
    keys: list[str],
    forwarded_for: str | None = None,
    transport: httpx.BaseTransport | None = None,
) -> list[int]:
    headers = {"x-forwarded-for": forwarded_for} if forwarded_for else {}
    with httpx.Client(base_url=gateway.base_url, timeout=10, transport=transport) as client:
        return [client.get("/v1/models", headers=headers | bearer(key)).status_code for key in keys]


def test_behind_a_trusted_proxy_refused_credentials_throttle_the_forwarded_client_only(proxied: GatewayProcess) -> None:
    guesses = [generate_api_key() for _ in range(8)]
    assert models_statuses(proxied, guesses, "198.51.100.17") == [401] * 5 + [429] * 3
    forged = models_statuses(proxied, guesses[:2], "198.51.100.18, 198.51.100.17")  # .17 forging .18: still .17
    assert forged == [429, 429]
    assert models_statuses(proxied, [guesses[0], KEY], "198.51.100.18") == [401, 200]  # another client of the proxy


# --------------------------------------------------------------------------------- refused credentials
FRESH_KEY = generate_api_key()  # valid, but never used before the test below: not proven


@pytest.fixture(scope="module")
def sentry_redis() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    yield server
    server.remove()


@pytest.fixture(scope="module")
def sentried(sentry_redis: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """Keys in Redis, and at most five refused credentials per address and minute."""
    config = {
        "redis_url": sentry_redis.url,
        "server": {"max_auth_failures_per_address": 5},
        "auth": {"tenants": [{"name": "acme", "api_key_sha256": [hash_api_key(KEY), hash_api_key(FRESH_KEY)]}]},
        "engines": {"tones": {"kind": "synthetic", "workers": 1}},
        "aliases": {},
    }
    with GatewayProcess(config, tmp_path_factory.mktemp("sentried")) as process:
        yield process


def key_lookups(redis_server: RedisServer) -> int:
    """HGETALL calls Redis has served: one per API key looked up (``RedisAuthStore.find_key``)."""
    with Redis.from_url(redis_server.url) as redis:
        stats: dict[str, Any] = redis.info("commandstats")
    return int(stats.get("cmdstat_hgetall", {}).get("calls", 0))


def throttle_stranger(gateway: GatewayProcess) -> None:
    """Prove the tenant's key from 127.0.0.1, then present five guesses from 127.0.0.4."""
    assert models_statuses(gateway, [KEY]) == [200]
    stranger = httpx.HTTPTransport(local_address="127.0.0.4")
    assert set(models_statuses(gateway, [generate_api_key() for _ in range(5)], transport=stranger)) <= {401, 429}


def test_a_flood_of_guessed_keys_costs_no_lookup_and_locks_out_no_neighbour(
    sentried: GatewayProcess, sentry_redis: RedisServer
) -> None:
    """From 127.0.0.4: five random keys are looked up and refused (401); the next fifty, each with a forged
    ``X-Forwarded-For`` (no proxy is trusted: it gains nothing), get 429 with ``Retry-After`` without a single Redis
    lookup; the tenant behind the same address, whose key has authenticated on this replica before, is still served;
    another address is not throttled. Before: every guess cost a lookup and got 401, for ever. (A valid key never
    used on this replica waits, from that address, for the ``Retry-After``: nothing tells it from a guess.)"""
    stranger = httpx.HTTPTransport(local_address="127.0.0.4")
    assert models_statuses(sentried, [KEY]) == [200]  # the tenant's key, proven from 127.0.0.1
    before, refused_before = key_lookups(sentry_redis), sentried.refusals()
    assert models_statuses(sentried, [generate_api_key() for _ in range(5)], transport=stranger) == [401] * 5
    assert key_lookups(sentry_redis) - before >= 5  # each was looked up: what the throttle spares below
    before = key_lookups(sentry_redis)
    with httpx.Client(base_url=sentried.base_url, timeout=10, transport=stranger) as client:
        forged = [{"x-forwarded-for": f"198.51.100.{n}"} for n in range(1, 51)]  # no proxy is trusted: ignored
        flood = [client.get("/v1/models", headers=bearer(generate_api_key()) | claimed) for claimed in forged]
    assert key_lookups(sentry_redis) == before
    assert {reply.status_code for reply in flood} == {429}
    assert {reply.json()["error"]["code"] for reply in flood} == {"too_many_failed_authentications"}
    assert all(1 <= int(reply.headers["retry-after"]) <= 60 for reply in flood)
    refused = sentried.refusals() - refused_before
    assert refused == {
        ("credentials", 401, "invalid_api_key"): 5,
        ("credentials", 429, "too_many_failed_authentications"): 50,
    }
    assert models_statuses(sentried, [KEY, FRESH_KEY], transport=stranger) == [200, 429]
    assert models_statuses(sentried, [generate_api_key(), FRESH_KEY]) == [401, 200]  # from 127.0.0.1


async def test_a_throttled_address_s_realtime_sockets_need_a_proven_key(sentried: GatewayProcess) -> None:
    """Continues the flood above: from 127.0.0.4 a socket with a guessed key is refused with 1013 and a 429 error
    event, one with the tenant's proven key gets its session."""
    url = sentried.base_url.replace("http://", "ws://") + "/v1/audio/speech/stream"
    await asyncio.to_thread(throttle_stranger, sentried)  # already throttled, unless this test runs alone
    sock = await asyncio.to_thread(connected_from, "127.0.0.4", sentried.port)
    async with connect(url, sock=sock, additional_headers=bearer(generate_api_key())) as refused:
        error = json.loads(await asyncio.wait_for(refused.recv(), 10))
        with pytest.raises(ConnectionClosed) as closed:
            await refused.recv()
    assert error["error"]["code"] == "too_many_failed_authentications" and error["error"]["type"] == "requests"
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1013
    sock = await asyncio.to_thread(connected_from, "127.0.0.4", sentried.port)
    async with connect(url, sock=sock, additional_headers=bearer()) as served:
        assert json.loads(await asyncio.wait_for(served.recv(), 10))["type"] == "session.created"


async def test_one_address_cannot_take_every_place_of_sockets_awaiting_credentials(sentried: GatewayProcess) -> None:
    """Four sockets from 127.0.0.7 wait for their first message's credentials: its share of the waiting places. A
    fifth from it is refused at once (1013); a browser at another address still gets its place. Before: one address
    could take all of ``realtime.max_unauthenticated`` (32) and shut every browser out."""
    url = sentried.base_url.replace("http://", "ws://") + "/v1/audio/speech/stream"
    before = await asyncio.to_thread(sentried.refusals)
    async with contextlib.AsyncExitStack() as held:
        for _ in range(4):
            sock = await asyncio.to_thread(connected_from, "127.0.0.7", sentried.port)
            await held.enter_async_context(connect(url, sock=sock))
        await asyncio.sleep(0.3)  # all four are waiting for their first message
        sock = await asyncio.to_thread(connected_from, "127.0.0.7", sentried.port)
        async with connect(url, sock=sock) as fifth:
            error = json.loads(await asyncio.wait_for(fifth.recv(), 1))  # at once, not after auth_timeout_s
            with pytest.raises(ConnectionClosed) as closed:
                await fifth.recv()
        assert error["error"]["code"] == "too_many_connections"
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1013
        refused = await asyncio.to_thread(sentried.refusals)
        assert refused - before == {("connection", 503, "too_many_connections"): 1}
        sock = await asyncio.to_thread(connected_from, "127.0.0.8", sentried.port)
        async with connect(url, sock=sock) as browser:
            await browser.send(json.dumps({"type": "session.update", "token": KEY}))
            assert json.loads(await asyncio.wait_for(browser.recv(), 10))["type"] == "session.created"
