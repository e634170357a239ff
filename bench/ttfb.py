"""Time to first byte through the gateway: streamed (first body byte) against buffered (the complete body).

Registered in ``bench/run.py`` as ``ttfb``. Every request streams (``stream_format: audio``, the default) and is
timed twice: at its first body byte (what a streaming client can start playing) and at its last (what a client
that buffers the whole body sees before it can play anything). The gateway sends the same bytes either way, so
one request gives both figures. Cells: concurrency 1 and P (the engine's worker count), closed loop, a fixed
number of requests per cell, for

- the synthetic engine, paced by a real-time factor (a per-character delay: the clip lasts ``seconds_per_char``
  per character and each 100 ms chunk takes ``rtf`` times its duration), so the complete body takes many times
  longer than the first chunk;
- ChatTTS on random weights of the real model's dimensions (``--preset full``), every request exactly
  ``--chattts-tokens`` audio tokens.

Texts differ between requests: the gateway synthesizes identical in-flight requests once, and the cache is off.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np

from bench import plots
from bench.servers import GatewayProcess, pinned
from harness.gateway_process import CONSOLE_SCRIPT

if TYPE_CHECKING:
    import argparse
    from collections.abc import Iterator

__all__ = ["markdown", "measure", "plot"]

SPEECH = "/v1/audio/speech"
PERCENTILES = (50, 90, 99)
# Fixed length (35 characters), so every synthetic clip lasts the same: 1.75 s at 0.05 s per character.
SYNTHETIC_TEXT = "Time to first byte, request %06d."
# One short sentence (one ChatTTS segment); its length in audio is fixed by min_new_token == max_new_token.
CHATTTS_TEXT = "Request number %d is speaking now."


@dataclass(frozen=True, slots=True)
class Sample:
    """One request: its status, and seconds from sending it to its first and to its last body byte."""

    status: int
    first_byte_s: float | None
    total_s: float
    size: int
    engine: str


# --------------------------------------------------------------------------------------------------------------------
# measuring


async def timed(client: httpx.AsyncClient, url: str, body: bytes) -> Sample:
    started = time.perf_counter()
    first: float | None = None
    size = 0
    async with client.stream("POST", url, content=body, headers={"content-type": "application/json"}) as response:
        async for data in response.aiter_raw():
            if first is None and data:
                first = time.perf_counter() - started
            size += len(data)
    return Sample(response.status_code, first, time.perf_counter() - started, size,
                  response.headers.get("x-engine", ""))  # fmt: skip


async def closed_loop(client: httpx.AsyncClient, url: str, bodies: Iterator[bytes], *, concurrency: int,
                      requests: int) -> list[Sample]:  # fmt: skip
    """``concurrency`` tasks share ``requests`` requests, each sending its next one when the last has ended."""
    samples: list[Sample] = []
    remaining = iter(range(requests))  # shared: each request is taken by exactly one task

    async def task() -> None:
        for _ in remaining:
            samples.append(await timed(client, url, next(bodies)))

    await asyncio.gather(*(task() for _ in range(concurrency)))
    return samples


async def run_cells(url: str, bodies: Iterator[bytes], *, workers: int, requests: int) -> list[dict[str, Any]]:
    """One unrecorded request per worker (a fresh worker's first request is slower), then c = 1 and c = P."""
    limits = httpx.Limits(max_connections=workers, max_keepalive_connections=workers)
    async with httpx.AsyncClient(limits=limits, timeout=900) as client:
        await asyncio.gather(*(timed(client, url, next(bodies)) for _ in range(workers)))
        cells = []
        for concurrency in sorted({1, workers}):
            started = time.monotonic()
            samples = await closed_loop(client, url, bodies, concurrency=concurrency, requests=requests)
            cells.append(summarize(samples, concurrency, time.monotonic() - started))
            print(f"    c={concurrency}: {brief(cells[-1])}", flush=True)
    return cells


def bodies_of(model: str, template: str, response_format: str) -> Iterator[bytes]:
    index = 0
    while True:
        index += 1
        yield json.dumps({"model": model, "input": template % index, "voice": "alloy",
                          "response_format": response_format}).encode()  # fmt: skip


def percentiles(values_ms: list[float]) -> dict[str, float | None]:
    figures: dict[str, float | None] = dict.fromkeys([*(f"p{p}" for p in PERCENTILES), "mean"])
    if values_ms:
        array = np.array(values_ms)
        figures |= {f"p{p}": round(float(np.percentile(array, p)), 2) for p in PERCENTILES}
        figures["mean"] = round(float(array.mean()), 2)
    return figures


def summarize(samples: list[Sample], concurrency: int, wall_s: float) -> dict[str, Any]:
    ok = [s for s in samples if s.status == 200 and s.first_byte_s is not None]
    first = [s.first_byte_s * 1000 for s in ok if s.first_byte_s is not None]
    total = [s.total_s * 1000 for s in ok]
    return {
        "concurrency": concurrency, "requests": len(samples), "ok": len(ok), "wall_s": round(wall_s, 2),
        "statuses": dict(Counter(str(s.status) for s in samples)), "engines": sorted({s.engine for s in ok}),
        "body_bytes_median": int(np.median([s.size for s in ok])) if ok else None,
        "first_byte_ms": percentiles(first), "total_ms": percentiles(total),
        "first_byte_samples_ms": [round(v, 2) for v in first], "total_samples_ms": [round(v, 2) for v in total],
    }  # fmt: skip


def brief(cell: dict[str, Any]) -> str:
    first, total = cell["first_byte_ms"], cell["total_ms"]
    return (f"{cell['ok']}/{cell['requests']} ok in {cell['wall_s']} s; first byte p50 {first['p50']} "
            f"p90 {first['p90']} p99 {first['p99']} ms; complete p50 {total['p50']} p90 {total['p90']} "
            f"p99 {total['p99']} ms")  # fmt: skip


# --------------------------------------------------------------------------------------------------------------------
# engines


def engine_settings(kind: str, workers: int, options: dict[str, Any], **pool: float) -> dict[str, Any]:
    return {"kind": kind, "workers": workers, "queue_size": 16, "health_interval_s": 30, "options": options, **pool}


def gateway_config(name: str, engine: dict[str, Any]) -> dict[str, Any]:
    # No aliases: the defaults name chattts and espeak, which these gateways do not configure.
    return {"engines": {name: engine}, "aliases": {}, "cache": {"enabled": False}, "server": {"playground": False}}


def measure_engine(name: str, engine: dict[str, Any], template: str, args: argparse.Namespace, *, requests: int,
                   cpus: set[int] | None, start_timeout_s: float) -> dict[str, Any]:  # fmt: skip
    """Starts a gateway serving only ``engine`` and measures both cells against it."""
    with tempfile.TemporaryDirectory(prefix=f"bench-ttfb-{name}-") as tmp:
        with pinned(cpus):
            server = GatewayProcess(gateway_config(name, engine), Path(tmp)).start(start_timeout_s)
        try:
            state = server.engine(name)
            if state["state"] != "ready":
                raise RuntimeError(f"engine {name} is {state['state']}: {state['reason']}")
            # "ready" means one worker is; c = P must find every worker loaded, or two requests share one.
            server.wait_engine(name, start_timeout_s, ready_workers=engine["workers"])
            client_cpus = None if cpus is None else {0}
            with pinned(client_cpus):
                cells = asyncio.run(run_cells(server.base_url + SPEECH, bodies_of(name, template, args.ttfb_format),
                                              workers=engine["workers"], requests=requests))  # fmt: skip
        finally:
            server.stop()
    return {"engine": name, "kind": engine["kind"], "workers": engine["workers"], "settings": engine,
            "text": template, "format": args.ttfb_format, "pinned": cpus is not None, "cells": cells}  # fmt: skip


def synthetic(args: argparse.Namespace) -> dict[str, Any]:
    options = {"seconds_per_char": 0.05, "rtf": args.ttfb_rtf, "chunk_ms": 100}
    engine = engine_settings("synthetic", args.workers, options, queue_timeout_s=60)
    print(f"  synthetic: {args.workers} workers, rtf {args.ttfb_rtf}", flush=True)
    return measure_engine("tones", engine, SYNTHETIC_TEXT, args, requests=args.ttfb_requests,
                          cpus={1} if args.pin else None, start_timeout_s=60)  # fmt: skip


def chattts(args: argparse.Namespace) -> dict[str, Any]:
    assets = chattts_assets(args.chattts_assets)
    workers = args.chattts_workers
    threads = max(1, (os.cpu_count() or 1) // workers)  # one share of the cores each: no oversubscription
    tokens = args.chattts_tokens
    options = {"source": "dir", "path": str(assets), "max_new_token": tokens, "min_new_token": tokens,
               "threads": threads}  # fmt: skip
    engine = engine_settings("chattts", workers, options, queue_timeout_s=900, start_timeout_s=900,
                             stall_timeout_s=600)  # fmt: skip
    print(f"  chattts: {workers} workers x {threads} threads, {tokens} tokens per request, assets {assets}", flush=True)
    # Not pinned: ChatTTS needs every core, and the client's share of CPU is negligible next to it.
    result = measure_engine("chattts", engine, CHATTTS_TEXT, args, requests=args.ttfb_chattts_requests, cpus=None,
                            start_timeout_s=900)  # fmt: skip
    return result | {"tokens": tokens, "threads": threads, "audio_s": tokens * 256 / 12000}


def chattts_assets(path: Path) -> Path:
    """``path`` when it holds verified full-size (or real) weights; otherwise generates the full preset there."""
    from engines.base import EngineUnavailableError
    from engines.chattts.loader import verify_directory

    try:
        location = verify_directory(path)
        marker = json.loads((path / "tts-gateway-assets.json").read_text()) if location.generated else {}
        if marker.get("preset", "full") == "full":
            return path
        reason = f"preset {marker.get('preset')}, not full"
    except EngineUnavailableError as exc:
        reason = str(exc)
    print(f"  generating full-size ChatTTS assets into {path} ({reason}); about 40 s and 1.1 GB", flush=True)
    subprocess.run([str(CONSOLE_SCRIPT), "assets", "generate", "--preset", "full", str(path)], check=True)
    return path


def measure(args: argparse.Namespace) -> dict[str, Any]:
    engines = {"synthetic": synthetic(args)}
    if args.chattts:
        engines["chattts"] = chattts(args)
    return {"engines": engines}


# --------------------------------------------------------------------------------------------------------------------
# report


def _ms(figures: dict[str, float | None]) -> str:
    return " / ".join("-" if figures[f"p{p}"] is None else f"{figures[f'p{p}']:.0f}" for p in PERCENTILES)


def _ratio(cell: dict[str, Any]) -> str:
    first, total = cell["first_byte_ms"]["p50"], cell["total_ms"]["p50"]
    return "-" if not first or total is None else f"{total / first:.1f}x"


def describe(engine: dict[str, Any]) -> str:
    options = engine["settings"]["options"]
    if engine["kind"] == "synthetic":
        audio = len(engine["text"] % 1) * options["seconds_per_char"]
        return (f"engine `tones`, P = {engine['workers']} workers, `rtf: {options['rtf']:g}` "
                f"({options['seconds_per_char'] * options['rtf'] * 1000:g} ms of synthesis per character), "
                f"{audio:g} s of audio per request")  # fmt: skip
    return (f"engine `chattts` on full-size random weights, P = {engine['workers']} workers x {engine['threads']} "
            f"torch threads, {engine['tokens']} audio tokens ({engine['audio_s']:.2f} s) per request, first audio "
            "after 24 tokens (`stream_first_tokens` default), not pinned")  # fmt: skip


def markdown(report: dict[str, Any]) -> str:
    engines = report["engines"]
    lines = [f"Format {next(iter(engines.values()))['format']}, cache off, unique texts; each request timed at its "
             "first body byte (streamed) and at its last (what a buffering client waits for). One unrecorded request "
             "per worker first. With n requests per cell, p99 is close to the slowest request.\n"]  # fmt: skip
    lines += [f"- {name}: {describe(engine)}." for name, engine in engines.items()]  # the engine column's names
    lines += ["", "| engine | concurrency | requests (200) | streamed: first byte p50 / p90 / p99 ms "
              "| buffered: complete body p50 / p90 / p99 ms | complete ÷ first byte (p50) | other statuses |",
              "|---|---|---|---|---|---|---|"]  # fmt: skip
    for name, engine in engines.items():
        for cell in engine["cells"]:
            others = {k: v for k, v in cell["statuses"].items() if k != "200"} or "-"
            lines.append(
                f"| {name} | {cell['concurrency']} | {cell['requests']} ({cell['ok']}) "
                f"| {_ms(cell['first_byte_ms'])} | {_ms(cell['total_ms'])} | {_ratio(cell)} | {others} |"
            )
    lines += ["", "| check | engine | measured | holds |", "|---|---|---|---|"]
    lines += [row for name, engine in engines.items() for row in checks(name, engine["cells"])]
    return "\n".join(lines) + "\n"


def checks(name: str, cells: list[dict[str, Any]]) -> list[str]:
    """Streaming pays (first byte well before the complete body), and c = P queues nothing (first byte as at c = 1)."""
    rows = []
    for cell in cells:
        first, total = cell["first_byte_ms"]["p50"], cell["total_ms"]["p50"]
        if first and total:
            rows.append(
                f"| streamed p50 first byte ≤ ½ buffered p50 complete body (c={cell['concurrency']}) "
                f"| {name} | {first:.0f} vs {total:.0f} ms | {'yes' if first <= total / 2 else 'no'} |"
            )
    if len(cells) == 2 and cells[0]["first_byte_ms"]["p50"] and cells[1]["first_byte_ms"]["p50"]:
        one, many = cells[0]["first_byte_ms"]["p50"], cells[1]["first_byte_ms"]["p50"]
        rows.append(
            f"| p50 first byte at c=P ≤ 1.25 x c=1 (one request per worker) | {name} "
            f"| {many / one:.2f}x | {'yes' if many <= 1.25 * one else 'no'} |"
        )
    return rows


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib as mpl

    mpl.use("Agg")
    import matplotlib.pyplot as plt

    engines = report["engines"]
    fig, axes = plt.subplots(1, len(engines), figsize=(5.5 * len(engines), 4.2), squeeze=False)
    for axis, (name, engine) in zip(axes[0], engines.items(), strict=True):
        for cell, color in zip(engine["cells"], ["#1f77b4", "#d62728"], strict=False):
            c = cell["concurrency"]
            _cdf(axis, cell["first_byte_samples_ms"], color, "-", f"c={c}: first byte (streamed)")
            _cdf(axis, cell["total_samples_ms"], color, "--", f"c={c}: complete body (buffered)")
        _log_ms_axis(axis, mpl)
        axis.set_ylim(0, 1.02)
        axis.set_xlabel("ms from sending the request (log)")
        axis.set_ylabel("share of requests (cumulative)")
        axis.set_title(f"{name}: engine `{engine['engine']}`, P = {engine['workers']} workers, {engine['format']}",
                       fontsize=10)  # fmt: skip
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8, loc="lower right")
    plots.save(fig, f"Time to first byte vs complete body — {plots.subtitle(report)}", path)


def _cdf(axis: Any, values: list[float], color: str, style: str, label: str) -> None:
    if not values:
        return
    ordered = np.sort(np.array(values))
    shares = np.arange(0, ordered.size + 1) / ordered.size  # from 0 at the fastest request up to 1 at the slowest
    axis.step(np.concatenate([ordered[:1], ordered]), shares, where="post", color=color, linestyle=style,
              label=f"{label}, n={ordered.size}")  # fmt: skip


def _log_ms_axis(axis: Any, mpl: Any) -> None:
    axis.set_xscale("log")
    low, high = axis.get_xlim()
    steps = (1, 2, 5) if high / low > 10 else (1, 1.5, 2, 3, 4, 5, 6, 8)  # denser within a single decade
    ticks = [t * 10**e for e in range(0, 6) for t in steps if low <= t * 10**e <= high]
    axis.set_xticks(ticks, [f"{t:g}" for t in ticks])
    axis.xaxis.set_minor_formatter(mpl.ticker.NullFormatter())
