"""The remote hop: a front gateway calling engine nodes (``kind: openai``) against calling an engine node directly.

Registered in ``bench/run.py`` as ``remote``. Two engine nodes (``server.profile: engine``, a synthetic engine whose
cost is sleep: ``request_delay_ms`` before the first chunk, then ``rtf`` times each chunk's duration), and two front
gateways: one whose remote engine has node A as its only endpoint, one with nodes A and B. Two cells:

- **added time to first byte** at concurrency 1: requests alternate between node A directly (with the service token)
  and the one-node front, so drift on a shared machine hits both alike; the figure is the difference of the medians
  (and the median of the paired differences). Target: ≤ 5 ms at p50.
- **throughput with two engine nodes against one**: the same closed loop through the one-node front, then through the
  two-node front, at a concurrency that keeps two nodes' workers busy. The cost is sleep, so the two shared cores do
  not cap it. Target: ≥ 1.8x.

Every request asks for ``pcm`` (no encoding anywhere) with its own text (the gateway synthesizes identical in-flight
requests once); the fronts' caches are off. Every server binds 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import matplotlib.pyplot as plt
import numpy as np

from bench import plots  # sets matplotlib's Agg backend (no display)
from bench.servers import GatewayProcess
from bench.ttfb import Sample, percentiles, timed

if TYPE_CHECKING:
    import argparse
    from collections.abc import Iterator

__all__ = ["add_options", "markdown", "measure", "plot"]

SPEECH = "/v1/audio/speech"
ENGINE = "tones"  # the synthetic engine, by its name on the engine nodes
REMOTE = "nodes"  # the remote engine, by its name on the front gateways
# Fixed length (16 characters: 0.8 s of audio at 0.05 s per character), so every request costs the same.
TEXT = "Remote hop %06d."
TTFB_TARGET_MS = 5.0
SCALING_TARGET = 1.8


def add_options(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("remote")
    g.add_argument("--remote-requests", type=int, default=200, help="first-byte cell: requests per path (c = 1)")
    g.add_argument("--remote-throughput-requests", type=int, default=400, help="throughput cell: requests per front")
    g.add_argument("--remote-workers", type=int, default=4, help="synthetic workers per engine node")
    g.add_argument("--remote-concurrency", type=int, default=0, help="throughput cell (0: 4 x --remote-workers)")
    g.add_argument("--remote-delay-ms", type=float, default=50, help="synthetic request_delay_ms (time to first audio)")
    g.add_argument("--remote-rtf", type=float, default=0.5, help="synthetic real-time factor of the pacing")


# --------------------------------------------------------------------------------------------------------------------
# servers


def engine_node_config(args: argparse.Namespace) -> dict[str, Any]:
    options = {"seconds_per_char": 0.05, "chunk_ms": 100, "rtf": args.remote_rtf,
               "request_delay_ms": args.remote_delay_ms}  # fmt: skip
    engine = {"kind": "synthetic", "workers": args.remote_workers, "queue_size": 256, "queue_timeout_s": 120,
              "health_interval_s": 30, "options": options}  # fmt: skip
    return {"server": {"profile": "engine", "playground": False}, "engines": {ENGINE: engine}, "aliases": {}}


def front_config(nodes: list[GatewayProcess], args: argparse.Namespace) -> dict[str, Any]:
    """A front gateway whose one remote engine balances over ``nodes``, at most a node's workers in flight each."""
    options = {"endpoints": [f"{node.base_url}/v1" for node in nodes], "model": ENGINE,
               "api_key_env": "ENGINE_SERVICE_TOKEN", "max_in_flight": args.remote_workers}  # fmt: skip
    remote = {"kind": "openai", "queue_size": 256, "queue_timeout_s": 120, "options": options}
    return {"server": {"playground": False}, "engines": {REMOTE: remote}, "aliases": {}, "cache": {"enabled": False}}


def start(config: dict[str, Any], workdir: Path, name: str, env: dict[str, str]) -> GatewayProcess:
    folder = workdir / name
    folder.mkdir()
    return GatewayProcess(config, folder, env).start(120)


def start_servers(args: argparse.Namespace, workdir: Path, token: str) -> dict[str, GatewayProcess]:
    """Engine nodes A and B, then a front on A alone and a front on A and B; each waits until it is settled."""
    servers: dict[str, GatewayProcess] = {}
    try:
        for name in ("node-a", "node-b"):
            servers[name] = start(
                engine_node_config(args), workdir, name, {"CHATTTS_GATEWAY_AUTH__SERVICE_TOKEN": token}
            )
        env = {"ENGINE_SERVICE_TOKEN": token}
        servers["front-1"] = start(front_config([servers["node-a"]], args), workdir, "front-1", env)
        servers["front-2"] = start(front_config([servers["node-a"], servers["node-b"]], args), workdir, "front-2",
                                   env)  # fmt: skip
        for name in ("front-1", "front-2"):
            servers[name].wait_engine(REMOTE, 30, state="ready")
    except BaseException:
        stop_all(servers)
        raise
    return servers


def stop_all(servers: dict[str, GatewayProcess]) -> None:
    for server in reversed(list(servers.values())):
        server.stop()


# --------------------------------------------------------------------------------------------------------------------
# measuring


def bodies(model: str) -> Iterator[bytes]:
    index = 0
    while True:
        index += 1
        yield json.dumps({"model": model, "input": TEXT % index, "voice": "alloy", "response_format": "pcm"}).encode()


async def first_byte_cell(servers: dict[str, GatewayProcess], token: str, requests: int) -> dict[str, Any]:
    """c = 1, alternating: node A directly, then the same request shape through the one-node front."""
    direct_url, front_url = servers["node-a"].base_url + SPEECH, servers["front-1"].base_url + SPEECH
    direct_bodies, front_bodies = bodies(ENGINE), bodies(REMOTE)
    direct: list[Sample] = []
    front: list[Sample] = []
    async with (
        httpx.AsyncClient(timeout=120) as client,
        httpx.AsyncClient(timeout=120, headers={"authorization": f"Bearer {token}"}) as node_client,
    ):
        for _ in range(5):  # warm both paths' connections and workers; not recorded
            await timed(node_client, direct_url, next(direct_bodies))
            await timed(client, front_url, next(front_bodies))
        for _ in range(requests):
            direct.append(await timed(node_client, direct_url, next(direct_bodies)))
            front.append(await timed(client, front_url, next(front_bodies)))
    return first_byte_figures(direct, front)


def first_byte_figures(direct: list[Sample], front: list[Sample]) -> dict[str, Any]:
    pairs = [
        (d.first_byte_s * 1000, f.first_byte_s * 1000)
        for d, f in zip(direct, front, strict=True)
        if d.status == f.status == 200 and d.first_byte_s is not None and f.first_byte_s is not None
    ]
    direct_ms, front_ms = [d for d, _ in pairs], [f for _, f in pairs]
    direct_p, front_p = percentiles(direct_ms), percentiles(front_ms)
    added = None if direct_p["p50"] is None or front_p["p50"] is None else round(front_p["p50"] - direct_p["p50"], 2)
    paired = round(float(np.median([f - d for d, f in pairs])), 2) if pairs else None
    return {"requests": len(direct), "pairs_ok": len(pairs),
            "statuses": dict(Counter(f"{d.status}/{f.status}" for d, f in zip(direct, front, strict=True))),
            "direct_ms": direct_p, "front_ms": front_p, "added_p50_ms": added, "paired_median_ms": paired,
            "direct_samples_ms": [round(v, 2) for v in direct_ms],
            "front_samples_ms": [round(v, 2) for v in front_ms]}  # fmt: skip


async def throughput_cell(server: GatewayProcess, *, concurrency: int, requests: int) -> dict[str, Any]:
    """Closed loop: ``concurrency`` clients share ``requests`` requests; requests per second over the whole run."""
    url, texts = server.base_url + SPEECH, bodies(REMOTE)
    samples: list[Sample] = []
    remaining = iter(range(requests))
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=300, limits=limits) as client:

        async def loop() -> None:
            for _ in remaining:
                samples.append(await timed(client, url, next(texts)))

        started = time.monotonic()
        await asyncio.gather(*(loop() for _ in range(concurrency)))
        wall_s = time.monotonic() - started
    ok = [s for s in samples if s.status == 200]
    return {"concurrency": concurrency, "requests": len(samples), "ok": len(ok), "wall_s": round(wall_s, 2),
            "statuses": dict(Counter(str(s.status) for s in samples)), "rps": round(len(ok) / wall_s, 2),
            "total_ms": percentiles([s.total_s * 1000 for s in ok])}  # fmt: skip


def node_jobs(servers: dict[str, GatewayProcess], token: str) -> dict[str, int]:
    """Requests each engine node's synthetic engine has finished (from its metrics, behind the service token): the
    fronts' balance."""
    counts = {}
    for name in ("node-a", "node-b"):
        headers = {"authorization": f"Bearer {token}"}
        text = httpx.get(servers[name].base_url + "/metrics", headers=headers, timeout=10).text
        counts[name] = int(sum(float(line.split()[-1]) for line in text.splitlines()
                               if line.startswith("tts_synthesis_seconds_count")))  # fmt: skip
    return counts


def measure(args: argparse.Namespace) -> dict[str, Any]:
    token = secrets.token_hex(32)
    concurrency = args.remote_concurrency or 4 * args.remote_workers
    with tempfile.TemporaryDirectory(prefix="bench-remote-") as tmp:
        servers = start_servers(args, Path(tmp), token)
        try:
            print(f"  first byte at c=1: {args.remote_requests} requests per path", flush=True)
            first = asyncio.run(first_byte_cell(servers, token, args.remote_requests))
            print(
                f"    added p50 {first['added_p50_ms']} ms (paired median {first['paired_median_ms']} ms)", flush=True
            )
            cells = {}
            for name in ("front-1", "front-2"):
                before = node_jobs(servers, token)
                cells[name] = asyncio.run(throughput_cell(servers[name], concurrency=concurrency,
                                                          requests=args.remote_throughput_requests))  # fmt: skip
                after = node_jobs(servers, token)
                cells[name]["node_jobs"] = {node: after[node] - before[node] for node in after}
                print(f"    {name}: {cells[name]['rps']} req/s, {cells[name]['node_jobs']}", flush=True)
        finally:
            stop_all(servers)
    one, two = cells["front-1"]["rps"], cells["front-2"]["rps"]
    return {"pinning": "none (the engines' cost is sleep)", "settings": engine_node_config(args),
            "first_byte": first, "throughput": cells, "scaling": round(two / one, 2) if one else None}  # fmt: skip


# --------------------------------------------------------------------------------------------------------------------
# report


def _fmt(figures: dict[str, float | None]) -> str:
    return " / ".join("-" if figures[k] is None else f"{figures[k]:.1f}" for k in ("p50", "p90", "p99"))


def markdown(report: dict[str, Any]) -> str:
    first, cells, options = report["first_byte"], report["throughput"], report["settings"]["engines"][ENGINE]
    holds_ttfb = first["added_p50_ms"] is not None and first["added_p50_ms"] <= TTFB_TARGET_MS
    holds_scaling = report["scaling"] is not None and report["scaling"] >= SCALING_TARGET
    lines = [
        f"Engine nodes: synthetic, {options['workers']} workers each, options {options['options']}; `pcm`; the fronts'"
        " remote engine sends at most a node's workers in flight per node.\n",
        "| first byte at c = 1 | p50 / p90 / p99 ms |",
        "|---|---|",
        f"| engine node directly | {_fmt(first['direct_ms'])} |",
        f"| through a front gateway | {_fmt(first['front_ms'])} |",
        f"\nAdded by the hop at p50: **{first['added_p50_ms']} ms** (median of paired differences "
        f"{first['paired_median_ms']} ms; {first['pairs_ok']} pairs; target ≤ {TTFB_TARGET_MS:g} ms: "
        f"{'holds' if holds_ttfb else 'does not hold'}).\n",
        "| throughput | concurrency | ok / requests | req/s | complete p50 / p90 / p99 ms | jobs per node |",
        "|---|---|---|---|---|---|",
    ]
    for name, label in (("front-1", "one engine node"), ("front-2", "two engine nodes")):
        cell = cells[name]
        lines.append(f"| {label} | {cell['concurrency']} | {cell['ok']} / {cell['requests']} | {cell['rps']} | "
                     f"{_fmt(cell['total_ms'])} | {cell['node_jobs']} |")  # fmt: skip
    lines.append(f"\nTwo nodes against one: **{report['scaling']}x** (target ≥ {SCALING_TARGET:g}x: "
                 f"{'holds' if holds_scaling else 'does not hold'}).\n")  # fmt: skip
    return "\n".join(lines)


def plot(report: dict[str, Any], path: Path) -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
    first = report["first_byte"]
    left.boxplot([first["direct_samples_ms"], first["front_samples_ms"]], showfliers=False)
    left.set_xticks([1, 2], ["node directly", "through a front"])
    left.set_ylabel("time to first byte (ms)")
    left.set_title(f"c = 1: +{first['added_p50_ms']} ms at p50", fontsize=9)
    rps = [report["throughput"][name]["rps"] for name in ("front-1", "front-2")]
    right.bar(["one node", "two nodes"], rps, color=["#888888", "#3a7bd5"])
    right.set_ylabel("requests per second")
    right.set_title(f"closed loop: {report['scaling']}x", fontsize=9)
    plots.save(fig, f"Remote hop — {plots.subtitle(report)}", path)
