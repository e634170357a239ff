"""Redis on the request path (issue #26): what each round trip to Redis costs a request, and what grows with the
number of tenants and voices.

    .venv/bin/python -m bench.redis_latency                 # the full run: about 10 minutes per checkout
    .venv/bin/python -m bench.redis_latency --requests 40 --tenants 10 300 --voices 10 100 --listing-rounds 2 \\
        --voice-requests 30                                 # a smoke run, a few minutes
    .venv/bin/python -m bench.redis_latency --pythonpath before=/work/wt-main --pythonpath after=/work/wt-core
                                                            # the gateways of two checkouts, one after the other

For each checkout (``--pythonpath LABEL=PATH``, repeatable; default: this one), a fresh ``redis-server`` and two real
``chattts-gateway serve`` processes of that code (``PYTHONPATH=PATH``): **direct** on Redis, and **1 ms RTT** through
:class:`bench.probes.DelayingProxy`, which holds each direction 0.5 ms (``--delay-ms``) and counts the exchanges.
Same config for both (a synthetic engine of one worker, Redis for everything, an admin token) and the same Redis, so
they share tenants, keys, voices and the audio cache. One tenant, ``bench``, with ``requests_per_minute``,
``characters_per_minute`` and ``concurrent_streams`` limits (checked on every request, high enough never to refuse)
and an API key, both made through the admin API. Then, in order (``--parts`` runs some of them):

1. ``listing``: ``--tenants`` tenants in all, in steps (made through the admin API, ``--populate-concurrency`` at
   once, each with a key and one speech request so that it has usage; nothing is written into Redis directly, so any
   store layout works), then ``GET /admin/tenants`` and ``GET /admin/usage`` on each gateway, ``--listing-rounds``
   times each: the first response's time, size and records, and, where the API pages (``{"object": "list", "data",
   "has_more"}``), every page in turn (``after=<last_id>``, ``limit=100``). Meanwhile
   :class:`bench.probes.HealthPoller` requests ``/healthz`` on the same gateway every ``--poll-ms`` from another
   process: its slowest answer while a listing runs is the longest the event loop stalled, against its slowest in the
   idle second before. This part runs first, while the keyspace holds little but the tenants (a listing that scans
   keys pays for every key).
2. ``latency``: ``--requests`` timed requests per gateway of (a) a cache hit (the same request every time;
   ``x-cache: hit`` checked) and (b) a synthesis (a new text each time, of the same length), alternating between the
   gateways (the order flips every round), after ``--warmup`` untimed ones: p50 and p90 of the time to the first
   response byte, and the difference of the p50s (target: at most +5 ms); also the PING round trip of each path. Then
   ``--count-requests`` more of each kind, one at a time, sent through an HTTP relay in the proxy's process (so that
   the gateway's first response byte is timed on the proxy's clock, however late the client reads it): the commands,
   the exchanges (round trips) and the longest chain of exchanges each sent after the previous one's reply came back
   (the round trips the request waits for one after the other) that the gateway made after the request reached it,
   split into those whose reply reached the gateway before its first response byte left (the ones the first byte can
   have waited for) and the others, until 0.3 s after the response ended (usage written, the audio cache filled);
   the request with the median count before the first byte is shown. Left out: the revocation subscriber's
   connection (the one that sent ``SUBSCRIBE``) and every exchange that started before the request reached the
   gateway; a window as long with no request shows that nothing else talks to Redis meanwhile (``idle`` in the
   JSON; every exchange's time, connection and commands are under ``trace``).
3. ``voices``: ``--voices`` custom voices of the tenant, in steps (JSON form, ``{"name", "model": "synthetic",
   "seed"}``), then a cache-hit request speaking the newest one by its name and by ``{"id": ...}``,
   ``--voice-requests`` times each per gateway, interleaved: p50 and p99 (target: flat from step to step).

Prints the Markdown section for BENCHMARKS.md (question, command, machine, code, one table, verdicts) and writes it to
``bench/results/redis_latency.md``, every figure to ``bench/results/redis_latency.json``. Run it on an otherwise idle
machine; compare figures within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import itertools
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import redis

from bench.probes import DelayingProxy, Exchange, HealthPoller, Traffic
from harness.gateway_process import GatewayProcess, free_port

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterable, Iterator

__all__ = ["main", "measure"]

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
ADMIN_TOKEN = "bench-admin-" + uuid.uuid4().hex
TENANT = "bench"
LIMITS = {"requests_per_minute": 1_000_000, "characters_per_minute": 100_000_000, "concurrent_streams": 64}
"""Limits that are checked on every request but never refuse one here."""
ENGINE = "synthetic"
TEXT = "Hello, world."
"""The cache-hit text; a synthesis speaks ``Hello 000001.`` and so on: the same length, a new text each time."""
GATEWAYS = ("direct", "1 ms RTT")
SPEECH = "/v1/audio/speech"
SETTLE_S = 0.3
"""After a counted request ends: how long its background writes (usage, cache) may take."""
IDLE_POLL_S = 1.0
PAGE_LIMIT = 100
PARTS = ("latency", "voices", "listing")


# --------------------------------------------------------------------------------------------------------------------
# processes


class RedisServer:
    """A ``redis-server`` without persistence on a free port, stopped by its pid."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._workdir = workdir
        self._pidfile = workdir / "redis.pid"

    def __enter__(self) -> RedisServer:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        subprocess.run([binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                        "--daemonize", "yes", "--pidfile", str(self._pidfile), "--dir", str(self._workdir)],
                       check=True, capture_output=True)  # fmt: skip
        client = redis.Redis(port=self.port, socket_connect_timeout=0.2)
        deadline = time.monotonic() + 5
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
        client.close()
        return self

    def __exit__(self, *exc: object) -> None:
        deadline = time.monotonic() + 5
        while not self._pidfile.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(int(self._pidfile.read_text()), signal.SIGTERM)


@contextlib.contextmanager
def checkout_gateway(config: dict[str, Any], workdir: Path, pythonpath: Path) -> Iterator[GatewayProcess]:
    """A ``chattts-gateway serve`` process of the code at ``pythonpath`` with exactly the engines of ``config`` (no
    ChatTTS worker in a benchmark), up once every engine has settled."""
    workdir.mkdir()
    process = GatewayProcess(config, workdir, env={"PYTHONPATH": str(pythonpath)})
    process.start(timeout_s=120)
    try:
        yield process
    finally:
        process.stop()


def gateway_config(redis_url: str, args: argparse.Namespace) -> dict[str, Any]:
    return {
        "redis_url": redis_url,
        "auth": {"admin_token": ADMIN_TOKEN},
        "engines": {ENGINE: {"kind": "synthetic", "workers": 1, "options": {"seconds_per_char": 0.02}}},
        "voices": {"max_per_tenant": max([20, *args.voices])},
        "server": {"log_level": "warning", "playground": False},
    }


# --------------------------------------------------------------------------------------------------------------------
# requests


def percentile(values: Iterable[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else math.nan


def ms_summary(seconds: list[float]) -> dict[str, float]:
    quantiles = {f"p{round(q * 100)}_ms": percentile(seconds, q) * 1000 for q in (0.5, 0.9, 0.99)}
    return {"n": len(seconds), **quantiles, "max_ms": max(seconds, default=math.nan) * 1000}


@dataclass(frozen=True)
class Timed:
    started: float
    first_byte: float
    cache: str
    """``x-cache``: ``hit`` or ``miss``."""

    @property
    def ttfb_s(self) -> float:
        return self.first_byte - self.started


def speech_body(text: str, voice: str | dict[str, str] = "alloy") -> bytes:
    return json.dumps({"model": ENGINE, "input": text, "voice": voice, "response_format": "pcm"}).encode()


async def speak(http: httpx.AsyncClient, key: str, body: bytes) -> Timed:
    """One speech request, timed to its first body byte (``time.monotonic()``, the proxy's clock too)."""
    headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
    started = time.monotonic()
    first = 0.0
    async with http.stream("POST", SPEECH, content=body, headers=headers) as reply:
        if reply.status_code != 200:
            raise RuntimeError(f"speech answered {reply.status_code}: {(await reply.aread())[:300]!r}")
        async for chunk in reply.aiter_raw():
            if chunk and not first:
                first = time.monotonic()
        return Timed(started, first, reply.headers.get("x-cache", ""))


def checked(response: httpx.Response, status: int = 200) -> Any:
    if response.status_code != status:
        raise RuntimeError(f"{response.request.url.path} answered {response.status_code}: {response.text[:300]}")
    return response.json()


class Admin:
    """The admin API of one gateway."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self._http = http
        self._headers = {"authorization": f"Bearer {ADMIN_TOKEN}"}

    async def tenant_with_key(self, name: str) -> str:
        """Create the tenant (with :data:`LIMITS`) and one API key; the key."""
        checked(await self._http.post("/admin/tenants", json={"name": name, "limits": LIMITS},
                                            headers=self._headers), 201)  # fmt: skip
        created = checked(await self._http.post(f"/admin/tenants/{name}/keys", headers=self._headers), 201)
        return str(created["key"])

    async def get(self, path: str, **params: str | int) -> tuple[float, httpx.Response]:
        started = time.monotonic()
        response = await self._http.get(path, params=params, headers=self._headers)
        checked(response)
        return started, response


async def run_limited(count: int, concurrency: int, job: Callable[[int], Any]) -> list[Any]:
    """``job(i)`` for i in ``range(count)``, at most ``concurrency`` at once."""
    gate = asyncio.Semaphore(concurrency)

    async def one(index: int) -> Any:
        async with gate:
            return await job(index)

    return list(await asyncio.gather(*(one(index) for index in range(count))))


# --------------------------------------------------------------------------------------------------------------------
# latency: first byte


def alternating(round_index: int) -> tuple[str, ...]:
    return GATEWAYS if round_index % 2 == 0 else GATEWAYS[::-1]


async def first_byte(args: argparse.Namespace, clients: dict[str, httpx.AsyncClient], key: str) -> dict[str, Any]:
    counter = itertools.count(1)
    bodies: dict[str, Callable[[], bytes]] = {
        "cache hit": lambda: speech_body(TEXT),
        "synthesis": lambda: speech_body(f"Hello {next(counter):06d}."),
    }
    results: dict[str, Any] = {}
    for kind, body in bodies.items():
        samples: dict[str, list[float]] = {name: [] for name in GATEWAYS}
        for index in range(args.warmup + args.requests):
            for name in alternating(index):
                timed = await speak(clients[name], key, body())
                if index < args.warmup:
                    continue
                if timed.cache != ("hit" if kind == "cache hit" else "miss"):
                    raise RuntimeError(f"{kind} request on {name} answered x-cache: {timed.cache}")
                samples[name].append(timed.ttfb_s)
        results[kind] = {name: ms_summary(samples[name]) for name in GATEWAYS}
        results[kind]["delta_p50_ms"] = results[kind][GATEWAYS[1]]["p50_ms"] - results[kind][GATEWAYS[0]]["p50_ms"]
    return results


def ping_ms(ports: dict[str, int], count: int = 200) -> dict[str, float]:
    """p50 of a PING's round trip on each path (the proxy's achieved round trip)."""
    result = {}
    for name, port in ports.items():
        client = redis.Redis(port=port)
        client.ping()
        times = []
        for _ in range(count):
            started = time.monotonic()
            client.ping()
            times.append(time.monotonic() - started)
        client.close()
        result[name] = percentile(times, 0.5) * 1000
    return result


# --------------------------------------------------------------------------------------------------------------------
# latency: round trips


def longest_chain(exchanges: list[Exchange]) -> int:
    """The most exchanges one after the other, each sent after the previous one's reply had come back."""
    ordered = sorted(exchanges, key=lambda exchange: exchange.started)
    depths: list[int] = []
    for index, exchange in enumerate(ordered):
        before = [depths[j] for j in range(index) if 0 < ordered[j].ended <= exchange.started]
        depths.append(1 + max(before, default=0))
    return max(depths, default=0)


def tally(exchanges: list[Exchange], origin: float) -> dict[str, Any]:
    return {
        "commands": sum(len(exchange.commands) for exchange in exchanges),
        "exchanges": len(exchanges),
        "in_sequence": longest_chain(exchanges),
        "connections": len({exchange.connection for exchange in exchanges}),
        "trace": [
            {"at_ms": round((e.started - origin) * 1000, 2), "ms": round((e.ended - e.started) * 1000, 2),
             "connection": e.connection, "commands": e.commands}
            for e in sorted(exchanges, key=lambda exchange: exchange.started)
        ],
    }  # fmt: skip


def request_traffic(traffic: Traffic) -> dict[str, Any]:
    """The gateway's Redis exchanges during the one HTTP request of ``traffic`` (as the proxy process saw them, on
    one clock): those whose reply reached the gateway before its first response byte left (the only ones the first
    byte can have waited for), and the others, up to the end of ``traffic``. Split by reply rather than by start, so
    that a write the gateway starts as it sends the first byte (a cache hit's usage, a short synthesis's cache
    entry) counts after it, whichever of the two the proxy happens to read first."""
    request = next(e for e in traffic.exchanges if e.connection in traffic.http)
    redis_exchanges = [
        e
        for e in traffic.exchanges
        if e.connection not in traffic.subscribers | traffic.http and e.started >= request.started
    ]
    opened = [at for number, at in traffic.connections_opened.items() if number not in traffic.http]
    first_byte = request.first_reply
    awaitable = [0 < e.ended <= first_byte for e in redis_exchanges]
    return {
        "first_byte_ms": (first_byte - request.started) * 1000,
        "before_first_byte": tally(list(itertools.compress(redis_exchanges, awaitable)), request.started),
        "after_first_byte": tally(
            [e for e, a in zip(redis_exchanges, awaitable, strict=True) if not a], request.started
        ),
        "connections_opened": sum(at >= request.started for at in opened),
        "hold_ms": traffic.hold_ms,
    }


async def round_trips(
    args: argparse.Namespace, proxy: DelayingProxy, gateway: GatewayProcess, key: str
) -> dict[str, Any]:
    """Requests to ``gateway`` (the one behind the proxy) through the proxy's HTTP relay, one at a time."""
    bodies: dict[str, Callable[[int], bytes]] = {
        "cache hit": lambda _: speech_body(TEXT),
        "synthesis": lambda index: speech_body(f"Count {index:06d}."),
    }
    results: dict[str, Any] = {}
    relay = proxy.relay_http(gateway.port)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{relay}", timeout=60) as http:
        for kind, body in bodies.items():
            requests = []
            for index in range(args.count_requests):
                await asyncio.sleep(SETTLE_S)
                proxy.take()  # what came before
                timed = await speak(http, key, body(index))
                if timed.cache != ("hit" if kind == "cache hit" else "miss"):
                    raise RuntimeError(f"counted {kind} request answered x-cache: {timed.cache}")
                await asyncio.sleep(SETTLE_S)
                requests.append(request_traffic(proxy.take()))
            results[kind] = {"requests": requests, "typical": typical(requests)}
    started = time.monotonic()
    proxy.take()
    await asyncio.sleep(2 * SETTLE_S)
    traffic = proxy.take()
    results["idle"] = len([e for e in traffic.exchanges if e.connection not in traffic.subscribers | traffic.http])
    results["idle_window_s"] = time.monotonic() - started
    return results


def typical(requests: list[dict[str, Any]]) -> dict[str, Any]:
    """The request with the median number of exchanges before its first byte (counts may vary by one or two)."""
    ordered = sorted(requests, key=lambda request: request["before_first_byte"]["exchanges"])
    return ordered[len(ordered) // 2]


# --------------------------------------------------------------------------------------------------------------------
# voices


async def make_voices(http: httpx.AsyncClient, key: str, first: int, total: int, concurrency: int) -> dict[str, str]:
    """Voices ``first``..``total - 1`` of the tenant; the newest (made last, alone) as ``{"name", "id"}``."""
    headers = {"authorization": f"Bearer {key}"}

    async def make(index: int) -> dict[str, str]:
        body = {"name": f"bench-voice-{index:05d}", "model": ENGINE, "seed": index}
        created = checked(await http.post("/v1/audio/voices", json=body, headers=headers), 201)
        return {"name": created["name"], "id": created["id"]}

    await run_limited(total - first - 1, concurrency, lambda i: make(first + i))
    return await make(total - 1)


async def voice_lookups(
    args: argparse.Namespace, clients: dict[str, httpx.AsyncClient], key: str, voice: dict[str, str]
) -> dict[str, Any]:
    bodies = {"by name": speech_body(TEXT, voice["name"]), "by id": speech_body(TEXT, {"id": voice["id"]})}
    cases = [(name, way) for name in GATEWAYS for way in bodies]
    for name, way in cases:  # the first fills the cache; every later one is a hit
        await speak(clients[name], key, bodies[way])
    samples: dict[tuple[str, str], list[float]] = {case: [] for case in cases}
    for index in range(args.voice_requests):
        shift = index % len(cases)
        for name, way in cases[shift:] + cases[:shift]:
            timed = await speak(clients[name], key, bodies[way])
            if timed.cache != "hit":
                raise RuntimeError(f"voice {way} on {name} answered x-cache: {timed.cache}")
            samples[name, way].append(timed.ttfb_s)
    return {way: {name: ms_summary(samples[name, way]) for name in GATEWAYS} for way in bodies}


async def voices(args: argparse.Namespace, clients: dict[str, httpx.AsyncClient], key: str) -> dict[str, Any]:
    results: dict[str, Any] = {}
    made = 0
    for count in sorted(args.voices):
        newest = await make_voices(clients[GATEWAYS[0]], key, made, count, args.populate_concurrency)
        made = count
        results[str(count)] = await voice_lookups(args, clients, key, newest)
    return results


# --------------------------------------------------------------------------------------------------------------------
# listing


async def add_tenants(admin: Admin, http: httpx.AsyncClient, first: int, total: int, concurrency: int) -> None:
    """Tenants ``first``..``total - 1`` (0 is the bench tenant), each with a key and one request's usage."""

    async def make(index: int) -> None:
        key = await admin.tenant_with_key(f"bench-t-{index:05d}")
        await speak(http, key, speech_body("Hi."))

    await run_limited(total - first, concurrency, lambda i: make(first + i))


def records_in(body: Any) -> tuple[int, bool, str | None]:
    """(records, has_more, last id) of a listing: a page (``object: list``), a JSON list, or a name -> record map."""
    if isinstance(body, dict) and body.get("object") == "list":
        data = body["data"]
        return len(data), bool(body.get("has_more")), body.get("last_id") or (data[-1]["id"] if data else None)
    return len(body), False, None


async def list_once(admin: Admin, path: str) -> dict[str, Any]:
    """The first response as a client gets it with no parameters; then, when the API pages, every page of
    :data:`PAGE_LIMIT` records in turn. Each request's window is kept for the stall probe."""
    started, response = await admin.get(path)
    windows = [(started, time.monotonic())]
    records, has_more, _ = records_in(response.json())
    first = {"s": windows[0][1] - started, "bytes": len(response.content), "records": records}
    walk = {"requests": 1, "s": first["s"], "records": records}
    if has_more:
        walk = await every_page(admin, path, windows)
    return {"first": first, "every_page": walk, "windows": windows}


async def every_page(admin: Admin, path: str, windows: list[tuple[float, float]]) -> dict[str, Any]:
    params: dict[str, str | int] = {"limit": PAGE_LIMIT}
    started = time.monotonic()
    requests = total = 0
    while True:
        sent, response = await admin.get(path, **params)
        windows.append((sent, time.monotonic()))
        records, has_more, last_id = records_in(response.json())
        requests, total = requests + 1, total + records
        if not has_more or last_id is None:
            return {"requests": requests, "s": time.monotonic() - started, "records": total}
        params["after"] = last_id


def slowest_poll(samples: list[tuple[float, float]], windows: list[tuple[float, float]]) -> float:
    """The slowest ``/healthz`` among those that overlapped one of ``windows``, in ms."""
    overlapping = [took for sent, took in samples if any(sent < end and sent + took > start for start, end in windows)]
    return max(overlapping, default=math.nan) * 1000


async def listings_on(args: argparse.Namespace, gateway: GatewayProcess, admin: Admin) -> dict[str, Any]:
    poller = HealthPoller(gateway.port, args.poll_ms / 1000).start()
    idle = (time.monotonic(), time.monotonic() + IDLE_POLL_S)
    await asyncio.sleep(IDLE_POLL_S)
    runs: dict[str, list[dict[str, Any]]] = {"/admin/tenants": [], "/admin/usage": []}
    for _ in range(args.listing_rounds):
        for path, done in runs.items():
            done.append(await list_once(admin, path))
    samples = poller.stop()
    result: dict[str, Any] = {
        "healthz_idle_ms": {"max": slowest_poll(samples, [idle]),
                            "p50": percentile([t for s, t in samples if idle[0] <= s < idle[1]], 0.5) * 1000},
        "polls": len(samples),
    }  # fmt: skip
    for path, done in runs.items():
        result[path] = {
            "first_ms": ms_summary([run["first"]["s"] for run in done]),
            "first_bytes": done[0]["first"]["bytes"],
            "first_records": done[0]["first"]["records"],
            "every_page_ms": ms_summary([run["every_page"]["s"] for run in done]),
            "every_page_requests": done[0]["every_page"]["requests"],
            "every_page_records": done[0]["every_page"]["records"],
            "healthz_max_ms": slowest_poll(samples, [w for run in done for w in run["windows"]]),
        }
    return result


async def listings(
    args: argparse.Namespace, gateways: dict[str, GatewayProcess], clients: dict[str, httpx.AsyncClient]
) -> dict[str, Any]:
    admins = {name: Admin(clients[name]) for name in GATEWAYS}
    results: dict[str, Any] = {}
    made = 1  # the bench tenant
    for count in sorted(args.tenants):
        started = time.monotonic()
        await add_tenants(admins[GATEWAYS[0]], clients[GATEWAYS[0]], made, count, args.populate_concurrency)
        made = max(made, count)
        results[str(count)] = {"populate_s": time.monotonic() - started}
        for name in GATEWAYS:
            results[str(count)][name] = await listings_on(args, gateways[name], admins[name])
    return results


# --------------------------------------------------------------------------------------------------------------------
# one checkout


@dataclass(frozen=True)
class Checkout:
    label: str
    path: Path
    commit: str


def checkout(spec: str) -> Checkout:
    label, _, path = spec.rpartition("=")
    root = Path(path).resolve()
    if not (root / "gateway" / "app.py").is_file():
        raise SystemExit(f"--pythonpath {spec}: {root} is not a checkout of the gateway")
    git = ["git", "-C", str(root)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False)
    dirty = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True,
                           check=False).stdout.strip()  # fmt: skip
    commit = (head.stdout.strip() or "unknown") + (" + uncommitted changes" if dirty else "")
    return Checkout(label or root.name, root, commit)


async def measure_gateways(
    args: argparse.Namespace, proxy: DelayingProxy, gateways: dict[str, GatewayProcess]
) -> dict[str, Any]:
    result: dict[str, Any] = {}
    limits = httpx.Limits(max_connections=args.populate_concurrency + 4)
    async with gateway_clients(gateways, limits) as clients:
        key = await Admin(clients[GATEWAYS[0]]).tenant_with_key(TENANT)
        await speak(clients[GATEWAYS[0]], key, speech_body("Hi."))  # the tenant has usage whatever runs
        if "listing" in args.parts:  # first, while the keyspace holds little else
            result["listings"] = await listings(args, gateways, clients)
        if "latency" in args.parts:
            result["ping_ms"] = ping_ms({GATEWAYS[0]: proxy.upstream_port, GATEWAYS[1]: proxy.port})
            result["first_byte"] = await first_byte(args, clients, key)
            result["round_trips"] = await round_trips(args, proxy, gateways[GATEWAYS[1]], key)
        if "voices" in args.parts:
            result["voices"] = await voices(args, clients, key)
    return result


@contextlib.asynccontextmanager
async def gateway_clients(
    gateways: dict[str, GatewayProcess], limits: httpx.Limits
) -> AsyncIterator[dict[str, httpx.AsyncClient]]:
    """One ``httpx.AsyncClient`` per gateway, closed together."""
    clients = {
        name: httpx.AsyncClient(base_url=gateway.base_url, timeout=600, limits=limits)
        for name, gateway in gateways.items()
    }
    try:
        yield clients
    finally:
        for client in clients.values():
            await client.aclose()


def measure_checkout(args: argparse.Namespace, code: Checkout) -> dict[str, Any]:
    print(f"# {code.label}: {code.path} ({code.commit})", file=sys.stderr, flush=True)
    with (
        tempfile.TemporaryDirectory(prefix="bench-redis-") as tmp,
        RedisServer(Path(tmp)) as redis_server,
        DelayingProxy(redis_server.port, args.delay_ms / 1000) as proxy,
        checkout_gateway(gateway_config(redis_server.url, args), Path(tmp) / "direct", code.path) as direct,
        checkout_gateway(gateway_config(proxy.url, args), Path(tmp) / "proxied", code.path) as proxied,
    ):
        return asyncio.run(measure_gateways(args, proxy, dict(zip(GATEWAYS, (direct, proxied), strict=True))))


def measure(args: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {
        "command": " ".join([".venv/bin/python", "-m", "bench.redis_latency", *sys.argv[1:]]),
        "machine": machine(),
        "started": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "load_before": os.getloadavg()[0],
        "settings": {k: v for k, v in vars(args).items() if k != "pythonpath"},
        "checkouts": {},
    }
    for spec in args.pythonpath or [f"this={ROOT}"]:
        code = checkout(spec)
        report["checkouts"][code.label] = {"path": str(code.path), "commit": code.commit,
                                           **measure_checkout(args, code)}  # fmt: skip
    report["load_after"] = os.getloadavg()[0]
    return report


def machine() -> dict[str, Any]:
    model = "unknown"
    for line in subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout.splitlines():
        if line.startswith("Model name:"):
            model = line.split(":", 1)[1].strip()
    mem_kib = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                   if line.startswith("MemTotal:"))  # fmt: skip
    redis_version = subprocess.run(["redis-server", "--version"], capture_output=True, text=True, check=False).stdout
    return {"cpu_model": model, "cpus": os.cpu_count(), "mem_gib": round(mem_kib / 2**20, 1),
            "python": platform.python_version(), "redis": redis_version.split()[2].removeprefix("v=")}  # fmt: skip


# --------------------------------------------------------------------------------------------------------------------
# the report


def fmt(value: float, digits: int = 1) -> str:
    return "-" if math.isnan(value) else f"{value:,.{digits}f}"  # NaN: not measured


def kib(size: int) -> str:
    return f"{size / 1024:,.0f} KiB" if size >= 10 * 1024 else f"{size / 1024:.1f} KiB"


def first_byte_rows(result: dict[str, Any], args: argparse.Namespace) -> list[tuple[str, list[str]]]:
    rows = [("Redis PING round trip, p50 ms", [fmt(result["ping_ms"][name], 2) for name in GATEWAYS])]
    for kind in ("cache hit", "synthesis"):
        figures = result["first_byte"][kind]
        rows.append((f"{kind}: first byte p50 / p90 ms (n = {args.requests} each)",
                     [f"{fmt(figures[n]['p50_ms'])} / {fmt(figures[n]['p90_ms'])}" for n in GATEWAYS]))  # fmt: skip
    for kind in ("cache hit", "synthesis"):
        typical_request = result["round_trips"][kind]["typical"]
        for window in ("before_first_byte", "after_first_byte"):
            counts = typical_request[window]
            label = f"{kind}: Redis commands / round trips / in sequence, {window.replace('_', ' ')}"
            rows.append((label, ["-", f"{counts['commands']} / {counts['exchanges']} / {counts['in_sequence']}"]))
    return rows


def every_page_cell(listing: dict[str, Any]) -> str:
    if listing["every_page_requests"] == 1:
        return "(the first response)"
    return f"{fmt(listing['every_page_ms']['p50_ms'])} ms in {listing['every_page_requests']} requests"


def listing_rows(result: dict[str, Any]) -> list[tuple[str, list[str]]]:
    rows = []
    for path in ("/admin/tenants", "/admin/usage"):
        for count, figures in result.items():
            cells = []
            for name in GATEWAYS:
                listing = figures[name][path]
                cells.append(f"{fmt(listing['first_ms']['p50_ms'])} ms, {kib(listing['first_bytes'])} "
                             f"({listing['first_records']:,})")  # fmt: skip
            rows.append((f"GET {path}, {int(count):,} tenants: first response p50, size (records)", cells))
        count, figures = list(result.items())[-1]
        cells = [every_page_cell(figures[name][path]) for name in GATEWAYS]
        rows.append((f"GET {path}, {int(count):,} tenants: every page of {PAGE_LIMIT} in turn, p50", cells))
    for count, figures in result.items():
        cells = []
        for name in GATEWAYS:
            worst = max(figures[name][path]["healthz_max_ms"] for path in ("/admin/tenants", "/admin/usage"))
            cells.append(f"{fmt(worst)} ({fmt(figures[name]['healthz_idle_ms']['max'])})")
        rows.append((f"/healthz slowest ms during the listings at {int(count):,} tenants (idle)", cells))
    return rows


def voice_rows(result: dict[str, Any], args: argparse.Namespace) -> list[tuple[str, list[str]]]:
    rows = []
    for count, ways in result.items():
        for way, figures in ways.items():
            label = f"cache hit, custom voice {way}, {int(count):,} voices: p50 / p99 ms (n = {args.voice_requests})"
            rows.append((label, [f"{fmt(figures[n]['p50_ms'])} / {fmt(figures[n]['p99_ms'])}" for n in GATEWAYS]))
    return rows


def rows_of(result: dict[str, Any], args: argparse.Namespace) -> list[tuple[str, list[str]]]:
    rows = []
    if "first_byte" in result:
        rows += first_byte_rows(result, args)
    if "listings" in result:
        rows += listing_rows(result["listings"])
    if "voices" in result:
        rows += voice_rows(result["voices"], args)
    return rows


def ends(steps: dict[str, Any]) -> tuple[tuple[int, Any], tuple[int, Any]]:
    """The smallest and the largest step of a part's results (keyed by the count, in increasing order)."""
    items = [(int(count), figures) for count, figures in steps.items()]
    return items[0], items[-1]


def holds(ratio: float, most: float) -> str:
    return "yes" if ratio <= most else "**no**"


def verdicts(label: str, result: dict[str, Any], args: argparse.Namespace) -> list[str]:
    lines = []
    direct = GATEWAYS[0]
    if "first_byte" in result:
        for kind in ("cache hit", "synthesis"):
            delta = result["first_byte"][kind]["delta_p50_ms"]
            lines.append(f"{kind} first byte at 1 ms RTT: {delta:+.1f} ms p50 "
                         f"(target <= +{args.target_ms:g} ms): {holds(delta, args.target_ms)}")  # fmt: skip
    if len(result.get("voices", {})) > 1:
        (low, small), (high, large) = ends(result["voices"])
        ratio = large["by name"][direct]["p50_ms"] / small["by name"][direct]["p50_ms"]
        lines.append(f"voice by name, {high:,} over {low:,} voices, p50 direct: {ratio:.2f}x "
                     f"(flat: <= {args.flat:g}x): {holds(ratio, args.flat)}")  # fmt: skip
    if len(result.get("listings", {})) > 1:
        (low, small), (high, large) = ends(result["listings"])
        for path in ("/admin/tenants", "/admin/usage"):
            ratio = large[direct][path]["first_ms"]["p50_ms"] / small[direct][path]["first_ms"]["p50_ms"]
            lines.append(f"GET {path} first response, {high:,} over {low:,} tenants, p50 direct: {ratio:.2f}x "
                         f"(flat: <= {args.flat:g}x): {holds(ratio, args.flat)}")  # fmt: skip
        stalls = [
            large[name][path]["healthz_max_ms"] for name in GATEWAYS for path in ("/admin/tenants", "/admin/usage")
        ]
        idle = max(large[name]["healthz_idle_ms"]["max"] for name in GATEWAYS)
        lines.append(f"event loop during the listings at {high:,} tenants: /healthz answered within "
                     f"{max(stalls):,.0f} ms at worst (idle: {idle:,.0f} ms; no target)")  # fmt: skip
    return [f"- {label}: {line}" for line in lines]


def markdown(report: dict[str, Any], args: argparse.Namespace) -> str:
    m = report["machine"]
    codes = report["checkouts"]
    header = "| measure | " + " | ".join(f"{label}: {name}" for label in codes for name in GATEWAYS) + " |"
    table = [header, "|---" * (1 + len(codes) * len(GATEWAYS)) + "|"]
    per_code = [dict(rows_of(result, args)) for result in codes.values()]
    for measure_name in per_code[0]:
        cells = [cell for rows in per_code for cell in rows.get(measure_name, ["-"] * len(GATEWAYS))]
        table.append(f"| {measure_name} | " + " | ".join(cells) + " |")
    code_lines = ", ".join(f"{label}: {result['commit']} (`{result['path']}`)" for label, result in codes.items())
    lines = [
        "## Redis on the request path: round trips, admin listings, voices by name (`.venv/bin/python -m "
        "bench.redis_latency`)",
        "",
        "Question (issue #26): what does each round trip to Redis cost a request — a cache hit's and a synthesis's "
        f"first byte with Redis behind a {2 * args.delay_ms:g} ms round trip (a proxy holding each direction "
        f"{args.delay_ms:g} ms) against Redis direct, and how many round trips does the gateway make; do the admin "
        "listings and a voice looked up by name stay flat as tenants and voices grow, and how long do the listings "
        "stall the event loop?",
        "",
        f"Command: `{report['command']}`  ",
        f"Machine: {m['cpus']} cores ({m['cpu_model']}), {m['mem_gib']} GiB, Python {m['python']}, Redis "
        f"{m['redis']}; {report['started']}; 1-minute load average {report['load_before']:.2f} before, "
        f"{report['load_after']:.2f} after.  ",
        f"Code: {code_lines}.",
        "",
        *table,
        "",
        *[line for label, result in codes.items() for line in verdicts(label, result, args)],
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--pythonpath",
        action="append",
        metavar="[LABEL=]PATH",
        help="checkout whose code the gateways run (repeatable: one after the other); default: this one",
    )
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--delay-ms", type=float, default=0.5, help="the proxy's hold in each direction")
    parser.add_argument("--requests", type=int, default=300, help="timed requests per gateway and kind")
    parser.add_argument("--warmup", type=int, default=10, help="untimed requests per gateway and kind first")
    parser.add_argument(
        "--count-requests", type=int, default=5, help="requests of each kind whose Redis traffic is counted"
    )
    parser.add_argument("--voices", type=int, nargs="+", default=[10, 1000], help="voices of the tenant, in steps")
    parser.add_argument("--voice-requests", type=int, default=200, help="timed requests per gateway, way and step")
    parser.add_argument("--tenants", type=int, nargs="+", default=[10, 5000], help="tenants in all, in steps")
    parser.add_argument("--listing-rounds", type=int, default=5, help="listings of each endpoint per gateway and step")
    parser.add_argument("--poll-ms", type=float, default=5.0, help="pause between two /healthz probes")
    parser.add_argument("--populate-concurrency", type=int, default=16, help="tenants or voices made at once")
    parser.add_argument("--target-ms", type=float, default=5.0, help="the most the 1 ms RTT may add to a p50")
    parser.add_argument("--flat", type=float, default=1.5, help="largest over smallest step's p50 that counts as flat")
    args = parser.parse_args()
    report = measure(args)
    text = markdown(report, args)
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "redis_latency.md").write_text(text)
    (RESULTS / "redis_latency.json").write_text(json.dumps(report, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
