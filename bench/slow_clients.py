"""What slow and idle clients get from a live gateway, and what they cost it (``docs/security.md``, "Idle and slow
clients").

    .venv/bin/python -m bench.slow_clients --only bodies                  # bursty bodies, 1,024 B/s over 10 s
    .venv/bin/python -m bench.slow_clients --only bodies --interval-s 20  # another interval (or --rate)
    .venv/bin/python -m bench.slow_clients --only sessions                # what idle sessions cost

**bodies**: how the body minimum rate (``server.body_min_rate_bytes_per_s`` over each ``server.body_rate_interval_s``)
treats clients that send in bursts: which of them the gateway cuts with 408, and when. A client on a poor mobile uplink
does not send a steady stream: the radio and TCP deliver its bytes in bursts, with pauses of a second or more (a
retransmission timeout alone is 1 s, then 2, then 4). Each sender here writes its body as one burst every ``period``
seconds on average, at an average rate that is a multiple of the minimum. Its gaps vary by up to ``--jitter`` of a
period either way (uniformly, seeded), as a link's do: a burst that comes a little late moves out of one of the server's
intervals into the next, which is how a sender a few percent over the minimum gets cut. Five senders per pair, their
first burst 0, 1/5, ... 4/5 of a period after the head, so the bursts fall differently on the server's intervals (which
start at the end of the head). A sender whose body is cut says after how long; one served says so. Every body lasts
``--seconds`` (several intervals).

**sessions**: ``--sessions`` (1,000) idle realtime sessions on ``/v1/audio/speech/stream``, opened from four loopback
addresses (``server.max_connections_per_address`` is 256) and held without a word: the gateway's resident memory and
CPU time before, once they are open, and over ``--idle-s`` (60) of their idleness (uvicorn pings each every 20 s).

One ``chattts-gateway serve`` with default settings but: a tenant whose ``bodies_in_flight`` and ``open_sessions`` are
unlimited (every sender or session is at once), ``server.max_body_bytes`` raised to 1 MiB (a body of a minute at
twice the rate is larger than the 64 KiB a speech body may have) and the synthetic engine, so a body that arrives
whole is answered at once. Prints Markdown tables and writes ``bench/results/slow_clients.json`` (``--output``
elsewhere).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import platform
import random
import resource
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil
from websockets.asyncio.client import connect

from auth.keys import generate_api_key, hash_api_key
from harness.gateway_process import GatewayProcess

if TYPE_CHECKING:
    from websockets.asyncio.client import ClientConnection

__all__ = ["Sender", "SessionsCost", "main"]

RESULTS = Path(__file__).resolve().parent / "results" / "slow_clients.json"
SESSION_ADDRESSES = ("127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5")
HOST = "127.0.0.1"
MULTIPLES = (1.05, 1.1, 1.25, 1.5, 2.0)
"""Average rates, as multiples of the minimum."""
PERIODS_S = (0.2, 1.0, 2.0, 5.0, 8.0)
PHASES = (0.0, 0.2, 0.4, 0.6, 0.8)
PREFIX = b'{"model": "tones", "input": "Hello.", "voice": "alloy", "response_format": "pcm"'


@dataclass(frozen=True, slots=True)
class Sender:
    """One body: ``multiple`` times the minimum rate on average, as a burst every ``period_s``."""

    multiple: float
    period_s: float
    phase: float
    """Its first burst comes this fraction of a period after the head."""
    jitter: float = 0.0
    """Each gap is the period times a uniform draw in ``1 ± jitter``."""
    seed: int = 0


@dataclass(slots=True)
class Outcome:
    sender: Sender
    answer: str
    """``served`` (200), ``cut`` (408), or another status or what the socket did."""
    after_s: float
    """Seconds from the head to the answer."""
    sent: int
    length: int


def body_of(length: int) -> bytes:
    """A speech request's JSON, padded with spaces to ``length`` bytes."""
    return PREFIX + b" " * (length - len(PREFIX) - 1) + b"}"


async def send(port: int, key: str, sender: Sender, rate: int, seconds: float) -> Outcome:
    burst = round(sender.multiple * rate * sender.period_s)
    length = burst * (int(seconds / sender.period_s) + 1)
    body = body_of(length)
    head = (
        f"POST /v1/audio/speech HTTP/1.1\r\nHost: {HOST}\r\nAuthorization: Bearer {key}\r\nConnection: close\r\n"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    ).encode()
    reader, writer = await asyncio.open_connection(HOST, port)
    started = time.perf_counter()
    writer.write(head)
    answered = asyncio.create_task(reader.read(4096))
    sent = 0
    gaps = random.Random(sender.seed)
    try:
        await asyncio.wait({answered}, timeout=sender.phase * sender.period_s)
        while sent < length and not answered.done():
            writer.write(body[sent : sent + burst])
            sent = min(sent + burst, length)
            gap_s = sender.period_s * gaps.uniform(1 - sender.jitter, 1 + sender.jitter)
            await asyncio.wait({answered}, timeout=gap_s)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(answered), timeout=10)
    finally:
        after_s = time.perf_counter() - started
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    answer = answered.result() if answered.done() and not answered.cancelled() else b""
    return Outcome(sender, _answer(answer), round(after_s, 2), sent, length)


def _answer(raw: bytes) -> str:
    if not raw:
        return "no answer"
    status = raw.split(b" ", 2)[1].decode()
    return {"200": "served", "408": "cut"}.get(status, status)


async def run_senders(port: int, key: str, rate: int, seconds: float, jitter: float) -> list[Outcome]:
    pairs = [(m, p, phase) for m in MULTIPLES for p in PERIODS_S for phase in PHASES]
    senders = [Sender(m, p, phase, jitter, seed) for seed, (m, p, phase) in enumerate(pairs)]
    return list(await asyncio.gather(*(send(port, key, sender, rate, seconds) for sender in senders)))


def gateway_config(key: str, rate: int, interval_s: float) -> dict[str, Any]:
    return {
        "server": {
            "body_min_rate_bytes_per_s": rate,
            "body_rate_interval_s": interval_s,
            "max_body_bytes": 1024 * 1024,
        },
        "auth": {
            "tenants": [
                {
                    "name": "phones",
                    "api_key_sha256": [hash_api_key(key)],
                    "limits": {"bodies_in_flight": None, "open_sessions": None},
                }
            ]
        },
        "engines": {"tones": {"kind": "synthetic", "workers": 2}},
        "aliases": {},
    }


def table(outcomes: list[Outcome]) -> list[str]:
    """One row per average rate, one column per period: how many were served, and when the others were cut."""
    lines = [
        "| average rate (x minimum) | " + " | ".join(f"a burst every {p:g} s" for p in PERIODS_S) + " |",
        "|---" * (len(PERIODS_S) + 1) + "|",
    ]
    for multiple in MULTIPLES:
        cells = []
        for period in PERIODS_S:
            mine = [o for o in outcomes if (o.sender.multiple, o.sender.period_s) == (multiple, period)]
            served = sum(o.answer == "served" for o in mine)
            cut = sorted(o.after_s for o in mine if o.answer == "cut")
            other = Counter(o.answer for o in mine if o.answer not in {"served", "cut"})
            cell = f"{served}/{len(mine)}"
            if cut:
                cell += " (cut at " + ", ".join(f"{s:g}" for s in cut) + " s)"
            if other:
                cell += " " + ", ".join(f"{n} x {answer}" for answer, n in other.items())
            cells.append(cell)
        lines.append(f"| {multiple:g} | " + " | ".join(cells) + " |")
    return lines


@dataclass(slots=True)
class SessionsCost:
    """What ``opened`` idle sessions cost the gateway's process (its engine workers apart)."""

    asked: int
    opened: int
    rss_before_mib: float
    rss_open_mib: float
    rss_after_idle_mib: float
    kib_per_session: float
    idle_s: float
    cpu_idle_s: float
    """CPU time the gateway's process used over ``idle_s`` of the sessions' idleness."""
    cpu_baseline_s: float
    """The same over as long with no session open, just before."""


async def _idle_session(url: str, key: str, address: str, opened: asyncio.Event, stop: asyncio.Event) -> bool:
    try:
        async with connect(
            url, additional_headers={"authorization": f"Bearer {key}"}, local_addr=(address, 0), open_timeout=30
        ) as socket:
            created = json.loads(await socket.recv()).get("type") == "session.created"
            opened.set()
            await _held(socket, stop)
            return bool(created)
    except (OSError, TimeoutError, ValueError):
        opened.set()
        return False


async def _held(socket: ClientConnection, stop: asyncio.Event) -> None:
    closed = asyncio.create_task(socket.wait_closed())
    stopped = asyncio.create_task(stop.wait())
    await asyncio.wait({closed, stopped}, return_when=asyncio.FIRST_COMPLETED)
    closed.cancel()
    stopped.cancel()


def _usage(process: psutil.Process) -> tuple[float, float]:
    """Resident MiB and CPU seconds so far."""
    cpu = process.cpu_times()
    return process.memory_info().rss / 2**20, cpu.user + cpu.system


async def measure_sessions(gateway: GatewayProcess, key: str, count: int, idle_s: float) -> SessionsCost:
    assert gateway.process is not None
    process = psutil.Process(gateway.process.pid)
    rss_before, cpu_at = _usage(process)
    await asyncio.sleep(idle_s)
    cpu_baseline = _usage(process)[1] - cpu_at
    url = gateway.base_url.replace("http://", "ws://") + "/v1/audio/speech/stream"
    stop = asyncio.Event()
    opened = [asyncio.Event() for _ in range(count)]
    addresses = SESSION_ADDRESSES
    sessions = [
        asyncio.create_task(_idle_session(url, key, addresses[n % len(addresses)], opened[n], stop))
        for n in range(count)
    ]
    await asyncio.gather(*(event.wait() for event in opened))
    await asyncio.sleep(2.0)  # what opening them left to do is done
    rss_open, cpu_at = _usage(process)
    await asyncio.sleep(idle_s)
    rss_idle, cpu_now = _usage(process)
    stop.set()
    created = sum(await asyncio.gather(*sessions))
    return SessionsCost(
        asked=count,
        opened=created,
        rss_before_mib=round(rss_before, 1),
        rss_open_mib=round(rss_open, 1),
        rss_after_idle_mib=round(rss_idle, 1),
        kib_per_session=round((rss_idle - rss_before) * 1024 / max(created, 1), 1),
        idle_s=idle_s,
        cpu_idle_s=round(cpu_now - cpu_at, 2),
        cpu_baseline_s=round(cpu_baseline, 2),
    )


def _raise_open_file_limit(wanted: int = 8192) -> None:
    """This process holds the sessions' sockets, and the gateway it starts inherits the limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        raised = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))


def run_bodies(args: argparse.Namespace, key: str, gateway: GatewayProcess) -> dict[str, Any]:
    outcomes = asyncio.run(run_senders(gateway.port, key, args.rate, args.seconds, args.jitter))
    print(
        f"\nminimum {args.rate} B/s over {args.interval_s:g} s intervals; bodies of {args.seconds:g} s; "
        f"gaps within ±{args.jitter:.0%} of the period\n"
    )
    print("\n".join(table(outcomes)))
    return {
        "rate": args.rate,
        "interval_s": args.interval_s,
        "seconds": args.seconds,
        "jitter": args.jitter,
        "outcomes": [asdict(outcome) for outcome in outcomes],
    }


def run_sessions(args: argparse.Namespace, key: str, gateway: GatewayProcess) -> dict[str, Any]:
    cost = asyncio.run(measure_sessions(gateway, key, args.sessions, args.idle_s))
    print("\n| idle sessions | resident MiB: before, open, after idling | KiB per session | "
          f"CPU s over {cost.idle_s:g} s idle (none open: baseline) |")  # fmt: skip
    print("|---|---|---|---|")
    print(f"| {cost.opened}/{cost.asked} | {cost.rss_before_mib}, {cost.rss_open_mib}, {cost.rss_after_idle_mib} | "
          f"{cost.kib_per_session} | {cost.cpu_idle_s} ({cost.cpu_baseline_s}) |")  # fmt: skip
    return asdict(cost)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=["bodies", "sessions"], required=True)
    parser.add_argument("--rate", type=int, default=1024, help="server.body_min_rate_bytes_per_s")
    parser.add_argument("--interval-s", type=float, default=10.0, help="server.body_rate_interval_s")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long each body lasts")
    parser.add_argument("--jitter", type=float, default=0.2, help="how much a gap varies, as a share of the period")
    parser.add_argument("--sessions", type=int, default=1000, help="idle sessions to open")
    parser.add_argument("--idle-s", type=float, default=60.0, help="how long they are measured idle")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    _raise_open_file_limit()
    key = generate_api_key()
    with tempfile.TemporaryDirectory(prefix="slow-clients-") as workdir:
        config = gateway_config(key, args.rate, args.interval_s)
        with GatewayProcess(config, Path(workdir)) as gateway:
            figures = (run_bodies if args.only == "bodies" else run_sessions)(args, key, gateway)
    report = json.loads(args.output.read_text()) if args.output.exists() else {}
    report["python"] = platform.python_version()
    if args.only == "sessions":
        report["sessions"] = figures
    else:
        ran = (args.rate, args.interval_s, args.jitter)
        runs = [r for r in report.get("bodies", []) if (r["rate"], r["interval_s"], r.get("jitter")) != ran]
        report["bodies"] = [*runs, figures]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
