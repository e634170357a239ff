"""ChatTTS dynamic batching: throughput and time to first byte, one worker, batching on vs off.

Runs the real engine worker process through the pool (as the gateway does) on random-weight assets of ChatTTS's
real dimensions (``--preset full``: the same FLOPs per token as the real model). Every request is one sentence of
exactly ``--tokens`` audio tokens (``min_new_token == max_new_token``), so that runs are comparable and bounded.

    .venv/bin/python bench/chattts_batching.py --assets /tmp/chattts-full --tokens 64
    .venv/bin/python bench/chattts_batching.py --device cuda --tokens 64 --concurrency 1,4,8,16 --repeat 3
    .venv/bin/python bench/run.py batching        # the same, with the other benchmarks' report, table and plot

Reports, per mode and concurrency: audio seconds per wall second, median TTFB, and the worker's RSS (host memory;
on ``--device cuda`` the GPU's memory is not in it). ``--repeat`` runs each concurrency level several times back to
back and pools them (throughput: all audio over all wall time; TTFB: the median over every request); ``--json``
writes the rows, one file, rewritten after every row so that an interrupted run keeps what it measured.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from engines.base import OPENAI_VOICES, SynthesisRequest
from engines.chattts.assets import generate_assets
from engines.pool import EnginePool
from gateway.settings import EngineSettings

if TYPE_CHECKING:
    from collections.abc import Callable

SAMPLE_RATE = 24000
TARGET = 2.5
"""Batched throughput at concurrency 4 (or the highest level run) over one unbatched worker's (the ChatTTS issue's)."""


async def one_request(pool: EnginePool, index: int) -> tuple[float, float]:
    """Returns (seconds to the first chunk, audio seconds)."""
    request = SynthesisRequest(f"Request number {index} is speaking now.", OPENAI_VOICES[index % 13], seed=index)
    started = time.monotonic()
    first: float | None = None
    size = 0
    async with pool.open_stream(request) as chunks:
        async for chunk in chunks:
            first = first if first is not None else time.monotonic() - started
            size += len(chunk)
    return first or 0.0, size / 2 / SAMPLE_RATE


async def run_mode(
    assets: Path,
    tokens: int,
    batching: bool,
    levels: list[int],
    *,
    device: str = "auto",
    repeat: int = 1,
    on_row: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    options = {
        "source": "dir", "path": str(assets), "max_new_token": tokens, "min_new_token": tokens,
        "max_batch": max(levels) if batching else 1, "batch_window_ms": 10, "device": device,
    }  # fmt: skip
    settings = EngineSettings(kind="chattts", options=options, queue_size=64, queue_timeout_s=600,
                              start_timeout_s=600, stall_timeout_s=600, health_interval_s=60)  # fmt: skip
    pool = EnginePool("bench", settings)
    await pool.start()
    if not await pool.wait_ready(600):
        raise RuntimeError(pool.status().reason)
    info = pool.info
    print(f"batching {'on' if batching else 'off'}: engine details {info.details if info else None}", flush=True)
    await one_request(pool, 999)  # unrecorded: a fresh worker's first request is slower, and level 1 comes first
    rows = []
    try:
        for level in levels:
            batches_before = pool.status().batch_sizes
            results: list[tuple[float, float]] = []
            wall = 0.0
            for _ in range(repeat):
                started = time.monotonic()
                results += await asyncio.gather(*(one_request(pool, i) for i in range(level)))
                wall += time.monotonic() - started
            status = pool.status()
            rss = sum(psutil.Process(pid).memory_info().rss for pid in status.pids) / 2**20
            batches = {size: n - batches_before.get(size, 0) for size, n in sorted(status.batch_sizes.items())}
            audio = sum(seconds for _, seconds in results)
            rows.append({"batching": batching, "concurrency": level, "requests": len(results), "audio_s": audio,
                         "wall_s": wall, "throughput": audio / wall,
                         "ttfb_median_s": statistics.median(t for t, _ in results), "rss_mib": rss,
                         "batch_sizes": {size: n for size, n in batches.items() if n}})  # fmt: skip
            print(rows[-1], flush=True)
            if on_row is not None:
                on_row(rows[-1])
    finally:
        await pool.stop()
    return rows


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """``bench/run.py batching``: both modes on verified full-size assets, each level ``--batching-repeat`` times."""
    from bench.ttfb import chattts_assets

    assets = chattts_assets(args.chattts_assets)
    levels = [int(c) for c in args.batching_concurrency.split(",")]
    rows: list[dict[str, Any]] = []
    for batching in (False, True):
        asyncio.run(run_mode(assets, args.batching_tokens, batching, levels, repeat=args.batching_repeat,
                             on_row=rows.append))  # fmt: skip
    return {"tokens": args.batching_tokens, "device": "auto", "repeat": args.batching_repeat, "levels": levels,
            "rows": rows}  # fmt: skip


def gain_level(levels: list[int]) -> int:
    return 4 if 4 in levels else max(levels)


def markdown(report: dict[str, Any]) -> str:
    rows = report["rows"]
    base = next(r["throughput"] for r in rows if not r["batching"] and r["concurrency"] == 1)
    lines = [f"One worker, {report['tokens']} audio tokens per request, each level run {report['repeat']} time(s) and "
             "pooled, after one unrecorded request; batching off = `max_batch: 1`, on = `max_batch` = the highest "
             "level, `batch_window_ms: 10`; not pinned (torch uses both cores).\n",
             "| batching | concurrency | requests | audio s / wall s | vs one unbatched worker | median TTFB (s) "
             "| RSS (MiB) | batches formed (size: count) |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        batches = ", ".join(f"{size}: {n}" for size, n in r["batch_sizes"].items()) or "-"
        lines.append(f"| {'on' if r['batching'] else 'off'} | {r['concurrency']} | {r['requests']} "
                     f"| {r['throughput']:.3f} | {r['throughput'] / base:.2f} | {r['ttfb_median_s']:.2f} "
                     f"| {r['rss_mib']:.0f} | {batches} |")  # fmt: skip
    level = gain_level(report["levels"])
    batched = next(r["throughput"] for r in rows if r["batching"] and r["concurrency"] == level)
    gain = batched / base
    lines += ["", "| target | measured | holds |", "|---|---|---|",
              f"| batched throughput at concurrency {level} ≥ {TARGET:g}x one unbatched worker | {gain:.2f}x "
              f"| {'yes' if gain >= TARGET else 'no'} |"]  # fmt: skip
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: Path) -> None:
    from bench import plots

    plots.batching(report, path, target=TARGET)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--assets", type=Path, default=Path("/tmp/chattts-full"))
    parser.add_argument("--preset", default="full", choices=["tiny", "full"])
    parser.add_argument("--tokens", type=int, default=64, help="audio tokens per request (~21 ms each)")
    parser.add_argument("--concurrency", default="1,2,4,8")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"],
                        help="the engine's device option (auto: CUDA when torch sees one)")  # fmt: skip
    parser.add_argument("--repeat", type=int, default=1, choices=range(1, 101), metavar="N",
                        help="runs of each concurrency level, pooled (default 1)")  # fmt: skip
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here (JSON)")
    args = parser.parse_args()
    if not (args.assets / "tts-gateway-assets.json").exists():
        print(f"generating {args.preset} assets into {args.assets} ...", flush=True)
        generate_assets(args.assets, args.preset)
    levels = [int(c) for c in args.concurrency.split(",")]
    rows: list[dict[str, Any]] = []
    meta = {"tokens": args.tokens, "device": args.device, "repeat": args.repeat, "levels": levels}

    def keep(row: dict[str, Any]) -> None:
        rows.append(row)
        if args.json is not None:
            args.json.write_text(json.dumps({**meta, "rows": rows}, indent=1))

    for batching in (False, True):
        asyncio.run(
            run_mode(args.assets, args.tokens, batching, levels, device=args.device, repeat=args.repeat, on_row=keep)
        )
    print("\n" + markdown({**meta, "rows": rows}))


if __name__ == "__main__":
    main()
