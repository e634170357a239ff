"""A client that hangs up before the first audio byte frees what its request holds at once, not when the first audio
would have come: its place in an engine's queue, its engine job (a hung worker is replaced ``cancel_timeout_s`` after,
not ``stall_timeout_s``), its tenant's concurrent-stream lease, and its share of a synthesis, which the other requests
sharing it keep. Also for a front gateway that gives up on a slow engine node.

Against real gateway processes; the requests that hang up are raw sockets, so that nothing of the response can have
been read before the close.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from auth.keys import generate_api_key, hash_api_key
from harness.gateway_process import GatewayProcess
from tests.audio_decode import DURATION_TOLERANCE_S, decode_audio
from tests.starting import start_together, stop_together
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator

SOLO_KEY = generate_api_key()  # one concurrent stream
OTHER_KEY = generate_api_key()  # no limits
SERVICE_TOKEN = "svc-" + uuid.uuid4().hex
SECONDS_PER_CHAR = 0.02
#: How soon what a request held must be free after its client hung up: far below the stall timeout (30 s).
RELEASED_WITHIN_S = 2.0
CANCEL_TIMEOUT_S = 0.5
#: The first audio of the single-flight test: long enough for the second request to join and the first to leave.
SHARED_DELAY_S = 3.0
#: Slow to its first audio (5 times real time, the whole clip in one chunk), in a pause the engine leaves as soon as
#: its job is cancelled: a 200-character request (a 10 s clip) waits 50 s, longer than the stall timeout (30 s), while
#: the worker's warm-up ("Hello.") takes 1.5 s. (``request_delay_ms`` would delay the warm-up as much.)
WAITING = {
    "kind": "synthetic",
    "workers": 1,
    "queue_size": 4,
    "options": {"seconds_per_char": 0.05, "chunk_ms": 10_000, "rtf": 5.0},
}


def node_config() -> dict[str, Any]:
    return {"server": {"profile": "engine"}, "auth": {"service_token": SERVICE_TOKEN}, "engines": {"waiting": WAITING}}


def gateway_config(node: GatewayProcess) -> dict[str, Any]:
    return {
        "auth": {
            "tenants": [
                {"name": "solo", "api_key_sha256": [hash_api_key(SOLO_KEY)], "limits": {"concurrent_streams": 1}},
                {"name": "other", "api_key_sha256": [hash_api_key(OTHER_KEY)]},
            ]
        },
        "engines": {
            "tones": {"kind": "synthetic", "workers": 1, "options": {"seconds_per_char": SECONDS_PER_CHAR}},
            "waiting": WAITING,
            # Hangs at "#hang-after=0", deaf to cancellation: only the watchdog can end it.
            "stuck": {"kind": "synthetic", "workers": 1, "cancel_timeout_s": CANCEL_TIMEOUT_S},
            "shared": {
                "kind": "synthetic",
                "workers": 1,
                "options": {"request_delay_ms": SHARED_DELAY_S * 1000, "seconds_per_char": SECONDS_PER_CHAR},
            },
            # The two tiers: this gateway in front of an engine node that is slow to its first audio.
            "remote-waiting": {
                "kind": "openai",
                "options": {
                    "endpoints": [f"{node.base_url}/v1"],
                    "model": "waiting",
                    "api_key": SERVICE_TOKEN,
                    "probe_interval_s": 0.2,
                    "first_byte_timeout_s": 0.5,
                },
            },
        },
        "aliases": {},
    }


@pytest.fixture(scope="module")
def tiers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[GatewayProcess, GatewayProcess]]:
    """The engine node and the gateway in front of it, started together: the gateway's config names the node by its
    port, and it waits for its remote engine to see the node ready."""
    node = GatewayProcess(node_config(), tmp_path_factory.mktemp("node"))
    process = GatewayProcess(gateway_config(node), tmp_path_factory.mktemp("gateway"))
    start_together([node, process])
    try:
        process.wait_engine("remote-waiting", 60, state="ready")
        yield node, process
    finally:
        workers = [pid for engine in process.readiness()["engines"].values() for pid in engine["pids"]]
        stop_together([process, node])
        for pid in workers:  # a hung worker still alive (the test failed before it was replaced) must not outlive it
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def node(tiers: tuple[GatewayProcess, GatewayProcess]) -> GatewayProcess:
    return tiers[0]


@pytest.fixture(scope="module")
def gateway(tiers: tuple[GatewayProcess, GatewayProcess]) -> GatewayProcess:
    return tiers[1]


# ---------------------------------------------------------------------------------------------------------- helpers
def speech(model: str, text: str) -> dict[str, Any]:
    return {"model": model, "input": text, "voice": "alloy", "response_format": "pcm"}


def slow_speech(model: str, label: str) -> dict[str, Any]:
    """A request that waits 50 s for its first audio on a :data:`WAITING` engine."""
    return speech(model, f"{label} {uuid.uuid4().hex} ".ljust(200, "."))


def send_speech(gateway: GatewayProcess, key: str, body: dict[str, Any], request_id: str) -> socket.socket:
    """A speech request on a connection of its own, its response left unread."""
    payload = json.dumps(body).encode()
    head = (
        "POST /v1/audio/speech HTTP/1.1\r\nHost: gateway\r\n"
        f"Authorization: Bearer {key}\r\nX-Request-Id: {request_id}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
    )
    sock = socket.create_connection(("127.0.0.1", gateway.port))
    sock.sendall(head.encode() + payload)
    return sock


def hang_up(sock: socket.socket) -> None:
    """Close the connection, after checking that not a byte of the response has arrived."""
    sock.setblocking(False)
    with pytest.raises(BlockingIOError):
        sock.recv(1)
    sock.close()


def speak_as_solo(gateway: GatewayProcess) -> int:
    """The status of a short request of the one-stream tenant: 200 once its stream lease is free, 429 while held."""
    response = httpx.post(
        f"{gateway.base_url}/v1/audio/speech",
        headers={"Authorization": f"Bearer {SOLO_KEY}"},
        json=speech("tones", f"is my stream free? {uuid.uuid4().hex}"),
        timeout=10,
    )
    return response.status_code


def access_entry(gateway: GatewayProcess, request_id: str, timeout_s: float = 5.0) -> dict[str, Any]:
    """The access log line of the request, once written."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in gateway.log().splitlines():
            with contextlib.suppress(ValueError):
                entry: dict[str, Any] = json.loads(line)
                if entry.get("request_id") == request_id:
                    return entry
        time.sleep(0.02)
    pytest.fail(f"no access log line for {request_id} within {timeout_s} s")


def assert_logged_as_gone(gateway: GatewayProcess, *request_ids: str) -> None:
    """Each request is logged as 499 (client closed request), and nothing at error level or as a traceback."""
    for request_id in request_ids:
        entry = access_entry(gateway, request_id)
        assert entry["status"] == 499, entry
    entries = [json.loads(line) for line in gateway.log().splitlines() if line.startswith("{")]
    assert not [entry for entry in entries if entry.get("level") == "error"]
    assert "Traceback" not in gateway.log()


def speech_statuses(gateway: GatewayProcess) -> list[int]:
    entries = [json.loads(line) for line in gateway.log().splitlines() if '"path": "/v1/audio/speech"' in line]
    return [entry["status"] for entry in entries]


def cache_misses(gateway: GatewayProcess) -> float:
    metrics = httpx.get(f"{gateway.base_url}/metrics", timeout=5).text
    lines = [line for line in metrics.splitlines() if line.startswith('tts_cache_requests_total{result="miss"}')]
    return float(lines[0].rsplit(" ", 1)[1]) if lines else 0.0  # no line before the first miss


def gone_requests_counted(gateway: GatewayProcess) -> float:
    """Speech requests counted in the HTTP metrics with status 499 (client closed request)."""
    metrics = httpx.get(f"{gateway.base_url}/metrics", timeout=5).text
    labels = ('path="/v1/audio/speech"', 'status_code="499"')
    lines = [line for line in metrics.splitlines() if line.startswith("tts_http_requests_total{")]
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines if all(label in line for label in labels))


# ------------------------------------------------------------------------------------------------------------ tests
def test_a_client_gone_from_the_queue_or_a_job_frees_its_place_its_job_and_its_stream_lease(
    gateway: GatewayProcess,
) -> None:
    running_id, queued_id = uuid.uuid4().hex, uuid.uuid4().hex
    with send_speech(gateway, OTHER_KEY, slow_speech("waiting", "holds the only worker"), running_id) as running:
        wait_until(lambda: gateway.engine("waiting")["active_jobs"] == 1, 10, "the first request running")
        with send_speech(gateway, SOLO_KEY, slow_speech("waiting", "waits behind it"), queued_id) as queued:
            wait_until(lambda: gateway.engine("waiting")["queued"] == 1, 10, "the second request queued")
            assert speak_as_solo(gateway) == 429  # the queued request holds the tenant's one stream
            hang_up(queued)
        wait_until(lambda: gateway.engine("waiting")["queued"] == 0, RELEASED_WITHIN_S, "the queued request leaving")
        wait_until(lambda: speak_as_solo(gateway) == 200, RELEASED_WITHIN_S, "the tenant's stream lease released")
        assert gateway.engine("waiting")["active_jobs"] == 1  # the other tenant's request is undisturbed
        hang_up(running)
    wait_until(
        lambda: (state := gateway.engine("waiting"))["active_jobs"] == 0 and state["busy_workers"] == 0,
        RELEASED_WITHIN_S,
        "the running job cancelled",
    )
    assert_logged_as_gone(gateway, running_id, queued_id)
    assert gone_requests_counted(gateway) >= 2


def test_a_hung_worker_is_replaced_soon_after_its_client_hangs_up(gateway: GatewayProcess) -> None:
    restarts = gateway.engine("stuck")["restarts"]
    request_id = uuid.uuid4().hex
    with send_speech(
        gateway, SOLO_KEY, speech("stuck", f"never speaks #hang-after=0 {request_id}"), request_id
    ) as sock:
        wait_until(lambda: gateway.engine("stuck")["active_jobs"] == 1, 10, "the job running")
        time.sleep(0.2)  # the worker is in its hang now
        hang_up(sock)
    wait_until(lambda: speak_as_solo(gateway) == 200, RELEASED_WITHIN_S, "the tenant's stream lease released")
    # Cancelled, the job is given cancel_timeout_s to stop; the worker does not, so the watchdog replaces it.
    wait_until(
        lambda: gateway.engine("stuck")["restarts"] == restarts + 1,
        CANCEL_TIMEOUT_S + RELEASED_WITHIN_S,
        "the hung worker replaced",
    )
    assert_logged_as_gone(gateway, request_id)
    gateway.wait_engine("stuck", timeout_s=30, state="ready", ready_workers=1)


def test_a_request_sharing_a_synthesis_keeps_it_when_the_other_hangs_up(gateway: GatewayProcess) -> None:
    text = f"Two requests, one synthesis. {uuid.uuid4().hex}"
    body = speech("shared", text)
    misses = cache_misses(gateway)
    leaving_id = uuid.uuid4().hex
    with send_speech(gateway, OTHER_KEY, body, leaving_id) as leaving, ThreadPoolExecutor(1) as thread:
        wait_until(lambda: gateway.engine("shared")["active_jobs"] == 1, 10, "the synthesis running")
        staying = thread.submit(
            httpx.post,
            f"{gateway.base_url}/v1/audio/speech",
            json=body,
            headers={"Authorization": f"Bearer {OTHER_KEY}"},
            timeout=30,
        )
        wait_until(lambda: cache_misses(gateway) == misses + 2, 5, "the second request looking up the cache")
        # One worker: a second synthesis would wait in the queue. The second request joined the first's.
        state = gateway.engine("shared")
        assert (state["active_jobs"], state["queued"]) == (1, 0)

        hang_up(leaving)
        assert_logged_as_gone(gateway, leaving_id)
        assert not staying.done()  # gone before any audio existed
        response = staying.result(timeout=30)
    assert response.status_code == 200
    assert response.headers["x-cache"] == "miss"
    expected = len(text) * SECONDS_PER_CHAR
    assert decode_audio(response.content, "pcm").duration == pytest.approx(expected, abs=DURATION_TOLERANCE_S)


def test_an_engine_node_frees_its_worker_when_the_front_gives_up_before_the_first_byte(
    gateway: GatewayProcess,
    node: GatewayProcess,
) -> None:
    response = httpx.post(
        f"{gateway.base_url}/v1/audio/speech",
        headers={"Authorization": f"Bearer {OTHER_KEY}"},
        json=slow_speech("remote-waiting", "too slow for the front"),
        timeout=30,
    )
    assert response.status_code == 503, response.text
    assert "no answer within 0.5 s" in response.json()["error"]["message"]
    # The front gave up after its first-byte timeout and closed the connection; the node cancels the job.
    wait_until(
        lambda: node.engine("waiting")["active_jobs"] == 0,
        RELEASED_WITHIN_S,
        "the node's job cancelled",
    )
    # Each try of the front (it may try the node again) reached the node and was logged as 499.
    wait_until(lambda: set(speech_statuses(node)) == {499}, what="the node logging the requests as 499")
