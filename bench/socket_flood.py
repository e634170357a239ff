"""What a realtime socket flood (issue #47) costs another tenant: a bystander's first byte on espeak, idle and while an
attacker floods ``/v1/realtime`` with 60 KB ``conversation.item.create`` messages.

    .venv/bin/python -m bench.socket_flood                    # about a minute: the socket budgets at their defaults
    .venv/bin/python -m bench.socket_flood --unbounded        # the same with the budgets out of reach (before #47)
    .venv/bin/python -m bench.socket_flood --seconds 20 --output bench/results/socket_flood.json

One ``chattts-gateway serve`` (espeak, one worker; two tenants; no Redis). The attacker runs in a process of its own
at niceness +10 (lower priority than the gateway and the bystander, as a flooder among many clients would get no more
than its share of the CPU), sending one item after another on one socket without waiting for answers, reading what
comes back so that it is never closed as too slow. Three loads of ``--seconds`` each (12 s, the issue's), the
bystander's requests one after another meanwhile (a short ``pcm`` request to espeak, streamed, read to its end):
idle; while one socket floods and, once closed, stays away (the issue's attack); while the attacker reconnects at once
each time its socket is closed. The figure: the median first byte over idle's median (the issue's target: at most 3).

"MB sent" is what the attacker's client took to send, not what the gateway read: once the gateway stops reading a
socket it closed (``gateway/http/websocket_close.py``), the attacker's own ``websockets`` client buffers the rest; the
gateway's CPU share is what the flood cost it.

Prints a Markdown table and writes every figure to ``bench/results/socket_flood.json`` (``--output`` elsewhere).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import platform
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from auth.keys import generate_api_key, hash_api_key
from harness.gateway_process import GatewayProcess

if TYPE_CHECKING:
    from multiprocessing.queues import Queue
    from multiprocessing.synchronize import Event

__all__ = ["FloodRow", "gateway_config", "main"]

RESULTS = Path(__file__).resolve().parent / "results" / "socket_flood.json"
ITEM_CHARS = 60_000  # the issue's ~60 KB items, in parts of 4,000 characters (a part holds at most 4,096)
SPEECH_TEXT = "Bystander request %06d."
PERCENTILES = (50, 90, 99)
ATTACKER_NICENESS = 10


@dataclass
class FloodRow:
    load: str
    requests: int
    served: int
    first_byte_ms: dict[str, float | None]
    ratio_to_idle: float | None
    attack: dict[str, Any] = field(default_factory=dict)


def gateway_config(bystander_key: str, attacker_key: str, *, unbounded: bool) -> dict[str, Any]:
    """espeak and two tenants; ``unbounded``: socket budgets no flood reaches, as before issue #47."""
    tenants = [
        {"name": "bystander", "api_key_sha256": [hash_api_key(bystander_key)]},
        {"name": "attacker", "api_key_sha256": [hash_api_key(attacker_key)]},
    ]
    realtime: dict[str, Any] = {}
    if unbounded:
        realtime = {
            "max_socket_messages_per_s": 1e9,
            "max_socket_bytes_per_s": 10**12,
            "max_conversation_chars": 1_048_576,
        }
    return {
        "auth": {"tenants": tenants},
        "cache": {"enabled": False},
        "realtime": realtime,
        "engines": {"espeak": {"kind": "espeak", "workers": 1}},
        "aliases": {"gpt-realtime": ["espeak"]},
    }


# ----------------------------------------------------------------------------------------------- the attacker
def _item_message(number: int) -> str:
    text = "x" * ITEM_CHARS
    parts = [{"type": "input_text", "text": text[at : at + 4000]} for at in range(0, ITEM_CHARS, 4000)]
    item = {"id": f"item_{number:020d}", "type": "message", "role": "user", "content": parts}
    return json.dumps({"type": "conversation.item.create", "item": item})


async def _flood_one(url: str, key: str, stop: Event, flooding: Event, tally: Counter[str]) -> None:
    """One socket: items as fast as it takes them, what comes back read, until the server closes it (or ``stop``)."""
    numbers = iter(range(10**9))
    async with connect(url, additional_headers={"Authorization": f"Bearer {key}"}, max_size=None) as socket:

        async def drain() -> None:
            async for frame in socket:
                tally["bytes_back"] += len(frame)

        reader = asyncio.create_task(drain())
        try:
            while not stop.is_set():
                message = _item_message(next(numbers))
                await socket.send(message)
                flooding.set()
                tally["messages"] += 1
                tally["bytes_sent"] += len(message)
        except ConnectionClosed:
            pass
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(reader, 2)
            reader.cancel()
        tally[f"closed {socket.close_code}"] += 1


async def _flood(url: str, key: str, events: tuple[Event, Event], reconnect: bool, tally: Counter[str]) -> None:
    stop, flooding = events
    while not stop.is_set():
        try:
            await _flood_one(url, key, stop, flooding, tally)
        except (OSError, InvalidStatus) as exc:
            tally[f"refused {getattr(getattr(exc, 'response', None), 'status_code', 'oserror')}"] += 1
            await asyncio.sleep(0.05)
        if not reconnect:
            break
        tally["connections"] += 1


def _attacker(url: str, key: str, events: tuple[Event, Event], reconnect: bool, results: Queue[dict[str, int]]) -> None:
    os.nice(ATTACKER_NICENESS)
    tally: Counter[str] = Counter()
    started = time.process_time()
    asyncio.run(_flood(url, key, events, reconnect, tally))
    tally["attacker_cpu_ms"] = round((time.process_time() - started) * 1000)
    results.put(dict(tally))


# ----------------------------------------------------------------------------------------------- the bystander
def first_byte_s(client: httpx.Client, number: int) -> float | None:
    body = {"model": "espeak", "input": SPEECH_TEXT % number, "voice": "alloy", "response_format": "pcm"}
    started = time.perf_counter()
    try:
        with client.stream("POST", "/v1/audio/speech", json=body) as response:
            if response.status_code != httpx.codes.OK:
                return None
            chunks = response.iter_raw()
            next(chunks)
            first = time.perf_counter() - started
            for _ in chunks:
                pass
    except (httpx.TransportError, StopIteration):
        return None
    return first


def _percentiles(values_ms: list[float]) -> dict[str, float | None]:
    if not values_ms:
        return {f"p{p}": None for p in PERCENTILES}
    return {f"p{p}": round(float(np.percentile(values_ms, p)), 2) for p in PERCENTILES}


def _gateway_cpu_s(gateway: GatewayProcess) -> float:
    assert gateway.process is not None
    with open(f"/proc/{gateway.process.pid}/stat") as stat:  # noqa: PTH123 - one read of a proc file
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(gateway: GatewayProcess, keys: tuple[str, str], seconds: float) -> list[FloodRow]:
    """Each load for ``seconds``: the bystander's requests one after another, a tenth of a second apart."""
    bystander_key, attacker_key = keys
    url = gateway.base_url.replace("http://", "ws://") + "/v1/realtime?model=gpt-realtime"
    client = httpx.Client(base_url=gateway.base_url, headers={"authorization": f"Bearer {bystander_key}"}, timeout=60)
    numbers = iter(range(10**6))
    for _ in range(3):  # warm the worker and the connection
        first_byte_s(client, next(numbers))
    rows: list[FloodRow] = []
    context = multiprocessing.get_context("spawn")
    for load, reconnect in (("idle", None), ("one socket", False), ("reconnecting", True)):
        stop, flooding, results = context.Event(), context.Event(), context.Queue()
        attacker = None
        if reconnect is not None:
            events = (stop, flooding)
            attacker = context.Process(target=_attacker, args=(url, attacker_key, events, reconnect, results))
            attacker.start()
            if not flooding.wait(60):
                raise RuntimeError("the attacker did not start flooding")
        cpu = _gateway_cpu_s(gateway)
        started = time.perf_counter()
        firsts: list[float | None] = []
        while time.perf_counter() - started < seconds:
            firsts.append(first_byte_s(client, next(numbers)))
            time.sleep(0.1)
        wall = time.perf_counter() - started
        attack: dict[str, Any] = {"gateway_cpu_share": round((_gateway_cpu_s(gateway) - cpu) / wall, 3)}
        if attacker is not None:
            stop.set()
            attack.update(results.get(timeout=30))
            attacker.join(10)
        served = [first * 1000 for first in firsts if first is not None]
        figures = _percentiles(served)
        idle = rows[0].first_byte_ms["p50"] if rows else figures["p50"]
        ratio = round(figures["p50"] / idle, 2) if figures["p50"] is not None and idle else None
        rows.append(FloodRow(load, len(firsts), len(served), figures, ratio, attack))
        print(f"  {load}: p50 {figures['p50']} ms ({ratio}x idle), {len(served)}/{len(firsts)} served; {attack}")
    client.close()
    return rows


def print_table(rows: list[FloodRow], unbounded: bool) -> None:
    print(f"\nThe other tenant's first byte on espeak (ms), socket budgets {'out of reach' if unbounded else 'on'}:\n")
    print("| load | served | p50 | p90 | p99 | p50 / idle | items sent | MB sent | MB back | closes | gateway CPU |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        ms, attack = row.first_byte_ms, row.attack
        closes = ", ".join(f"{n} x {k.split()[1]}" for k, n in sorted(attack.items()) if k.startswith("closed "))
        print(
            f"| {row.load} | {row.served}/{row.requests} | {ms['p50']} | {ms['p90']} | {ms['p99']} | "
            f"{row.ratio_to_idle} | {attack.get('messages', 0):,} | {attack.get('bytes_sent', 0) / 1e6:.1f} | "
            f"{attack.get('bytes_back', 0) / 1e6:.1f} | {closes} | {attack['gateway_cpu_share']:.0%} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=12.0, help="how long each load lasts")
    parser.add_argument("--unbounded", action="store_true", help="socket budgets out of reach (the baseline)")
    parser.add_argument("--output", type=Path, default=RESULTS, help="where the JSON goes")
    args = parser.parse_args()
    keys = (generate_api_key(), generate_api_key())
    config = gateway_config(*keys, unbounded=args.unbounded)
    with tempfile.TemporaryDirectory() as workdir, GatewayProcess(config, Path(workdir)) as gateway:
        rows = measure(gateway, keys, args.seconds)
    print_table(rows, args.unbounded)
    record = {
        "unbounded": args.unbounded,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "seconds_per_load": args.seconds,
        "medians_ms": {row.load: row.first_byte_ms["p50"] for row in rows},
        "rows": [asdict(row) for row in rows],
        "when": time.strftime("%Y-%m-%d %H:%M"),
    }
    previous = json.loads(args.output.read_text()) if args.output.exists() else {}
    previous["unbounded" if args.unbounded else "bounded"] = record
    args.output.write_text(json.dumps(previous, indent=2) + "\n")
    print(f"\nwritten to {args.output}")


if __name__ == "__main__":
    main()
