"""Fairness across tenants: a light tenant's time to first byte while another floods the same engine.

    .venv/bin/python -m bench.fairness                 # 5 scenarios x 30 s, about 3 minutes in all
    .venv/bin/python -m bench.fairness --seconds 3     # a smoke run

One real gateway (``chattts-gateway serve``) with two identical engines of paced synthetic workers (``rtf`` 1: a job
takes as long as its audio, like a model running at real time; ``request_delay_ms`` before the first audio, like a
model's time to first audio), one with ``scheduling: fair``, one with ``scheduling: fifo``. Two tenants:

- **heavy** floods at its concurrency limit: ``--heavy-concurrency`` closed-loop clients, each sending the next long
  request (``--heavy-audio-s`` of audio) as soon as the last one ends;
- **light** sends one short request (``--light-audio-s``) a second, open loop, and times its first response byte.

Scenarios, one after the other: ``idle`` (light alone), ``fair`` (light with the flood, fair engine) and ``fifo``
(light with the flood, FIFO engine); then the same fair engine behind two tiers: an engine node
(``server.profile: engine``) holding it and two front gateways whose engine is ``kind: openai`` pointing at the node,
the flood through front 1 and the light tenant through front 2 (``two-tier idle``, ``two-tier fair``); each front
tells the node whose request it sends, so the node's scheduler shares its workers across the fronts' tenants.
Every text is new, so neither the cache nor single-flight answers. Prints a Markdown table (light tenant's TTFB
percentiles, its ratio to its set-up's idle, 503s, heavy requests served) and writes every figure to
``bench/results/fairness.json``. Targets (issues #14 and #25): the light tenant's TTFB under the flood within 1.5x of
idle, in one box and through two tiers.

What to expect: a job, once on a worker, runs to its end (no preemption). The fair engine keeps its default
``reserved_slots: 1``: every tenant holding or waiting for a slot, or expected back (within twice its usual time
between requests), has a fair share of the slots (here one of two each), and while the light tenant runs less than
its share and is not waiting, the flood does not get the slot it lacks, so the next light request finds it free. The
light tenant's load must fit its share for that: ``--light-audio-s 0.5`` (the default; a job of 0.6 s a second)
does; ``--light-audio-s 1`` (1.1 s of work a second, more than one worker) does not, and its requests then also wait
for each other and for the flood's jobs in fair order. ``--reserved-slots 0`` shows the fair queue alone (a light
request waits for a running heavy job to end); FIFO adds every heavy request queued before it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from auth.keys import generate_api_key, hash_api_key
from bench.servers import GatewayProcess

__all__ = ["main", "measure"]

RESULTS = Path(__file__).resolve().parent / "results" / "fairness.json"
SECONDS_PER_CHAR = 0.02
TARGET_RATIO = 1.5
SCENARIOS = (("idle", "fair", False), ("fair", "fair", True), ("fifo", "fifo", True))
"""(name, engine, flooded)."""
TWO_TIER_SCENARIOS = (("two-tier idle", False), ("two-tier fair", True))
SERVICE_TOKEN = "bench-" + uuid.uuid4().hex + uuid.uuid4().hex


def paced_engine(args: argparse.Namespace) -> dict[str, Any]:
    options = {"rtf": 1.0, "seconds_per_char": SECONDS_PER_CHAR, "request_delay_ms": args.request_delay_ms}
    return {"kind": "synthetic", "workers": args.workers, "queue_size": 64, "options": options}


def config(args: argparse.Namespace, keys: dict[str, str]) -> dict[str, Any]:
    engine = paced_engine(args)
    return {
        "auth": {"tenants": tenants(args, keys)},
        "engines": {
            "fair": {**engine, "scheduling": "fair", "reserved_slots": args.reserved_slots},
            "fifo": {**engine, "scheduling": "fifo"},
        },  # the old behaviour, the baseline
        "server": {"log_level": "warning"},
    }


def node_config(args: argparse.Namespace) -> dict[str, Any]:
    engine = {**paced_engine(args), "scheduling": "fair", "reserved_slots": args.reserved_slots}
    return {
        "server": {"profile": "engine", "log_level": "warning"},
        "auth": {"service_token": SERVICE_TOKEN},
        "engines": {"fair": engine},
    }


def front_config(args: argparse.Namespace, keys: dict[str, str], node_url: str) -> dict[str, Any]:
    options = {"endpoints": [f"{node_url}/v1"], "model": "fair", "api_key": SERVICE_TOKEN, "probe_interval_s": 0.5}
    return {
        "auth": {"tenants": tenants(args, keys)},
        "engines": {"fair": {"kind": "openai", "queue_size": 64, "options": options}},
        "server": {"log_level": "warning"},
    }


def tenants(args: argparse.Namespace, keys: dict[str, str]) -> list[dict[str, Any]]:
    return [
        {
            "name": "heavy",
            "api_key_sha256": [hash_api_key(keys["heavy"])],
            "limits": {"concurrent_streams": args.heavy_concurrency},
        },
        {"name": "light", "api_key_sha256": [hash_api_key(keys["light"])]},
    ]


def unique_text(audio_s: float) -> str:
    chars = max(1, round(audio_s / SECONDS_PER_CHAR))
    return (uuid.uuid4().hex * (chars // 32 + 1))[:chars]


async def request(http: httpx.AsyncClient, key: str, engine: str, audio_s: float) -> float | None:
    """Seconds to the first response byte; None when refused (503 and the like)."""
    body = {"model": engine, "input": unique_text(audio_s), "voice": "alloy", "response_format": "pcm"}
    started = time.perf_counter()
    async with http.stream("POST", "/v1/audio/speech", json=body, headers={"authorization": f"Bearer {key}"}) as reply:
        if reply.status_code != 200:
            await reply.aread()
            return None
        first: float | None = None
        async for _ in reply.aiter_raw():
            first = first or time.perf_counter() - started
        return first


async def flood(http: httpx.AsyncClient, key: str, engine: str, audio_s: float, stop: asyncio.Event) -> int:
    served = 0
    while not stop.is_set():
        served += await request(http, key, engine, audio_s) is not None
    return served


async def scenario(  # noqa: PLR0917 - one scenario's set-up
    args: argparse.Namespace, base_url: str, keys: dict[str, str], engine: str, flooded: bool, heavy_url: str = ""
) -> dict[str, Any]:
    """``heavy_url``: where the flood goes (default: ``base_url``, where the light tenant asks)."""
    limits = httpx.Limits(max_connections=args.heavy_concurrency + args.seconds + 8)
    async with (
        httpx.AsyncClient(base_url=base_url, timeout=120, limits=limits) as http,
        httpx.AsyncClient(base_url=heavy_url or base_url, timeout=120, limits=limits) as heavy_http,
    ):
        stop = asyncio.Event()
        floods = [
            asyncio.create_task(flood(heavy_http, keys["heavy"], engine, args.heavy_audio_s, stop))
            for _ in range(args.heavy_concurrency if flooded else 0)
        ]
        await asyncio.sleep(args.heavy_audio_s if flooded else 0)  # let the flood fill the workers and the queue
        light = []
        for _ in range(args.seconds):
            light.append(asyncio.create_task(request(http, keys["light"], engine, args.light_audio_s)))
            await asyncio.sleep(1.0)
        ttfbs = await asyncio.gather(*light)
        stop.set()
        served = sum(await asyncio.gather(*floods))
    times = sorted(t for t in ttfbs if t is not None)
    return {"light_ttfb_s": times, "light_refused": sum(t is None for t in ttfbs), "heavy_served": served}


def two_tiers(args: argparse.Namespace, keys: dict[str, str]) -> dict[str, dict[str, Any]]:
    """The fair engine on an engine node, the flood through one front and the light tenant through another."""
    with tempfile.TemporaryDirectory() as tmp, GatewayProcess(node_config(args), workdir(tmp, "node")) as node:
        fronts = [GatewayProcess(front_config(args, keys, node.base_url), workdir(tmp, f"front{i}")) for i in (1, 2)]
        try:
            for front in fronts:
                front.start()
                front.wait_engine("fair", state="ready")
            light_url, heavy_url = fronts[1].base_url, fronts[0].base_url
            return {
                name: asyncio.run(scenario(args, light_url, keys, "fair", flooded, heavy_url))
                for name, flooded in TWO_TIER_SCENARIOS
            }
        finally:
            for front in fronts:
                front.stop()


def workdir(parent: str, name: str) -> Path:
    path = Path(parent) / name
    path.mkdir()
    return path


def percentile(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, round(q * (len(values) - 1)))] if values else float("nan")


def measure(args: argparse.Namespace) -> dict[str, Any]:
    keys = {"heavy": generate_api_key(), "light": generate_api_key()}
    with tempfile.TemporaryDirectory() as tmp, GatewayProcess(config(args, keys), Path(tmp)) as server:
        results = {
            name: asyncio.run(scenario(args, server.base_url, keys, engine, flooded))
            for name, engine, flooded in SCENARIOS
        }
    results |= two_tiers(args, keys)
    for name, row in results.items():
        idle = results["two-tier idle" if name.startswith("two-tier") else "idle"]
        row["p50_s"], row["p95_s"] = percentile(row["light_ttfb_s"], 0.5), percentile(row["light_ttfb_s"], 0.95)
        row["ratio_p50_to_idle"] = row["p50_s"] / percentile(idle["light_ttfb_s"], 0.5)
    return {"settings": vars(args), "python": platform.python_version(), "results": results}


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "| scenario | light requests | TTFB p50 ms | TTFB p95 ms | p50 / idle p50 | light refused | heavy served |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, row in report["results"].items():
        lines.append(
            f"| {name} | {len(row['light_ttfb_s']) + row['light_refused']} | {row['p50_s'] * 1000:.0f} | "
            f"{row['p95_s'] * 1000:.0f} | {row['ratio_p50_to_idle']:.2f} | {row['light_refused']} | "
            f"{row['heavy_served']} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=30, help="light requests (one a second) per scenario")
    parser.add_argument("--workers", type=int, default=2, help="worker processes of each engine")
    parser.add_argument("--heavy-concurrency", type=int, default=4, help="the heavy tenant's concurrent streams")
    parser.add_argument("--heavy-audio-s", type=float, default=4.0, help="audio seconds of each heavy request")
    parser.add_argument("--light-audio-s", type=float, default=0.5, help="audio seconds of each light request")
    parser.add_argument("--request-delay-ms", type=float, default=100.0, help="the engine's time to first audio")
    parser.add_argument("--reserved-slots", type=int, default=1, help="reserved_slots of the fair engine")
    args = parser.parse_args()
    report = measure(args)
    print(markdown(report))
    ratio = report["results"]["fair"]["ratio_p50_to_idle"]
    print(f"\nfair p50 / idle p50 = {ratio:.2f} (target <= {TARGET_RATIO})")
    ratio = report["results"]["two-tier fair"]["ratio_p50_to_idle"]
    print(f"two-tier fair p50 / two-tier idle p50 = {ratio:.2f} (target <= {TARGET_RATIO})")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
