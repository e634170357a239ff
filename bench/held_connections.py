"""What one tenant's held connections (issue #38) take from a live gateway, and what another tenant keeps meanwhile.

    .venv/bin/python -m bench.held_connections                 # about three minutes
    .venv/bin/python -m bench.held_connections --attack-s 30   # longer attacks
    .venv/bin/python -m bench.held_connections --only sessions --only replicas   # some phases only (repeat --only)
    .venv/bin/python -m bench.held_connections --only bodies --trickle-every-s 1  # 1,100-byte bursts a second apart

A ``redis-server`` of its own (no persistence), and ``chattts-gateway serve`` with default settings but for what the
scenario needs: ``redis_url``, two tenants with API keys (``attacker`` and ``bystander``, default limits: 100 open
sessions across replicas, 50 bodies in flight per replica), and the espeak engine only. The attacker connects from
four loopback addresses (127.0.0.2-127.0.0.5, a quarter each: the server counts connections per peer address), the
bystander from 127.0.0.1. Each phase first measures the bystander idle (``--idle-s``), then attacks for
``--attack-s`` while the bystander goes on; everything the attacker opened is closed before the next phase.

- **sessions**: 1,000 WebSocket sessions on ``/v1/audio/speech/stream`` (API key in the ``Authorization`` header),
  opened within two seconds, each once, and held open without a word: how many were accepted (``session.created``)
  and still open at the end, and how the others were refused (close code and error code, or the HTTP status and code
  of a refused upgrade).
- **uploads**: 1,000 consent recordings (``POST /v1/audio/voice_consents``) each announcing a 10 MiB body and
  trickling 1,100 bytes a second, written every 0.2 s (``--trickle-every-s``; over the 1,024 of
  ``server.body_min_rate_bytes_per_s``, so no body is cut for being slow): how many were still being read at the end
  (no answer: in flight), and how the others were answered (the upload routes' own ``uploads.max_per_tenant``, 4,
  refuses before ``bodies_in_flight`` would).
- **bodies**: the same against ``POST /v1/audio/speech`` with a 64 KiB JSON body (``server.max_body_bytes``): a
  route without the upload routes' own cap (``uploads.max_per_tenant``), so only ``bodies_in_flight`` holds it.
- **both**: sessions and uploads at once: 500 connections opened from each address, more than its
  ``server.max_connections_per_address`` (256) would take if all were held.
- **replicas**: two gateways sharing the Redis; the sessions alternate between them, as do the bystander's requests.
- **requests**: 1,000 short espeak requests (``POST /v1/audio/speech``) of the bystander sent at once, a quarter from
  each attacker address, Redis healthy: their answers by status and error code (the target: no ``503
  backend_unavailable``; refusals such as ``503 engine_overloaded`` are expected), and
  ``tts_redis_pool_exhausted_total`` over the burst.
- **cancels**: 500 streamed requests of a third tenant (``canceller``, ``concurrent_streams: 2``), each cancelled by
  the client (its connection closed) a random 0-50 ms after it was sent, while 1,000 requests of the bystander flood
  the same replica; 2 s after the last one ended the canceller opens 2 streams at once, which must both be served
  (no stream lease left held), tried again every second up to 30 s if not. Each try also counts the canceller's live
  stream leases in Redis.
- **midstream**: the same check after 500 of the canceller's requests were each cancelled a random 0-50 ms after
  their first audio bytes arrived (the response had begun: the cancel lands on a stream being served). Four clients
  ask in turn, twice the canceller's ``concurrent_streams``, so each lease released is wanted again at once (one asked
  while none is free waits ``limits.stream_wait_s`` and may get 429: counted, not cancelled); meanwhile the bystander,
  from a process of its own, floods the same replica with 1,000 requests at once, again and again until the 500th
  cancel.

The bystander, in a process of its own (the attacker's thousand sockets share this one's event loop), sends a short
espeak request (streamed ``pcm``, a different text each time, so the audio cache never answers) every
``--interval-s``, whatever the previous ones are doing: its share served (200 with audio within 10 s), and its time to
first byte during the attack over its median idle just before. The gateway's own counts,
``tts_requests_refused_total`` and ``tts_rate_limit_rejections_total`` over the phase and ``tts_realtime_connections``
at its end, come with each phase.

Prints Markdown tables and writes every figure to ``bench/results/held_connections.json`` (``--output`` elsewhere).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import multiprocessing
import platform
import random
import resource
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np
import redis
from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException

from auth.keys import generate_api_key, hash_api_key
from harness.gateway_process import GatewayProcess, free_port

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
    from multiprocessing.connection import Connection

    from websockets.asyncio.client import ClientConnection

__all__ = [
    "AttackFigures",
    "BystanderFigures",
    "BystanderPlan",
    "CancelsRow",
    "MidstreamRow",
    "PhaseRow",
    "RequestsRow",
    "main",
    "run_phase",
]

RESULTS = Path(__file__).resolve().parent / "results" / "held_connections.json"
ATTACK_ADDRESSES = ("127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5")
HOST = "127.0.0.1"
STREAM_PATH = "/v1/audio/speech/stream"
MODEL = "espeak"
SPEECH_TEXT = "Bystander request %06d."  # fixed length; the number keeps the cache out
CONNECTIONS = 1000
RAMP_S = 2.0  # the attacker's connections are opened evenly over this long
TRICKLE_BYTES_PER_S = 1100
# A write every 0.2 s, as a steady link sends: a write a second can put 9 of them in one of the server's 10 s
# intervals (9,900 bytes, under the 10,240 that body_min_rate_bytes_per_s asks of one) and the body is cut with 408.
TRICKLE_EVERY_S = 0.2
UPLOAD_BYTES = 10 * 1024 * 1024
SPEECH_BODY_BYTES = 64 * 1024  # server.max_body_bytes
REQUEST_TIMEOUT_S = 10.0
OPEN_TIMEOUT_S = 20.0
PERCENTILES = (50, 90, 99)
PHASES = ("sessions", "uploads", "bodies", "both", "replicas", "requests", "cancels", "midstream")
FLOOD = 1000  # the requests phase's burst, and the cancels phase's background load
CANCELS = 500
CANCEL_ADDRESSES = ("127.0.0.6", "127.0.0.7")
CANCEL_WITHIN_S = 0.05
CANCELLER_STREAMS = 2  # the canceller's concurrent_streams
SETTLE_CHECK_S = 2.0  # after the last cancelled request ended, the canceller's streams are tried
SETTLE_GIVE_UP_S = 30.0
FLOOD_TIMEOUT_S = 30.0
FLOOD_TEXT = "Flood request %06d."
MIDSTREAM_CLIENTS = 4  # twice CANCELLER_STREAMS
MIDSTREAM_GIVE_UP_S = 300.0
# Several sentences: espeak speaks one at a time, so the response goes on well past its first bytes.
MIDSTREAM_TEXT = "Cancelled while speaking, request %06d. " + "This sentence is here to keep the stream going. " * 6
BOUNDARY = "heldconnectionsbench"


# ------------------------------------------------------------------------------------------------ what is reported
@dataclass(slots=True)
class AttackFigures:
    """What one kind of the attacker's connections got."""

    kind: str
    sent: int = 0
    held: int = 0
    """Still accepted at the end of the attack: a session open, a body still being read (no answer yet)."""
    held_by_replica: list[int] = field(default_factory=list)
    answers: dict[str, int] = field(default_factory=dict)
    """How the others ended, by answer (close code and error code, HTTP status and code, or what the socket did)."""


@dataclass(slots=True)
class BystanderFigures:
    requests: int
    served: int
    share: float
    idle_p50_ms: float | None
    first_byte_ms: dict[str, float | None]
    ratio_to_idle: float | None
    failures: dict[str, int]
    attack_first_byte_ms: list[float | None]
    """Each request's during the attack, in the order sent (one every ``--interval-s`` from the attack's start)."""
    ramp_first_byte_ms: dict[str, float | None]
    """Those sent in the attack's first :data:`RAMP_S` + 1 s, while its connections were opened and refused."""
    held_first_byte_ms: dict[str, float | None]
    """Those sent afterwards, while the attacker only held what it was let hold."""
    held_ratio_to_idle: float | None


@dataclass(slots=True)
class PhaseRow:
    phase: str
    replicas: int
    attack_s: float
    attacks: list[AttackFigures]
    bystander: BystanderFigures
    refused: dict[str, int]
    """``tts_requests_refused_total`` over the phase, by ``source status code``, every replica together."""
    rejections: dict[str, int]
    """``tts_rate_limit_rejections_total`` over the phase, by ``tenant reason``."""
    realtime_connections: list[int]
    """``tts_realtime_connections`` of each replica at the end of the attack, before anything was closed."""


@dataclass(slots=True)
class RequestsRow:
    """The requests phase: one burst of :data:`FLOOD` requests at once."""

    sent: int
    seconds: float
    answers: dict[str, int]
    """By status and error code (``200`` with audio), or the client's exception."""
    backend_unavailable: int
    pool_exhausted: int
    """``tts_redis_pool_exhausted_total`` over the burst."""
    refused: dict[str, int]


@dataclass(slots=True)
class CancelsRow:
    """The cancels phase: :data:`CANCELS` requests cancelled by the client under a flood of :data:`FLOOD`."""

    sent: int
    outcomes: dict[str, int]
    """``cancelled before the response`` / ``cancelled after the response began``, or the answer that came first."""
    flood_answers: dict[str, int]
    pool_exhausted: int
    refused: dict[str, int]
    checks: list[dict[str, Any]]
    """Each try of :data:`CANCELLER_STREAMS` streams at once: seconds after the last cancelled one ended, answers."""
    served_after_s: float | None
    """When they were first both served (seconds after the last cancelled request ended); ``None``: never in 30 s."""


@dataclass(slots=True)
class MidstreamRow:
    """The midstream phase: :data:`CANCELS` streams cancelled after their first audio, under repeated floods."""

    cancelled: int
    outcomes: dict[str, int]
    """Every request the canceller sent, by what became of it."""
    seconds: float
    floods: int
    flood_answers: dict[str, int]
    pool_exhausted: int
    refused: dict[str, int]
    checks: list[dict[str, Any]]
    """Each try of :data:`CANCELLER_STREAMS` streams at once: seconds after the last cancel, live leases, answers."""
    served_after_s: float | None


# ------------------------------------------------------------------------------------------------ the servers
class RedisProcess:
    """A ``redis-server`` without persistence on a free port, for as long as the block runs."""

    def __init__(self, workdir: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise SystemExit("redis-server is not installed")
        self.port = free_port()
        self.url = f"redis://{HOST}:{self.port}/0"
        command = [binary, "--port", str(self.port), "--bind", HOST, "--save", "", "--appendonly", "no"]
        with (workdir / "redis.log").open("wb") as log:
            self.process = subprocess.Popen([*command, "--dir", str(workdir)], stdout=log, stderr=subprocess.STDOUT)
        client = redis.Redis(host=HOST, port=self.port, socket_connect_timeout=0.2)
        deadline = time.monotonic() + 10
        try:
            while not _pings(client):
                if time.monotonic() > deadline or self.process.poll() is not None:
                    self.stop()
                    raise RuntimeError("redis-server did not start")
                time.sleep(0.05)
        finally:
            client.connection_pool.disconnect()

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False


def gateway_config(redis_url: str, keys: dict[str, str]) -> dict[str, Any]:
    """Defaults, but Redis, the tenants (default limits, but the canceller's streams) and the espeak engine alone."""
    tenants: list[dict[str, Any]] = [
        {"name": name, "api_key_sha256": [hash_api_key(key)]} for name, key in keys.items()
    ]
    for tenant in tenants:
        if tenant["name"] == "canceller":
            tenant["limits"] = {"concurrent_streams": CANCELLER_STREAMS}
    return {"redis_url": redis_url, "auth": {"tenants": tenants}, "engines": {MODEL: {"kind": "espeak"}}, "aliases": {}}


def metric_totals(gateways: Sequence[GatewayProcess]) -> dict[str, Counter[str]]:
    """Samples of the counters and gauge this bench reports, summed over ``gateways`` (the gauge kept per gateway)."""
    totals: dict[str, Counter[str]] = {"refused": Counter(), "rejections": Counter(), "realtime": Counter()}
    for number, gateway in enumerate(gateways):
        text = httpx.get(f"{gateway.base_url}/metrics", timeout=10).text
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = sample.labels
                if sample.name == "tts_requests_refused_total":
                    totals["refused"][f"{labels['source']} {labels['status']} {labels['code']}"] += int(sample.value)
                elif sample.name == "tts_rate_limit_rejections_total":
                    totals["rejections"][f"{labels['tenant']} {labels['reason']}"] += int(sample.value)
                elif sample.name == "tts_realtime_connections":
                    totals["realtime"][str(number)] = int(sample.value)
    return totals


# ------------------------------------------------------------------------------------------------ the bystander
async def _one_speech(client: httpx.AsyncClient, number: int) -> tuple[float | None, str | None]:
    """Seconds to the first audio byte of one short request, read to its end, or why it was not served."""
    body = {"model": MODEL, "input": SPEECH_TEXT % number, "voice": "alloy", "response_format": "pcm"}
    started = time.perf_counter()
    try:
        async with client.stream("POST", "/v1/audio/speech", json=body) as response:
            if response.status_code != httpx.codes.OK:
                await response.aread()
                return None, f"{response.status_code} {_error_code(response.content)}"
            first = None
            async for chunk in response.aiter_raw():
                if first is None and chunk:
                    first = time.perf_counter() - started
    except httpx.HTTPError as exc:
        return None, type(exc).__name__
    return first, None if first is not None else "no audio"


@dataclass(frozen=True, slots=True)
class BystanderPlan:
    """The bystander's requests over one window: one every ``interval_s`` for ``duration_s``, round robin over
    ``urls``, numbered from ``first_number``."""

    urls: list[str]
    key: str
    duration_s: float
    interval_s: float
    first_number: int


async def _bystander(plan: BystanderPlan) -> list[tuple[float | None, str | None]]:
    """Each request on its own schedule, whatever the previous ones are doing (no coordinated omission)."""
    headers = {"authorization": f"Bearer {plan.key}"}
    clients = [httpx.AsyncClient(base_url=url, headers=headers, timeout=REQUEST_TIMEOUT_S) for url in plan.urls]
    tasks = []
    started = time.perf_counter()
    for index in itertools.count():
        due = index * plan.interval_s
        if due >= plan.duration_s:
            break
        await asyncio.sleep(max(0.0, started + due - time.perf_counter()))
        tasks.append(asyncio.create_task(_one_speech(clients[index % len(clients)], plan.first_number + index)))
    results = await asyncio.gather(*tasks)
    for client in clients:
        await client.aclose()
    return list(results)


def _bystander_process(connection: Connection, plan: BystanderPlan) -> None:
    """The bystander's process: says it is ready, waits for the go, then sends what :func:`_bystander` measured."""
    connection.send("ready")
    connection.recv()
    connection.send(asyncio.run(_bystander(plan)))
    connection.close()


class Bystander:
    """The bystander's requests over one window, in a process of its own."""

    numbers = itertools.count(0, 10_000)

    def __init__(self, urls: list[str], key: str, duration_s: float, interval_s: float) -> None:
        context = multiprocessing.get_context("spawn")
        self._connection, child = context.Pipe()
        plan = BystanderPlan(urls, key, duration_s, interval_s, next(self.numbers))
        self._process = context.Process(target=_bystander_process, args=(child, plan), daemon=True)
        self._process.start()
        if self._connection.recv() != "ready":
            raise RuntimeError("the bystander's process did not start")

    def go(self) -> None:
        self._connection.send("go")

    def results(self) -> list[tuple[float | None, str | None]]:
        results: list[tuple[float | None, str | None]] = self._connection.recv()
        self._process.join(10)
        return results

    @classmethod
    def measure(cls, urls: list[str], key: str, duration_s: float, interval_s: float) -> list[Any]:
        bystander = cls(urls, key, duration_s, interval_s)
        bystander.go()
        return bystander.results()


def percentiles(values_ms: list[float]) -> dict[str, float | None]:
    if not values_ms:
        return {f"p{p}": None for p in PERCENTILES}
    return {f"p{p}": round(float(np.percentile(values_ms, p)), 2) for p in PERCENTILES}


def _ratio(median: float | None, idle: float | None) -> float | None:
    return round(median / idle, 2) if median is not None and idle else None


def bystander_figures(idle: list[Any], attacked: list[Any], interval_s: float) -> BystanderFigures:
    idle_p50 = percentiles([first * 1000 for first, _ in idle if first is not None])["p50"]
    served = [first * 1000 for first, _ in attacked if first is not None]
    figures = percentiles(served)
    ramp_requests = int((RAMP_S + 1) / interval_s)
    ramp = percentiles([first * 1000 for first, _ in attacked[:ramp_requests] if first is not None])
    held = percentiles([first * 1000 for first, _ in attacked[ramp_requests:] if first is not None])
    return BystanderFigures(
        requests=len(attacked),
        served=len(served),
        share=len(served) / len(attacked) if attacked else 0.0,
        idle_p50_ms=idle_p50,
        first_byte_ms=figures,
        ratio_to_idle=_ratio(figures["p50"], idle_p50),
        failures=dict(Counter(why for first, why in attacked if first is None and why is not None)),
        attack_first_byte_ms=[None if first is None else round(first * 1000, 2) for first, _ in attacked],
        ramp_first_byte_ms=ramp,
        held_first_byte_ms=held,
        held_ratio_to_idle=_ratio(held["p50"], idle_p50),
    )


# ------------------------------------------------------------------------------------------------ the attacker
def _error_code(body: bytes | bytearray) -> str:
    """An OpenAI error body's code and the first sentence of its message (which says which limit refused it)."""
    try:
        return _described(json.loads(body)["error"])
    except (ValueError, KeyError, TypeError):
        return "-"


def _described(error: dict[str, Any]) -> str:
    return f"{error.get('code')} ({str(error.get('message', '')).split('.')[0][:60]})"


class Attack:
    """The attacker's connections of one phase: each a task whose outcome is what its connection got, ``held`` while
    it is still accepted when :attr:`stop` is set."""

    def __init__(self) -> None:
        self.stop = asyncio.Event()
        self.tasks: dict[str, list[asyncio.Task[tuple[int, str]]]] = {}

    def launch(self, kind: str, coroutine: Any) -> None:
        self.tasks.setdefault(kind, []).append(asyncio.create_task(coroutine))

    async def finish(self, replicas: int) -> list[AttackFigures]:
        self.stop.set()
        figures = []
        for kind, tasks in self.tasks.items():
            outcomes = await asyncio.gather(*tasks)
            held = [replica for replica, answer in outcomes if answer == "held"]
            answers = Counter(answer for _, answer in outcomes if answer != "held")
            by_replica = [held.count(replica) for replica in range(replicas)]
            figures.append(AttackFigures(kind, len(tasks), len(held), by_replica, dict(answers)))
        return figures


async def hold_session(url: str, key: str, address: str, stop: asyncio.Event) -> str:
    """One WebSocket session, held open without a word until ``stop``: ``held``, or how it was refused or ended."""
    try:
        async with connect(
            url,
            additional_headers={"authorization": f"Bearer {key}"},
            local_addr=(address, 0),
            open_timeout=OPEN_TIMEOUT_S,
            ping_interval=None,  # the server pings; the client answers
            compression=None,
            close_timeout=2,
        ) as socket:
            return await _session_outcome(socket, stop)
    except InvalidStatus as refused:
        return f"HTTP {refused.response.status_code} {_error_code(refused.response.body or b'')}"
    except (OSError, TimeoutError, WebSocketException) as exc:
        return type(exc).__name__


async def _session_outcome(socket: ClientConnection, stop: asyncio.Event) -> str:
    try:
        first = json.loads(await socket.recv())
        if first.get("type") == "session.created":
            stopped = asyncio.create_task(stop.wait())
            closed = asyncio.create_task(socket.wait_closed())
            await asyncio.wait({stopped, closed}, return_when=asyncio.FIRST_COMPLETED)
            stopped.cancel()
            if not closed.done():
                return "held"
            closed.cancel()
            return f"closed while held {socket.close_code}"
        code = _described(first["error"]) if first.get("type") == "error" else first.get("type")
        with contextlib.suppress(ConnectionClosed):
            await socket.recv()
        return f"close {socket.close_code} {code}"
    except ConnectionClosed:
        return f"close {socket.close_code} -"


@dataclass(frozen=True, slots=True)
class SlowBody:
    """A request whose body is announced whole and sent at :data:`TRICKLE_BYTES_PER_S`."""

    path: str
    content_type: str
    length: int
    preamble: bytes
    """The body's first bytes, sent with the head; zeros follow."""
    every_s: float = TRICKLE_EVERY_S
    """How often what is owed at :data:`TRICKLE_BYTES_PER_S` is written."""

    def head(self, port: int, key: str) -> bytes:
        return (
            f"POST {self.path} HTTP/1.1\r\nHost: {HOST}:{port}\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: {self.content_type}\r\nContent-Length: {self.length}\r\n\r\n"
        ).encode()


def consent_upload(every_s: float = TRICKLE_EVERY_S) -> SlowBody:
    """A consent recording of 10 MiB: the form's fields, then the file's part, whose bytes never end."""
    fields = "".join(
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'
        for name, value in (("name", "held"), ("language", "en"))
    )
    file_part = (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="recording"; filename="held.wav"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    )
    content_type = f"multipart/form-data; boundary={BOUNDARY}"
    return SlowBody("/v1/audio/voice_consents", content_type, UPLOAD_BYTES, (fields + file_part).encode(), every_s)


def speech_body(every_s: float = TRICKLE_EVERY_S) -> SlowBody:
    """A speech request of 64 KiB of JSON, whose input never ends."""
    preamble = f'{{"model": "{MODEL}", "voice": "alloy", "input": "'.encode()
    return SlowBody("/v1/audio/speech", "application/json", SPEECH_BODY_BYTES, preamble, every_s)


async def send_slowly(body: SlowBody, port: int, key: str, address: str, stop: asyncio.Event) -> str:
    """One slow body until ``stop``: ``held`` while still being read then, else what it was answered."""
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(HOST, port, local_addr=(address, 0)), OPEN_TIMEOUT_S
        )
    except (OSError, TimeoutError) as exc:
        return f"connect: {type(exc).__name__}"
    answer = asyncio.create_task(_read_answer(reader))
    try:
        writer.write(body.head(port, key) + body.preamble)
        started, sent, most = time.monotonic(), 0, body.length - len(body.preamble) - 1  # never the last byte
        while not stop.is_set():
            done, _ = await asyncio.wait({answer}, timeout=body.every_s)
            if done:
                return answer.result()
            # By the clock, not by the turns: a late turn of a busy loop sends what it owes.
            owed = min(int((time.monotonic() - started) * TRICKLE_BYTES_PER_S), most) - sent
            if owed > 0:
                writer.write(bytes(owed))
                sent += owed
        return "held"
    except OSError as exc:
        return f"send: {type(exc).__name__}"
    finally:
        answer.cancel()
        writer.close()


async def _read_answer(reader: asyncio.StreamReader) -> str:
    """The response's status and error code, or how the connection ended without one."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as ended:
        return "closed, no answer" if not ended.partial else "incomplete answer"
    except OSError as exc:
        return f"read: {type(exc).__name__}"
    lines = head.decode("latin-1").split("\r\n")
    status = lines[0].split(" ")[1]
    length = next((int(line.split(":")[1]) for line in lines if line.lower().startswith("content-length:")), 0)
    try:
        body = await reader.readexactly(length)
    except (asyncio.IncompleteReadError, OSError):
        body = b""
    return f"HTTP {status} {_error_code(body)}"


def _spread(count: int) -> Iterator[tuple[int, str]]:
    """Connection numbers with the source address each is sent from, a quarter each."""
    for number in range(count):
        yield number, ATTACK_ADDRESSES[number % len(ATTACK_ADDRESSES)]


async def _ramp(attack: Attack, kind: str, count: int, start: Callable[[int, str], Any]) -> None:
    """``count`` connections of ``kind`` opened evenly over :data:`RAMP_S`; ``start(number, address)`` makes each."""
    began = time.perf_counter()
    for number, address in _spread(count):
        await asyncio.sleep(max(0.0, began + number * RAMP_S / count - time.perf_counter()))
        attack.launch(kind, start(number, address))


async def _tagged(replica: int, outcome: Any) -> tuple[int, str]:
    return replica, await outcome


def _starter(kind: str, ports: list[int], key: str, stop: asyncio.Event, every_s: float) -> Callable[[int, str], Any]:
    """What opens connection ``number`` of ``kind`` from ``address``: sessions alternate over the replicas (a
    quarter of each address's on each), bodies go to the first."""
    if kind == "sessions":

        def session(number: int, address: str) -> Coroutine[Any, Any, tuple[int, str]]:
            replica = number // len(ATTACK_ADDRESSES) % len(ports)
            url = f"ws://{HOST}:{ports[replica]}{STREAM_PATH}"
            return _tagged(replica, hold_session(url, key, address, stop))

        return session
    body = consent_upload(every_s) if kind == "uploads" else speech_body(every_s)

    def slow_body(number: int, address: str) -> Coroutine[Any, Any, tuple[int, str]]:
        return _tagged(0, send_slowly(body, ports[0], key, address, stop))

    return slow_body


#: The attacker's connections in each phase.
KINDS = {"sessions": ["sessions"], "uploads": ["uploads"], "bodies": ["bodies"], "both": ["sessions", "uploads"]}


@contextlib.asynccontextmanager
async def attacking(phase: str, gateways: Sequence[GatewayProcess], key: str, every_s: float) -> AsyncIterator[Attack]:
    """The phase's connections, all launched when the block starts (its figures are :meth:`Attack.finish`'s)."""
    attack = Attack()
    ports = [gateway.port for gateway in gateways]
    ramps = [
        _ramp(attack, kind, CONNECTIONS, _starter(kind, ports, key, attack.stop, every_s))
        for kind in KINDS.get(phase, ["sessions"])
    ]
    await asyncio.gather(*ramps)
    try:
        yield attack
    finally:
        attack.stop.set()


# ------------------------------------------------------------------------------------------------ a phase
async def _attack_phase(
    phase: str, gateways: Sequence[GatewayProcess], key: str, args: argparse.Namespace, bystander: Bystander
) -> tuple[list[AttackFigures], dict[str, Counter[str]]]:
    started = time.perf_counter()
    bystander.go()
    async with attacking(phase, gateways, key, args.trickle_every_s) as attack:
        await asyncio.sleep(max(0.0, args.attack_s - (time.perf_counter() - started)))
        at_end = await asyncio.to_thread(metric_totals, gateways)
        figures = await attack.finish(len(gateways))
    return figures, at_end


def run_phase(
    phase: str, gateways: Sequence[GatewayProcess], keys: dict[str, str], args: argparse.Namespace
) -> PhaseRow:
    """The bystander idle, then under the phase's attack; the gateway's counts over the attack."""
    urls = [gateway.base_url for gateway in gateways]
    idle = Bystander.measure(urls, keys["bystander"], args.idle_s, args.interval_s)
    before = metric_totals(gateways)
    bystander = Bystander(urls, keys["bystander"], args.attack_s, args.interval_s)
    attacks, at_end = asyncio.run(_attack_phase(phase, gateways, keys["attacker"], args, bystander))
    attacked = bystander.results()
    _settle(gateways)
    return PhaseRow(
        phase=phase,
        replicas=len(gateways),
        attack_s=args.attack_s,
        attacks=attacks,
        bystander=bystander_figures(idle, attacked, args.interval_s),
        refused=dict(at_end["refused"] - before["refused"]),
        rejections=dict(at_end["rejections"] - before["rejections"]),
        realtime_connections=[at_end["realtime"][str(number)] for number in range(len(gateways))],
    )


def _settle(gateways: Sequence[GatewayProcess], timeout_s: float = 30.0) -> None:
    """Wait until no realtime connection is left open (each session's lease released)."""
    deadline = time.monotonic() + timeout_s
    while any(metric_totals(gateways)["realtime"].values()) and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(2.0)  # what was refused or closed last leaves the address counts and the fair share


# ------------------------------------------------------------------------------------------------ requests, cancels
def pool_exhausted(gateway: GatewayProcess) -> int:
    text = httpx.get(f"{gateway.base_url}/metrics", timeout=10).text
    return sum(
        int(sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "tts_redis_pool_exhausted_total"
    )


def _clients(port: int, key: str, addresses: Sequence[str], timeout_s: float) -> list[httpx.AsyncClient]:
    """One client per source address, each allowed as many connections as it is given requests."""
    limits = httpx.Limits(max_connections=FLOOD, max_keepalive_connections=0)
    return [
        httpx.AsyncClient(
            base_url=f"http://{HOST}:{port}",
            headers={"authorization": f"Bearer {key}"},
            timeout=timeout_s,
            transport=httpx.AsyncHTTPTransport(local_address=address, limits=limits),
        )
        for address in addresses
    ]


async def _answered(client: httpx.AsyncClient, number: int) -> str:
    """One short request, read whole: ``200`` with audio, else its status and error code, or the exception."""
    body = {"model": MODEL, "input": FLOOD_TEXT % number, "voice": "alloy", "response_format": "pcm"}
    try:
        response = await client.post("/v1/audio/speech", json=body)
    except httpx.HTTPError as exc:
        return type(exc).__name__
    if response.status_code == httpx.codes.OK:
        return "200" if response.content else "200 without audio"
    return f"{response.status_code} {_error_code(response.content)}"


async def flood(port: int, key: str, count: int, first_number: int) -> Counter[str]:
    """``count`` requests at once, a quarter from each attacker address: their answers."""
    clients = _clients(port, key, ATTACK_ADDRESSES, FLOOD_TIMEOUT_S)
    try:
        answers = await asyncio.gather(*(_answered(clients[n % len(clients)], first_number + n) for n in range(count)))
    finally:
        for client in clients:
            await client.aclose()
    return Counter(answers)


def run_requests(gateway: GatewayProcess, keys: dict[str, str]) -> RequestsRow:
    before_pool, before = pool_exhausted(gateway), metric_totals([gateway])
    started = time.perf_counter()
    answers = asyncio.run(flood(gateway.port, keys["bystander"], FLOOD, 1_000_000))
    seconds = time.perf_counter() - started
    refused = dict(metric_totals([gateway])["refused"] - before["refused"])
    return RequestsRow(
        sent=FLOOD,
        seconds=round(seconds, 2),
        answers=dict(answers),
        backend_unavailable=sum(n for answer, n in answers.items() if "backend_unavailable" in answer),
        pool_exhausted=pool_exhausted(gateway) - before_pool,
        refused=refused,
    )


async def _cancelled(client: httpx.AsyncClient, number: int, after_s: float) -> tuple[str, float]:
    """One streamed request cancelled ``after_s`` after it was sent: how far it got, and when it ended."""
    began = asyncio.Event()
    body = {"model": MODEL, "input": FLOOD_TEXT % number, "voice": "alloy", "response_format": "pcm"}

    async def request() -> str:
        async with client.stream("POST", "/v1/audio/speech", json=body) as response:
            began.set()
            if response.status_code != httpx.codes.OK:
                await response.aread()
                return f"{response.status_code} {_error_code(response.content)}"
            async for _ in response.aiter_raw():
                pass
            return "200 (finished before the cancel)"

    task = asyncio.create_task(request())
    done, _ = await asyncio.wait({task}, timeout=after_s)
    if done:
        try:
            outcome = task.result()
        except httpx.HTTPError as exc:
            outcome = type(exc).__name__
        return outcome, time.perf_counter()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, httpx.HTTPError):
        await task
    state = "after the response began" if began.is_set() else "before the response"
    return f"cancelled {state}", time.perf_counter()


async def _streams_at_once(port: int, key: str) -> list[str]:
    async with httpx.AsyncClient(
        base_url=f"http://{HOST}:{port}", headers={"authorization": f"Bearer {key}"}, timeout=REQUEST_TIMEOUT_S
    ) as client:
        results = await asyncio.gather(
            *(_one_speech(client, 2_000_000 + random.randrange(1_000_000)) for _ in range(CANCELLER_STREAMS))
        )
    return ["200" if first is not None else str(why) for first, why in results]


async def _cancels(
    port: int, keys: dict[str, str], redis_url: str
) -> tuple[Counter[str], Counter[str], list[dict[str, Any]]]:
    background = asyncio.create_task(flood(port, keys["bystander"], FLOOD, 3_000_000))
    clients = _clients(port, keys["canceller"], CANCEL_ADDRESSES, REQUEST_TIMEOUT_S)
    try:
        ended = await asyncio.gather(
            *(
                _cancelled(clients[n % len(clients)], 4_000_000 + n, random.uniform(0, CANCEL_WITHIN_S))
                for n in range(CANCELS)
            )
        )
    finally:
        for client in clients:
            await client.aclose()
    last = max(at for _, at in ended)
    checks = await _settled_streams(port, keys["canceller"], redis_url, last)
    flood_answers = await background
    return Counter(outcome for outcome, _ in ended), flood_answers, checks


def run_cancels(gateway: GatewayProcess, keys: dict[str, str], redis_url: str) -> CancelsRow:
    before_pool, before = pool_exhausted(gateway), metric_totals([gateway])
    outcomes, flood_answers, checks = asyncio.run(_cancels(gateway.port, keys, redis_url))
    served = next((check["after_s"] for check in checks if all(a == "200" for a in check["answers"])), None)
    return CancelsRow(
        sent=CANCELS,
        outcomes=dict(outcomes),
        flood_answers=dict(flood_answers),
        pool_exhausted=pool_exhausted(gateway) - before_pool,
        refused=dict(metric_totals([gateway])["refused"] - before["refused"]),
        checks=checks,
        served_after_s=served,
    )


def live_leases(redis_url: str, tenant: str) -> int:
    """The tenant's stream leases not expired in Redis now (``auth/limits/redis.py``: a sorted set scored by expiry)."""
    client = redis.Redis.from_url(redis_url)
    try:
        seconds, microseconds = client.time()
        now_ms = seconds * 1000 + microseconds // 1000
        return int(client.zcount(f"tts:leases:{{{tenant}}}", f"({now_ms}", "+inf"))
    finally:
        client.close()


async def _settled_streams(port: int, key: str, redis_url: str, last: float) -> list[dict[str, Any]]:
    """From :data:`SETTLE_CHECK_S` after ``last``: the canceller's live leases and its streams at once, every second
    until both are served (up to :data:`SETTLE_GIVE_UP_S`)."""
    checks: list[dict[str, Any]] = []
    wait_s = SETTLE_CHECK_S
    while wait_s <= SETTLE_GIVE_UP_S:
        await asyncio.sleep(max(0.0, last + wait_s - time.perf_counter()))
        tried_at = round(time.perf_counter() - last, 2)
        leases = await asyncio.to_thread(live_leases, redis_url, "canceller")
        answers = await _streams_at_once(port, key)
        checks.append({"after_s": tried_at, "leases": leases, "answers": answers})
        if all(answer == "200" for answer in answers):
            break
        wait_s = tried_at + 1.0
    return checks


async def _cancelled_midstream(client: httpx.AsyncClient, number: int, after_first_s: float) -> str:
    """One streamed request, cancelled ``after_first_s`` after its first audio bytes arrived: what became of it."""
    first_audio = asyncio.Event()
    body = {"model": MODEL, "input": MIDSTREAM_TEXT % number, "voice": "alloy", "response_format": "pcm"}

    async def request() -> str:
        async with client.stream("POST", "/v1/audio/speech", json=body) as response:
            if response.status_code != httpx.codes.OK:
                await response.aread()
                return f"{response.status_code} {_error_code(response.content)}"
            async for chunk in response.aiter_raw():
                if chunk:
                    first_audio.set()
            return "200 (finished before the cancel)"

    task = asyncio.create_task(request())
    audio = asyncio.create_task(first_audio.wait())
    await asyncio.wait({task, audio}, return_when=asyncio.FIRST_COMPLETED)
    if not task.done():
        await asyncio.wait({task}, timeout=after_first_s)
    audio.cancel()
    if task.done():
        try:
            return task.result()
        except httpx.HTTPError as exc:
            return type(exc).__name__
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, httpx.HTTPError):
        await task
    return "cancelled after its first audio"


async def _midstream_client(client: httpx.AsyncClient, numbers: Iterator[int], outcomes: Counter[str]) -> float:
    """Ask, and cancel once the audio has begun, until :data:`CANCELS` were (or :data:`MIDSTREAM_GIVE_UP_S` passed);
    when its last one ended."""
    ended = time.perf_counter()
    give_up = ended + MIDSTREAM_GIVE_UP_S
    while outcomes["cancelled after its first audio"] < CANCELS and time.perf_counter() < give_up:
        outcome = await _cancelled_midstream(client, next(numbers), random.uniform(0, CANCEL_WITHIN_S))
        outcomes[outcome] += 1
        ended = time.perf_counter()
    return ended


def _flood_process(connection: Connection, port: int, key: str) -> None:
    """Floods of :data:`FLOOD` at once, one after another, until told to stop; then how many, and their answers."""

    async def floods() -> tuple[int, Counter[str]]:
        answers: Counter[str] = Counter()
        count = 0
        while not connection.poll():
            answers += await flood(port, key, FLOOD, 6_000_000 + count * FLOOD)
            count += 1
        return count, answers

    connection.send(asyncio.run(floods()))
    connection.close()


async def _midstream(port: int, keys: dict[str, str], redis_url: str) -> MidstreamRow:
    # The floods in a process of their own: in this one, the canceller's clients would cancel only when the flood's
    # thousand requests let them, long after their 50 ms (the cancels phase's cancels all landed before the response).
    context = multiprocessing.get_context("spawn")
    floods_connection, child = context.Pipe()
    flooding = context.Process(target=_flood_process, args=(child, port, keys["bystander"]), daemon=True)
    flooding.start()
    await asyncio.sleep(2.0)  # the process is up and its first flood in
    addresses = CANCEL_ADDRESSES * (MIDSTREAM_CLIENTS // len(CANCEL_ADDRESSES))
    clients = _clients(port, keys["canceller"], addresses, REQUEST_TIMEOUT_S)
    outcomes: Counter[str] = Counter()
    numbers = itertools.count(5_000_000)
    started = time.perf_counter()
    try:
        last = max(await asyncio.gather(*(_midstream_client(client, numbers, outcomes) for client in clients)))
    finally:
        for client in clients:
            await client.aclose()
    seconds = time.perf_counter() - started
    floods_connection.send("stop")  # the flood under way goes on through the first check
    checks = await _settled_streams(port, keys["canceller"], redis_url, last)
    floods, flood_answers = await asyncio.to_thread(floods_connection.recv)
    flooding.join(10)
    served = next((check["after_s"] for check in checks if all(a == "200" for a in check["answers"])), None)
    return MidstreamRow(
        cancelled=outcomes["cancelled after its first audio"],
        outcomes=dict(outcomes),
        seconds=round(seconds, 2),
        floods=floods,
        flood_answers=dict(flood_answers),
        pool_exhausted=0,
        refused={},
        checks=checks,
        served_after_s=served,
    )


def run_midstream(gateway: GatewayProcess, keys: dict[str, str], redis_url: str) -> MidstreamRow:
    before_pool, before = pool_exhausted(gateway), metric_totals([gateway])
    row = asyncio.run(_midstream(gateway.port, keys, redis_url))
    row.pool_exhausted = pool_exhausted(gateway) - before_pool
    row.refused = dict(metric_totals([gateway])["refused"] - before["refused"])
    return row


def print_midstream_table(rows: list[MidstreamRow]) -> None:
    if not rows:
        return
    print(f"\n| cancelled after first audio | all the canceller's requests | seconds | floods | the floods' answers | "
          f"pool exhausted | {CANCELLER_STREAMS} streams at once, tries (s after last cancel: live leases, answers) | "
          "both served after |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for m in rows:
        tries = "; ".join(f"{c['after_s']} s: {c['leases']} leases, {', '.join(c['answers'])}" for c in m.checks)
        served = "never (30 s)" if m.served_after_s is None else f"{m.served_after_s} s"
        print(f"| {m.cancelled} | {_answers(m.outcomes)} | {m.seconds} | {m.floods} | {_answers(m.flood_answers)} | "
              f"{m.pool_exhausted} | {tries} | {served} |")  # fmt: skip


def print_load_tables(requests: list[RequestsRow], cancels: list[CancelsRow]) -> None:
    if requests:
        print("\n| requests at once | seconds | answers | 503 backend_unavailable | tts_redis_pool_exhausted_total |")
        print("|---|---|---|---|---|")
        for r in requests:
            print(f"| {r.sent} | {r.seconds} | {_answers(r.answers)} | {r.backend_unavailable} | {r.pool_exhausted} |")
    if cancels:
        print("\n| cancelled (0-50 ms) | outcomes | the flood's answers | pool exhausted | "
              f"{CANCELLER_STREAMS} streams at once, tries (s after last cancel) | both served after |")  # fmt: skip
        print("|---|---|---|---|---|---|")
        for c in cancels:
            tries = "; ".join(
                f"{check['after_s']} s: {check.get('leases', '?')} leases, {', '.join(check['answers'])}"
                for check in c.checks
            )
            served = "never (30 s)" if c.served_after_s is None else f"{c.served_after_s} s"
            print(f"| {c.sent} | {_answers(c.outcomes)} | {_answers(c.flood_answers)} | {c.pool_exhausted} | "
                  f"{tries} | {served} |")  # fmt: skip


# ------------------------------------------------------------------------------------------------ report
def _answers(counts: dict[str, int]) -> str:
    return "; ".join(f"{count} x {answer}" for answer, count in sorted(counts.items(), key=lambda kv: -kv[1])) or "—"


def print_tables(rows: list[PhaseRow]) -> None:
    print("\n| phase | replicas | connections | sent | held at the end (per replica) | the others, by answer |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        for attack in row.attacks:
            by_replica = " + ".join(map(str, attack.held_by_replica)) if row.replicas > 1 else ""
            held = f"{attack.held} ({by_replica})" if by_replica else str(attack.held)
            print(f"| {row.phase} | {row.replicas} | {attack.kind} | {attack.sent} | {held} | "
                  f"{_answers(attack.answers)} |")  # fmt: skip
    print("\nThe bystander's speech, time to first byte (ms), over the whole attack, its ramp and after:\n")
    print("| phase | served | share | idle p50 | p50 | p90 | p99 | p50 / idle p50 | ramp p50 | ramp p99 | after: p50 | "
          "p99 | p50 / idle p50 | not served |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        b = row.bystander
        ms, ramp, after = b.first_byte_ms, b.ramp_first_byte_ms, b.held_first_byte_ms
        print(f"| {row.phase} | {b.served}/{b.requests} | {b.share:.1%} | {b.idle_p50_ms} | {ms['p50']} | "
              f"{ms['p90']} | {ms['p99']} | {b.ratio_to_idle} | {ramp['p50']} | {ramp['p99']} | {after['p50']} | "
              f"{after['p99']} | {b.held_ratio_to_idle} | {_answers(b.failures)} |")  # fmt: skip
    print("\nThe gateway's counts over each attack:\n")
    print("| phase | tts_requests_refused_total | tts_rate_limit_rejections_total | open realtime connections |")
    print("|---|---|---|---|")
    for row in rows:
        realtime = " + ".join(map(str, row.realtime_connections))
        print(f"| {row.phase} | {_answers(row.refused)} | {_answers(row.rejections)} | {realtime} |")


def _raise_open_file_limit(wanted: int = 16384) -> None:
    """This process holds the attacker's sockets, and the gateways it starts inherit the limit (which lowers their
    ``server.max_connections`` when it is short)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        raised = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))


def _log_findings(gateways: Sequence[GatewayProcess]) -> dict[str, int]:
    """Lines of the gateways' logs worth a look: warnings, errors, tracebacks."""
    found: Counter[str] = Counter()
    for gateway in gateways:
        for line in gateway.log().splitlines():
            for word in ("Traceback", '"level": "error"', '"level": "warning"', "lowered"):
                found[word] += word in line
    return dict(found)


@dataclass(slots=True)
class Results:
    rows: list[PhaseRow] = field(default_factory=list)
    requests: list[RequestsRow] = field(default_factory=list)
    cancels: list[CancelsRow] = field(default_factory=list)
    midstream: list[MidstreamRow] = field(default_factory=list)
    log: dict[str, int] = field(default_factory=dict)


def run(args: argparse.Namespace, workdir: Path) -> Results:
    keys = {"attacker": generate_api_key(), "bystander": generate_api_key(), "canceller": generate_api_key()}
    store = RedisProcess(workdir)
    gateways: list[GatewayProcess] = []
    results = Results()
    try:
        config = gateway_config(store.url, keys)
        for number in range(2 if "replicas" in args.only else 1):
            (workdir / f"gateway{number}").mkdir()
            gateways.append(GatewayProcess(config, workdir / f"gateway{number}").start())
        for phase in args.only:
            serving = gateways if phase == "replicas" else gateways[:1]
            print(f"{phase}: {len(serving)} replica(s)", flush=True)
            if phase == "requests":
                results.requests.append(run_requests(gateways[0], keys))
            elif phase == "cancels":
                results.cancels.append(run_cancels(gateways[0], keys, store.url))
            elif phase == "midstream":
                results.midstream.append(run_midstream(gateways[0], keys, store.url))
            else:
                results.rows.append(run_phase(phase, serving, keys, args))
            if phase in {"requests", "cancels", "midstream"}:
                _settle(serving)
        results.log = _log_findings(gateways)
        return results
    finally:
        for gateway in gateways:
            gateway.stop()
        store.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", action="append", choices=PHASES, help="this phase only (repeat)")
    parser.add_argument("--idle-s", type=float, default=8.0, help="the bystander alone, before each attack")
    parser.add_argument("--attack-s", type=float, default=25.0, help="each attack, from its first connection")
    parser.add_argument("--interval-s", type=float, default=0.3, help="between the bystander's requests")
    parser.add_argument(
        "--trickle-every-s",
        type=float,
        default=TRICKLE_EVERY_S,
        help="how often a slow body writes what it owes (1: bursts a second apart, which the minimum rate cuts)",
    )
    parser.add_argument("--output", type=Path, default=RESULTS, help="where the JSON goes")
    args = parser.parse_args()
    args.only = args.only or list(PHASES)
    _raise_open_file_limit()
    with tempfile.TemporaryDirectory(prefix="held-connections-") as workdir:
        results = run(args, Path(workdir))
    if results.rows:
        print_tables(results.rows)
    print_load_tables(results.requests, results.cancels)
    print_midstream_table(results.midstream)
    print(f"\nThe gateways' logs: {results.log}")
    report = {
        "python": platform.python_version(),
        "connections": CONNECTIONS,
        "addresses": list(ATTACK_ADDRESSES),
        "idle_s": args.idle_s,
        "attack_s": args.attack_s,
        "interval_s": args.interval_s,
        "trickle_every_s": args.trickle_every_s,
        "phases": [asdict(row) for row in results.rows],
        "requests": [asdict(row) for row in results.requests],
        "cancels": [asdict(row) for row in results.cancels],
        "midstream": [asdict(row) for row in results.midstream],
        "log": results.log,
    }
    if args.output.exists():  # keep the figures of the phases not run this time
        kept = json.loads(args.output.read_text())
        ran = set(args.only)
        report["phases"] = [row for row in kept.get("phases", []) if row["phase"] not in ran] + report["phases"]
        for phase in ("requests", "cancels", "midstream"):
            if phase not in ran and phase in kept:
                report[phase] = kept[phase]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
