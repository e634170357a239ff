"""ChatTTS batching: served throughput and time to first audio, one worker, continuous batching on vs off, against
the token loop's own ceiling.

Runs the real engine worker process through the pool (as the gateway does) on random-weight assets of ChatTTS's
real dimensions (``--preset full``: the same FLOPs per token as the real model). Every request is one sentence of
exactly ``--tokens`` audio tokens (``min_new_token == max_new_token``), so that runs are comparable and bounded.

    .venv/bin/python bench/chattts_batching.py --assets /tmp/chattts-full          # about 6 minutes, 2 cores
    .venv/bin/python bench/chattts_batching.py --preset tiny --assets /tmp/chattts-tiny --repeat 1   # a smoke run
    .venv/bin/python bench/run.py batching        # the same, with the other benchmarks' report header and plot

Measures, in this order:

1. The ceiling: the token loop in process (no worker, no streaming decode), one decode step per batch size (1, 2, 4,
   8) and torch thread count (``--ceiling-threads``), as ms per step and as audio seconds per wall second
   (batch x 512/24000 s of audio per step).
2. Per mode (``continuous_batching`` off, then on; both ``max_batch`` = the highest level, ``batch_window_ms: 10``,
   ``threads: --threads``), after one unrecorded request:

   - closed loop: at concurrency N, N clients each send ``--repeat`` requests back to back;
   - staggered: ``--stagger`` x N requests arrive one every half of one request's duration (the median wall time of
     a request at closed-loop concurrency 1 in the first mode; the same schedule for both modes), at most N of them
     in flight (a request that finds N in flight is sent when one ends).

   Per row: audio seconds per wall second (all audio over the wall time from the first send to the last end), time
   to first audio (from sending a request to its first chunk: median and 90th percentile), the worker's RSS, the
   batches the worker formed from idle (joins are not batches), and the throughput as a share of the ceiling at
   batch N and ``--threads``.

``--json`` writes the report, rewritten after every row so that an interrupted run keeps what it measured.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

import psutil

from engines.base import OPENAI_VOICES, SynthesisRequest
from engines.chattts.assets import generate_assets
from engines.chattts.options import Dtype
from engines.pool import EnginePool
from engines.settings import local_engine_settings

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

SAMPLE_RATE = 24000
TOKEN_AUDIO_S = 512 / SAMPLE_RATE
TARGET = 2.5
"""Continuous-batching throughput at closed-loop concurrency 4 (or the highest level) over concurrency 1's."""
REQUEST_TIMEOUT_S = 300.0
"""No request of a healthy run comes near this; it keeps a stuck worker from running the benchmark forever."""
BUDGET_S = 780.0
"""Levels not started within this many seconds of the start are skipped (and listed), so that a slow machine still
finishes within 15 minutes."""
CEILING_BATCHES = (1, 2, 4, 8)
CEILING_STEPS = 16
CEILING_PROMPT = "Request number 12 is speaking now, and it keeps speaking for a while longer than that."


@dataclass(frozen=True, slots=True)
class Setup:
    """What one run measures."""

    assets: Path
    tokens: int
    levels: list[int]
    repeat: int
    stagger: int
    threads: int
    ceiling_threads: list[int]
    device: str = "auto"
    stagger_interval_s: float | None = None
    """Half of one request's duration; measured in the first mode when not given."""
    budget_s: float = BUDGET_S
    """Levels not started within this many seconds of the start are skipped."""
    dtype: str = "auto"
    """The engine's ``dtype`` option (the GPT backbone's number type), for the ceiling and the served runs alike."""


# ----------------------------------------------------------------- the ceiling (in a fresh process)
def step_times(assets: str, device: str, dtype: str, threads: list[int]) -> list[dict[str, Any]]:
    """Ms per decode step of the token loop per thread count and batch size (runs in a spawned process)."""
    import torch

    from engines.chattts.engine import ChatTTSEngine

    engine = ChatTTSEngine({"source": "dir", "path": assets, "device": device, "dtype": dtype})
    engine.load()
    rows = []
    for count in threads:
        torch.set_num_threads(count)
        for batch in CEILING_BATCHES:
            step_ms = _time_steps(engine, batch)
            rows.append({"threads": count, "batch": batch, "step_ms": step_ms,
                         "ceiling": batch * TOKEN_AUDIO_S / (step_ms / 1000)})  # fmt: skip
    return rows


def _time_steps(engine: Any, batch: int) -> float:
    from engines.base import CancelFlag
    from engines.chattts.generation import CodeBatch, CodeRequest, Sampling

    voices = engine._voices.named
    prompt = engine.prompts.named_voice_prompt(CEILING_PROMPT)
    requests = [CodeRequest(row, prompt, voices[OPENAI_VOICES[row]], row, 4096, 4096, CancelFlag())
                for row in range(batch)]  # fmt: skip
    codes = CodeBatch(engine._chat, Sampling())
    codes.join(requests)
    for _ in range(3):  # warm-up: the first steps allocate
        codes.step()
    started = time.perf_counter()
    for _ in range(CEILING_STEPS):
        codes.step()
    return (time.perf_counter() - started) / CEILING_STEPS * 1000


def measure_ceiling(setup: Setup) -> list[dict[str, Any]]:
    # A spawned process: the benchmark process stays free of torch and its memory, as the gateway's server is.
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as executor:
        ceiling = executor.submit(step_times, str(setup.assets), setup.device, setup.dtype, setup.ceiling_threads)
        return ceiling.result()


# ----------------------------------------------------------------- served load
async def one_request(pool: EnginePool, index: int, results: list[tuple[float, float, float]]) -> None:
    """Send one request; append (seconds to the first chunk, audio seconds, seconds in all)."""
    # Unseeded: a request's own seed would run it apart from the batch (docs/engines.md, "Seeded requests").
    request = SynthesisRequest(f"Request number {index} is speaking now.", OPENAI_VOICES[index % 13])
    started = time.monotonic()
    first: float | None = None
    size = 0
    async with pool.open_stream(request) as chunks:
        async for chunk in chunks:
            first = first if first is not None else time.monotonic() - started
            size += len(chunk)
    results.append((first or 0.0, size / 2 / SAMPLE_RATE, time.monotonic() - started))


async def closed_loop(pool: EnginePool, level: int, repeat: int) -> list[tuple[float, float, float]]:
    results: list[tuple[float, float, float]] = []

    async def client(number: int) -> None:
        for turn in range(repeat):
            await bounded(one_request(pool, number * repeat + turn, results))

    await asyncio.gather(*(client(n) for n in range(level)))
    return results


async def staggered(pool: EnginePool, level: int, count: int, interval_s: float) -> list[tuple[float, float, float]]:
    results: list[tuple[float, float, float]] = []
    slots = asyncio.Semaphore(level)
    started = time.monotonic()

    async def arrival(index: int) -> None:
        await asyncio.sleep(max(0.0, started + index * interval_s - time.monotonic()))
        async with slots:
            await bounded(one_request(pool, index, results))

    await asyncio.gather(*(arrival(i) for i in range(count)))
    return results


async def bounded(request: Awaitable[None]) -> None:
    await asyncio.wait_for(request, REQUEST_TIMEOUT_S)


def summary(results: list[tuple[float, float, float]], wall: float) -> dict[str, Any]:
    ttfa = sorted(first for first, _, _ in results)
    audio = sum(seconds for _, seconds, _ in results)
    return {"requests": len(results), "audio_s": audio, "wall_s": wall, "throughput": audio / wall,
            "ttfa_median_s": statistics.median(ttfa), "ttfa_p90_s": ttfa[min(len(ttfa) - 1, int(0.9 * len(ttfa)))],
            "request_median_s": statistics.median(total for _, _, total in results)}  # fmt: skip


async def start_pool(setup: Setup, continuous: bool) -> EnginePool:
    options = {
        "source": "dir", "path": str(setup.assets), "max_new_token": setup.tokens, "min_new_token": setup.tokens,
        "max_batch": max(setup.levels), "batch_window_ms": 10, "device": setup.device, "threads": setup.threads,
        "continuous_batching": continuous, "dtype": setup.dtype,
    }  # fmt: skip
    settings = local_engine_settings(kind="chattts", options=options, queue_size=64, queue_timeout_s=600,
                                     start_timeout_s=600, stall_timeout_s=600, health_interval_s=60)  # fmt: skip
    pool = EnginePool("bench", settings)
    await pool.start()
    if not await pool.wait_ready(600):
        raise RuntimeError(pool.status().reason)
    await bounded(one_request(pool, 999, []))  # unrecorded: a fresh worker's first request is slower
    return pool


async def run_mode(
    setup: Setup,
    continuous: bool,
    ceiling: dict[int, float],
    on_row: Callable[[dict[str, Any]], None],
    deadline: float,
) -> float:
    """Closed loop then staggered arrivals at every level; returns the stagger interval it used."""
    pool = await start_pool(setup, continuous)
    interval = setup.stagger_interval_s
    try:
        for load in ("closed", "staggered"):
            for level in setup.levels:
                if time.monotonic() > deadline:
                    print(f"over budget: skipping continuous={continuous} {load} concurrency {level}", flush=True)
                    on_row({"continuous": continuous, "load": load, "concurrency": level, "skipped": True})
                    continue
                row = await measure_level(pool, setup, load, level, interval)
                share = row["throughput"] / ceiling[level] if level in ceiling else None
                row |= {"continuous": continuous, "of_ceiling": share}
                if interval is None and load == "closed" and level == setup.levels[0]:
                    interval = row["request_median_s"] / 2
                on_row(row)
    finally:
        await pool.stop()
    return interval or 0.0


async def measure_level(
    pool: EnginePool, setup: Setup, load: str, level: int, interval: float | None
) -> dict[str, Any]:
    batches_before = pool.status().batch_sizes
    started = time.monotonic()
    if load == "closed":
        results = await closed_loop(pool, level, setup.repeat)
    else:
        results = await staggered(pool, level, setup.stagger * level, interval or 0.0)
    stagger = {"stagger_interval_s": interval if load == "staggered" else None}
    return {"load": load, "concurrency": level, **summary(results, time.monotonic() - started),
            **worker_facts(pool, batches_before), **stagger}  # fmt: skip


def worker_facts(pool: EnginePool, batches_before: dict[int, int]) -> dict[str, Any]:
    status = pool.status()
    rss = sum(psutil.Process(pid).memory_info().rss for pid in status.pids) / 2**20
    batches = {size: n - batches_before.get(size, 0) for size, n in sorted(status.batch_sizes.items())}
    return {"rss_mib": rss, "batch_sizes": {size: n for size, n in batches.items() if n}}


def run(setup: Setup, keep: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """The whole benchmark; ``keep`` gets the report after every step (for ``--json``)."""
    report: dict[str, Any] = {"tokens": setup.tokens, "device": setup.device, "dtype": setup.dtype,
                              "repeat": setup.repeat, "levels": setup.levels, "threads": setup.threads,
                              "stagger": setup.stagger,
                              "ceiling": [], "rows": []}  # fmt: skip
    started = time.monotonic()
    deadline = started + setup.budget_s
    report["ceiling"] = measure_ceiling(setup)
    keep(report)
    print(f"ceiling measured in {time.monotonic() - started:.0f} s: {report['ceiling']}", flush=True)
    ceiling = {r["batch"]: r["ceiling"] for r in report["ceiling"] if r["threads"] == setup.threads}

    def row(values: dict[str, Any]) -> None:
        report["rows"].append(values)
        print(values, flush=True)
        keep(report)

    interval = asyncio.run(run_mode(setup, False, ceiling, row, deadline))
    fixed = Setup(**{**asdict(setup), "stagger_interval_s": setup.stagger_interval_s or interval})
    asyncio.run(run_mode(fixed, True, ceiling, row, deadline))
    report["stagger_interval_s"] = fixed.stagger_interval_s
    report["elapsed_s"] = time.monotonic() - started
    return report


# ----------------------------------------------------------------- bench/run.py entry points
def measure(args: argparse.Namespace) -> dict[str, Any]:
    """``bench/run.py batching``: the whole benchmark on verified full-size assets."""
    from bench.ttfb import chattts_assets

    ceiling_threads = sorted({*levels(args.batching_ceiling_threads), args.batching_threads})
    setup = Setup(
        chattts_assets(args.chattts_assets), args.batching_tokens, levels(args.batching_concurrency),
        args.batching_repeat, args.batching_stagger, args.batching_threads, ceiling_threads,
        dtype=args.batching_dtype,
    )  # fmt: skip
    return run(setup, lambda _: None)


def levels(text: str) -> list[int]:
    return [int(c) for c in text.split(",")]


def gain_level(levels: list[int]) -> int:
    return 4 if 4 in levels else max(levels)


def markdown(report: dict[str, Any]) -> str:
    return "\n".join([*ceiling_table(report), "", *served_table(report), "", *target_table(report)]) + "\n"


def ceiling_table(report: dict[str, Any]) -> list[str]:
    lines = [f"Ceiling: the token loop in process, one decode step ({CEILING_STEPS} timed after 3), no streaming "
             "decode; audio s / wall s = batch x 21.33 ms / step.\n",
             "| torch threads | batch | ms per step | audio s / wall s |", "|---|---|---|---|"]  # fmt: skip
    lines += [f"| {r['threads']} | {r['batch']} | {r['step_ms']:.1f} | {r['ceiling']:.3f} |" for r in report["ceiling"]]
    return lines


def served_table(report: dict[str, Any]) -> list[str]:
    interval = report.get("stagger_interval_s") or 0.0
    lines = [f"Served: one worker ({report['threads']} torch threads), {report['tokens']} audio tokens per request, "
             f"`max_batch` {max(report['levels'])}, `batch_window_ms: 10`. Closed loop: N clients x {report['repeat']} "
             f"requests back to back. Staggered: {report['stagger']} x N requests, one every {interval:.2f} s (half "
             "of one request's duration), at most N in flight. TTFA: from sending a request to its first audio.\n",
             "| continuous | load | concurrency | requests | audio s / wall s | % of ceiling | median TTFA (s) "
             "| p90 TTFA (s) | RSS (MiB) | batches formed from idle (size: count) |",
             "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in report["rows"]:
        if r.get("skipped"):
            lines.append(f"| {'on' if r['continuous'] else 'off'} | {r['load']} | {r['concurrency']} "
                         "| skipped: over the time budget |||||||")  # fmt: skip
            continue
        batches = ", ".join(f"{size}: {n}" for size, n in r["batch_sizes"].items()) or "-"
        share = f"{100 * r['of_ceiling']:.0f} %" if r["of_ceiling"] is not None else "-"
        lines.append(f"| {'on' if r['continuous'] else 'off'} | {r['load']} | {r['concurrency']} | {r['requests']} "
                     f"| {r['throughput']:.3f} | {share} | {r['ttfa_median_s']:.2f} | {r['ttfa_p90_s']:.2f} "
                     f"| {r['rss_mib']:.0f} | {batches} |")  # fmt: skip
    return lines


def target_table(report: dict[str, Any]) -> list[str]:
    closed = {r["concurrency"]: r["throughput"] for r in measured(report) if r["continuous"] and r["load"] == "closed"}
    level = gain_level(report["levels"])
    if level not in closed or len(closed) < 2:
        return ["(no gain to read: levels skipped or only one level run)"]
    gain = closed[level] / closed[min(closed)]
    return ["| target | measured | holds |", "|---|---|---|",
            f"| continuous-batching throughput at closed-loop concurrency {level} ≥ {TARGET:g}x concurrency "
            f"{min(closed)}'s | {gain:.2f}x | {'yes' if gain >= TARGET else 'no'} |"]  # fmt: skip


def measured(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in report["rows"] if not r.get("skipped")]


def plot(report: dict[str, Any], path: Path) -> None:
    """Throughput (with the ceiling) and median time to first audio against concurrency, per mode and load."""
    import matplotlib.pyplot as plt

    from bench import plots  # selects matplotlib's non-interactive backend before the first figure

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for (continuous, load), style in (((False, "closed"), "o--"), ((True, "closed"), "o-"),
                                      ((False, "staggered"), "s--"), ((True, "staggered"), "s-")):  # fmt: skip
        rows = [r for r in measured(report) if r["continuous"] is continuous and r["load"] == load]
        label = f"{'continuous' if continuous else 'static'} batching, {load}"
        left.plot([r["concurrency"] for r in rows], [r["throughput"] for r in rows], style, label=label)
        right.plot([r["concurrency"] for r in rows], [r["ttfa_median_s"] for r in rows], style, label=label)
    ceiling = [r for r in report["ceiling"] if r["threads"] == report["threads"] and r["batch"] in report["levels"]]
    left.plot([r["batch"] for r in ceiling], [r["ceiling"] for r in ceiling], "k:", label="ceiling (token loop)")
    left.set_ylabel("audio seconds per wall second")
    right.set_ylabel("median time to first audio, s")
    for axis in (left, right):
        axis.set_xscale("log", base=2)
        axis.set_xticks(report["levels"], [str(level) for level in report["levels"]])
        axis.set_xlabel("concurrency")
        axis.set_ylim(bottom=0)
        axis.legend(fontsize=7)
    title = f"ChatTTS batching, one worker, {report['tokens']} tokens per request"
    plots.save(fig, f"{title} — {plots.subtitle(report)}" if "machine" in report else title, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--assets", type=Path, default=Path("/tmp/chattts-full"))
    parser.add_argument("--preset", default="full", choices=["tiny", "full"], help="generated when --assets has none")
    parser.add_argument("--tokens", type=int, default=64, help="audio tokens per request (~21 ms each)")
    parser.add_argument("--concurrency", default="1,2,4,8")
    parser.add_argument("--repeat", type=int, default=3, help="closed loop: requests per client")
    parser.add_argument("--stagger", type=int, default=3, help="staggered: requests per level, times the level")
    parser.add_argument("--stagger-interval-s", type=float, default=None, help="default: half of one request")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of the worker")
    parser.add_argument("--ceiling-threads", default="1,2", help="torch thread counts of the ceiling")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"],
                        help="the engine's device option (auto: CUDA when torch sees one)")  # fmt: skip
    parser.add_argument("--budget-s", type=float, default=BUDGET_S, help="skip the levels not started by then")
    parser.add_argument("--dtype", default="auto", choices=get_args(Dtype),
                        help="the engine's dtype option")  # fmt: skip
    parser.add_argument("--json", type=Path, default=None, help="also write the report here (JSON)")
    parser.add_argument("--plot", type=Path, default=None, help="also draw the plot here (PNG)")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: ``bench.plots`` for --plot
    if not (args.assets / "tts-gateway-assets.json").exists():
        print(f"generating {args.preset} assets into {args.assets} ...", flush=True)
        generate_assets(args.assets, args.preset)
    ceiling_threads = levels(args.ceiling_threads)
    setup = Setup(args.assets, args.tokens, levels(args.concurrency), args.repeat, args.stagger, args.threads,
                  sorted({*ceiling_threads, args.threads}), args.device, args.stagger_interval_s,
                  args.budget_s, args.dtype)  # fmt: skip

    def keep(report: dict[str, Any]) -> None:
        if args.json is not None:
            args.json.write_text(json.dumps(report, indent=1))

    report = run(setup, keep)
    keep(report)
    if args.plot is not None:
        plot(report, args.plot)
    print(f"\n{markdown(report)}\ntook {report['elapsed_s']:.0f} s")


if __name__ == "__main__":
    main()
