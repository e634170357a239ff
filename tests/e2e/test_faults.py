"""Faults under load, on real gateway processes with a real Redis: Redis dying and coming back, a worker killed
mid-stream, clients that abort, clients that stop reading, and garbage at rate. Each test says what must hold.

Every test but the Redis outage shares one gateway (``faulty``), Redis-backed like a production replica, with a short
``server.send_timeout_s`` for the stalled reader.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import signal
import socket
import time
import uuid
from typing import TYPE_CHECKING, Any

import httpx
import psutil
import pytest
import redis

from harness.gateway_process import GatewayProcess
from tests.openai_errors import BAD_BODIES, VALID, assert_openai_error
from tests.tenancy import Admin, tenancy_config

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.redis_server import RedisServer

SAMPLE_RATE = 24000
SEND_TIMEOUT_S = 2.0
MiB = 1 << 20


def faults_config(redis_url: str) -> dict[str, Any]:
    """test_tenancy's tenancy (admin token, JWT, fail-open limits) with engines for each fault."""
    return {
        **tenancy_config(redis_url),
        "server": {"max_body_bytes": 65536, "send_timeout_s": SEND_TIMEOUT_S},
        "engines": {
            # Fast tones: test_errors' bodies name it, and the valid requests after each fault use it.
            "synthetic": {"kind": "synthetic", "workers": 1, "options": {"seconds_per_char": 0.02}},
            # Real-time streams whose first audio comes after 20 ms: the kill and the abort tests.
            "steady": {
                "kind": "synthetic",
                "workers": 2,
                "options": {"rtf": 1.0, "chunk_ms": 20, "seconds_per_char": 0.05},
            },
            # 4096 characters make 819 s of audio (39 MB of PCM, more than any socket buffer), made in about 10 s.
            "long": {"kind": "synthetic", "workers": 1, "options": {"rtf": 0.0125, "seconds_per_char": 0.2}},
        },
        "aliases": {},
    }


@pytest.fixture(scope="module")
def faulty(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    redis_server.flush()
    with GatewayProcess(faults_config(redis_server.url), tmp_path_factory.mktemp("faults")) as process:
        yield process


@pytest.fixture(scope="module")
def admin(faulty: GatewayProcess) -> Iterator[Admin]:
    client = Admin(faulty.base_url)
    yield client
    client.close()


def new_key(admin: Admin, **limits: int) -> str:
    key: str = admin.key(admin.tenant(models=None, **limits))["key"]
    return key


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def speech(model: str, text: str) -> dict[str, Any]:
    return {"model": model, "input": text, "voice": "alloy", "response_format": "pcm"}


def pcm_bytes(text: str, seconds_per_char: float) -> int:
    return round(len(text) * seconds_per_char * SAMPLE_RATE) * 2


def rss(gateway: GatewayProcess) -> int:
    return int(psutil.Process(gateway.process.pid).memory_info().rss)  # type: ignore[union-attr]


async def usage(http: httpx.AsyncClient, key: str) -> dict[str, Any]:
    response = await http.get("/v1/usage", headers=bearer(key))
    assert response.status_code == 200, response.text
    return dict(response.json())


async def wait_for_usage(http: httpx.AsyncClient, key: str, requests: int, timeout_s: float = 5.0) -> dict[str, Any]:
    """Usage is recorded as each response ends on the server, a little after the client saw its end."""
    deadline = time.monotonic() + timeout_s
    while (record := await usage(http, key))["requests"] < requests and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return record


# ------------------------------------------------------------------ 1. Redis stopped under load, then started
class Load:
    """Lanes of back-to-back speech requests, each with its own text (identical ones would share a synthesis)."""

    def __init__(self, http: httpx.AsyncClient, key: str) -> None:
        self.http, self.key = http, key
        self.served: list[str] = []
        self.failed: list[httpx.Response] = []
        self.stop = asyncio.Event()

    async def lane(self, lane: int) -> None:
        for n in itertools.count():
            if self.stop.is_set():
                return
            text = f"lane {lane} request {n}"
            response = await self.http.post(
                "/v1/audio/speech", json=speech("synthetic", text), headers=bearer(self.key)
            )
            if response.status_code == 200:
                self.served.append(text)
            else:
                self.failed.append(response)


def freeze_and_snapshot(server: RedisServer) -> None:
    """Pause Redis's writes, then persist what it holds, so that it comes back as a production Redis would.

    Paused first: a write landing between the snapshot and the kill would be lost by Redis itself, which is not the
    gateway losing usage. Writes blocked by the pause never run (the kill comes first); the gateway sees them fail.
    """
    client = redis.Redis(port=server.port)
    client.client_pause(10_000, all=False)
    client.save()
    client.connection_pool.disconnect()  # close() alone leaves the socket open in redis-py 8


async def redis_state(http: httpx.AsyncClient) -> str:
    return str((await http.get("/readyz")).json()["redis"])


async def outage(http: httpx.AsyncClient, server: RedisServer, load: Load) -> tuple[int, str]:
    """Kill Redis for 1.5 s under load; returns the requests served during the outage and /readyz's view of it."""
    await asyncio.to_thread(freeze_and_snapshot, server)
    await asyncio.to_thread(server.stop)
    served_before = len(load.served)
    await asyncio.sleep(0.3)
    seen = await redis_state(http)
    await asyncio.sleep(1.2)
    served_during = len(load.served) - served_before
    await asyncio.to_thread(server.start)
    return served_during, seen


async def wait_for_redis(http: httpx.AsyncClient, timeout_s: float) -> None:
    started = time.monotonic()
    while await redis_state(http) != "ok":
        assert time.monotonic() - started < timeout_s, "Redis never reported ok again"
        await asyncio.sleep(0.05)


async def test_redis_outage_under_load_serves_everyone_and_loses_no_usage(
    outage_redis: RedisServer,
    tmp_path: Path,
) -> None:
    """Configuration: test_tenancy's, whose limits fail open (``limits.fail_mode: open``).

    Must hold while six lanes of requests run and Redis is killed for 1.5 s, then started again: every request is
    answered 200 (in fail-open mode the outage explains no error at all: no 5xx, no 4xx), requests keep being served
    during the outage, /readyz reports Redis unreachable during it and ok within 5 s of its restart, and the usage the
    gateway reports afterwards (tenant and admin API) counts exactly the requests served and their characters.
    """
    with GatewayProcess(tenancy_config(outage_redis.url), tmp_path) as replica:
        admin = Admin(replica.base_url)
        try:
            key = new_key(admin, requests_per_minute=100_000)
            async with httpx.AsyncClient(base_url=replica.base_url, timeout=30) as http:
                load = Load(http, key)
                lanes = [asyncio.create_task(load.lane(n)) for n in range(6)]
                await asyncio.sleep(0.5)
                served_during, seen = await outage(http, outage_redis, load)
                await wait_for_redis(http, timeout_s=5.0)
                await asyncio.sleep(0.5)  # load goes on against the restarted Redis
                load.stop.set()
                await asyncio.gather(*lanes)
                assert [r.status_code for r in load.failed] == []
                assert seen == "unreachable" and served_during > 0, (seen, served_during)
                record = await usage(http, key)
                metrics = (await http.get("/metrics")).text
            everyone = {row["id"]: row for row in admin.http.get("/admin/usage", params={"limit": 100}).json()["data"]}
        finally:
            admin.close()
    assert record["requests"] == len(load.served) > 20
    assert record["input_characters"] == sum(len(text) for text in load.served)
    assert everyone[record["tenant"]]["requests"] == len(load.served)
    fail_open = next(line for line in metrics.splitlines() if line.startswith("tts_limits_fail_open_admissions_total"))
    assert float(fail_open.split()[-1]) > 0  # the outage was really met by requests


# ------------------------------------------------------------------ 2. a worker killed mid-stream
async def stream_to_end(
    http: httpx.AsyncClient,
    key: str,
    text: str,
    started: asyncio.Event | None = None,
) -> tuple[int, bool]:
    """Read one stream; returns the bytes received and whether the stream ended complete."""
    received = 0
    try:
        async with http.stream(
            "POST", "/v1/audio/speech", json=speech("steady", text), headers=bearer(key)
        ) as response:
            assert response.status_code == 200
            async for chunk in response.aiter_raw():
                received += len(chunk)
                if started is not None:
                    started.set()
    except httpx.RemoteProtocolError:  # the chunked response ended without its last chunk
        return received, False
    return received, True


async def test_a_worker_killed_mid_stream_ends_its_streams_and_the_pool_heals(
    faulty: GatewayProcess,
    admin: Admin,
) -> None:
    """Two syntheses run on the two workers of ``steady``, each streamed to three clients (single-flight).

    Must hold when one worker is killed with SIGKILL mid-stream: the three streams of its synthesis end truncated
    (no final chunk, fewer bytes than the clip), the three others end complete with every byte, a new request made
    right after the kill is served, and within 10 s the pool is back to its two ready workers (one restart, the
    victim gone) with no job left.
    """
    key = new_key(admin)
    before = faulty.wait_engine("steady", ready_workers=2, active_jobs=0)
    texts = [f"{uuid.uuid4().hex[:8]} kill {n} " + "x" * 30 for n in range(2)]  # 2 s each, in real time
    started = [asyncio.Event() for _ in range(6)]
    async with httpx.AsyncClient(base_url=faulty.base_url, timeout=30) as http:
        streams = [asyncio.create_task(stream_to_end(http, key, texts[n % 2], started[n])) for n in range(6)]
        async with asyncio.timeout(10):
            await asyncio.gather(*(event.wait() for event in started))
        os.kill(before["pids"][0], signal.SIGKILL)
        killed_at = time.monotonic()
        after_kill = await http.post(
            "/v1/audio/speech", json=speech("steady", "served after the kill"), headers=bearer(key)
        )
        results = await asyncio.gather(*streams)
        healed = await asyncio.to_thread(faulty.wait_engine, "steady", 10.0, ready_workers=2, active_jobs=0)
    assert after_kill.status_code == 200 and after_kill.content
    groups = {text: results[n::2] for n, text in enumerate(texts)}  # stream n follows texts[n % 2]
    outcomes = sorted([complete for _, complete in group] for group in groups.values())
    assert outcomes == [[False] * 3, [True] * 3]  # one synthesis died with its worker, the other finished
    for text, group in groups.items():
        for received, complete in group:
            clip = pcm_bytes(text, 0.05)
            assert (received == clip) if complete else (0 < received < clip)
    assert healed["restarts"] == before["restarts"] + 1
    assert before["pids"][0] not in healed["pids"] and len(healed["pids"]) == 2
    assert time.monotonic() - killed_at < 10.0


# ------------------------------------------------------------------ 3. two hundred aborted streams
async def abort_after_first_chunk(http: httpx.AsyncClient, key: str, text: str) -> int:
    async with http.stream("POST", "/v1/audio/speech", json=speech("steady", text), headers=bearer(key)) as response:
        async for _ in response.aiter_raw():
            break  # leaving the block closes the connection mid-stream
        return response.status_code


async def hold_streams(http: httpx.AsyncClient, key: str, count: int) -> tuple[list[int], httpx.Response]:
    """Open ``count`` streams and, while they all run, one more; then read them all to their end."""
    async with contextlib.AsyncExitStack() as streams:
        responses = [
            await streams.enter_async_context(
                http.stream(
                    "POST",
                    "/v1/audio/speech",
                    json=speech("steady", f"{uuid.uuid4().hex[:6]} held {n}"),
                    headers=bearer(key),
                )
            )
            for n in range(count)
        ]
        one_more = await http.post("/v1/audio/speech", json=speech("steady", "one too many"), headers=bearer(key))
        for response in responses:
            await response.aread()
    return [response.status_code for response in responses], one_more


async def test_two_hundred_aborted_streams_leak_no_lease_job_or_usage(faulty: GatewayProcess, admin: Admin) -> None:
    """A tenant limited to 2 concurrent streams opens 200 streams one after the other and drops each after its first
    chunk.

    Must hold: every one of them was admitted (200: the leases of the dropped ones were given back in time), then the
    pool has no job running or queued and replaced no worker (cancellation, not kills), the server holds no more open
    files than before (give or take 10), the tenant's usage counts all 200 with their characters, and the tenant can
    again hold its 2 streams at once, while a third is refused with 429 (the limit is still enforced).
    """
    key = new_key(admin, concurrent_streams=2)
    server = psutil.Process(faulty.process.pid)  # type: ignore[union-attr]
    before = faulty.wait_engine("steady", ready_workers=2, active_jobs=0)
    fds_before = server.num_fds()
    texts = [f"{uuid.uuid4().hex[:6]} abort {n} " + "x" * 100 for n in range(200)]  # 5 s of audio each
    async with httpx.AsyncClient(base_url=faulty.base_url, timeout=30) as http:
        statuses = [await abort_after_first_chunk(http, key, text) for text in texts]
        assert statuses == [200] * 200
        after = await asyncio.to_thread(faulty.wait_engine, "steady", 5.0, active_jobs=0, queued=0, busy_workers=0)
        assert (after["pids"], after["restarts"]) == (before["pids"], before["restarts"])
        assert server.num_fds() <= fds_before + 10
        record = await wait_for_usage(http, key, 200)
        assert record["requests"] == 200
        assert record["input_characters"] == sum(len(text) for text in texts)
        held, one_more = await hold_streams(http, key, 2)
    assert held == [200, 200]
    assert one_more.status_code == 429 and one_more.json()["error"]["code"] == "concurrency_limit_exceeded"


# ------------------------------------------------------------------ 4. a client that stops reading
def stalled_client(port: int, key: str, text: str) -> socket.socket:
    """A raw HTTP client that sends a speech request, reads the response headers, and then never reads again."""
    body = json.dumps(speech("long", text)).encode()
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: the window stays tiny
    client.connect(("127.0.0.1", port))
    client.sendall(
        b"POST /v1/audio/speech HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\n"
        b"authorization: Bearer "
        + key.encode()
        + b"\r\ncontent-length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )
    head = b""
    while b"\r\n\r\n" not in head:
        head += client.recv(1024)
    assert head.startswith(b"HTTP/1.1 200 "), head
    return client


async def wait_for_the_lease(http: httpx.AsyncClient, gateway: GatewayProcess, deadline: float) -> int:
    """Retry a stream while the tenant's only lease is taken, until ``deadline``; returns the peak RSS meanwhile."""
    peak = rss(gateway)
    while (response := await http.post("/v1/audio/speech", json=speech("synthetic", "after"))).status_code != 200:
        assert response.status_code == 429, response.text
        assert time.monotonic() < deadline, "the stalled stream still holds its lease"
        peak = max(peak, rss(gateway))
        await asyncio.sleep(0.1)
    return peak


def syntheses_completed(metrics: str, engine: str) -> float:
    prefix = f'tts_synthesis_seconds_count{{engine="{engine}"}}'
    return next((float(line.split()[-1]) for line in metrics.splitlines() if line.startswith(prefix)), 0.0)


async def test_a_client_that_stops_reading_is_abandoned_after_the_send_timeout(
    faulty: GatewayProcess,
    admin: Admin,
) -> None:
    """A client limited to 1 concurrent stream asks for 819 s of PCM (39 MB, made in about 10 s) and stops reading
    after the headers, with a 4 KiB receive buffer.

    Must hold: its stream holds the tenant's lease at first (a second stream is refused), and within the send timeout
    (2 s) plus 4 s the gateway has abandoned it: the lease is free again (a new stream is served), the engine has no
    job (the synthesis was cancelled, not completed), its usage is recorded, and the server's memory grew by less than
    32 MiB meanwhile (less than the clip: it was never buffered whole).
    """
    key = new_key(admin, concurrent_streams=1)
    async with httpx.AsyncClient(base_url=faulty.base_url, timeout=30, headers=bearer(key)) as http:
        completed = syntheses_completed((await http.get("/metrics")).text, "long")
        memory_before = rss(faulty)
        text = f"{uuid.uuid4().hex} stall " + "x" * 4000
        client = await asyncio.to_thread(stalled_client, faulty.port, key, text)
        try:
            started = time.monotonic()
            assert (await http.post("/v1/audio/speech", json=speech("synthetic", "meanwhile"))).status_code == 429
            peak = await wait_for_the_lease(http, faulty, started + SEND_TIMEOUT_S + 4)
            freed_s = time.monotonic() - started
            engine = await asyncio.to_thread(faulty.wait_engine, "long", 3.0, active_jobs=0, queued=0)
            record = await wait_for_usage(http, key, 2)
            metrics = (await http.get("/metrics")).text
        finally:
            client.close()
    assert engine["restarts"] == 0
    assert syntheses_completed(metrics, "long") == completed  # abandoned part way, not synthesized to the end
    assert record["requests"] == 2 and record["input_characters"] == len(text) + len("after")
    assert peak - memory_before < 32 * MiB, f"RSS grew by {(peak - memory_before) / MiB:.1f} MiB"
    assert freed_s > SEND_TIMEOUT_S - 0.5  # held until the timeout: nothing else freed it


# ------------------------------------------------------------------ 5. malformed and oversized requests at rate
def bad_requests() -> list[tuple[bytes, str, int, str | None]]:
    """(body, content type, expected status, expected param) for every kind of bad request."""
    cases: list[tuple[bytes, str, int, str | None]] = [
        (json.dumps(body).encode(), "application/json", status, param) for _, body, status, param in BAD_BODIES
    ]
    cases += [
        (b'{"model": "synthetic", "input": ', "application/json", 400, None),  # invalid JSON
        (b"[1, 2, 3]", "application/json", 400, None),  # JSON, but not an object
        (json.dumps({**VALID, "input": "a" * 70000}).encode(), "application/json", 413, None),  # over max_body_bytes
        (json.dumps({**VALID, "input": "a" * 5000}).encode(), "application/json", 400, "input"),  # over 4096 chars
        (json.dumps(VALID).encode(), "text/plain", 415, None),
    ]
    return cases


async def send_bad(http: httpx.AsyncClient, case: tuple[bytes, str, int, str | None]) -> httpx.Response:
    body, content_type, _, _ = case
    return await http.post("/v1/audio/speech", content=body, headers={"content-type": content_type})


async def test_garbage_at_rate_gets_openai_4xx_and_nothing_else(faulty: GatewayProcess, admin: Admin) -> None:
    """300 bad requests at once (every case of test_errors, invalid JSON, bodies over max_body_bytes, inputs over 4096
    characters, wrong content types) over 50 connections.

    Must hold: each answer is the 4xx its case calls for, with OpenAI's error body; none is a 5xx; a valid request is
    served right after; and the server's memory grew by less than 16 MiB over the 300 (measured after one warm-up
    round, so that first-use allocations do not count).
    """
    key = new_key(admin)
    cases = bad_requests()
    limits = httpx.Limits(max_connections=50)
    async with httpx.AsyncClient(base_url=faulty.base_url, timeout=30, headers=bearer(key), limits=limits) as http:
        for case in cases:  # warm-up
            await send_bad(http, case)
        memory_before = rss(faulty)
        batch = [cases[n % len(cases)] for n in range(300)]
        responses = await asyncio.gather(*(send_bad(http, case) for case in batch))
        memory_after = rss(faulty)
        valid = await http.post("/v1/audio/speech", json={**VALID, "input": f"still here {uuid.uuid4().hex}"})
    assert [r.status_code for r in responses if r.status_code >= 500] == []
    for response, (_, _, status, param) in zip(responses, batch, strict=True):
        assert_openai_error(response, status, param)
    assert valid.status_code == 200 and valid.content
    assert memory_after - memory_before < 16 * MiB, f"RSS grew by {(memory_after - memory_before) / MiB:.1f} MiB"
