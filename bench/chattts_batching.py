"""ChatTTS dynamic batching: throughput and time to first byte, one worker, batching on vs off.

Runs the real engine worker process through the pool (as the gateway does) on random-weight assets of ChatTTS's
real dimensions (``--preset full``: the same FLOPs per token as the real model). Every request is one sentence of
exactly ``--tokens`` audio tokens (``min_new_token == max_new_token``), so that runs are comparable and bounded.

    .venv/bin/python bench/chattts_batching.py --assets /tmp/chattts-full --tokens 64

Reports, per mode and concurrency: audio seconds per wall second, median TTFB, and the worker's RSS.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from pathlib import Path

import psutil

from engines.base import OPENAI_VOICES, SynthesisRequest
from engines.chattts.assets import generate_assets
from engines.pool import EnginePool
from gateway.settings import EngineSettings

SAMPLE_RATE = 24000


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


async def run_mode(assets: Path, tokens: int, batching: bool, levels: list[int]) -> list[dict[str, float]]:
    options = {
        "source": "dir", "path": str(assets), "max_new_token": tokens, "min_new_token": tokens,
        "max_batch": max(levels) if batching else 1, "batch_window_ms": 10,
    }  # fmt: skip
    settings = EngineSettings(kind="chattts", options=options, queue_size=64, queue_timeout_s=600,
                              start_timeout_s=600, stall_timeout_s=600, health_interval_s=60)  # fmt: skip
    pool = EnginePool("bench", settings)
    await pool.start()
    if not await pool.wait_ready(600):
        raise RuntimeError(pool.status().reason)
    rows = []
    try:
        for level in levels:
            started = time.monotonic()
            results = await asyncio.gather(*(one_request(pool, i) for i in range(level)))
            wall = time.monotonic() - started
            rss = sum(psutil.Process(pid).memory_info().rss for pid in pool.status().pids) / 2**20
            audio = sum(seconds for _, seconds in results)
            rows.append({"batching": batching, "concurrency": level, "audio_s": audio, "wall_s": wall,
                         "throughput": audio / wall, "ttfb_median_s": statistics.median(t for t, _ in results),
                         "rss_mib": rss})  # fmt: skip
            print(rows[-1], flush=True)
    finally:
        await pool.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--assets", type=Path, default=Path("/tmp/chattts-full"))
    parser.add_argument("--preset", default="full", choices=["tiny", "full"])
    parser.add_argument("--tokens", type=int, default=64, help="audio tokens per request (~21 ms each)")
    parser.add_argument("--concurrency", default="1,2,4,8")
    args = parser.parse_args()
    if not (args.assets / "tts-gateway-assets.json").exists():
        print(f"generating {args.preset} assets into {args.assets} ...", flush=True)
        generate_assets(args.assets, args.preset)
    levels = [int(c) for c in args.concurrency.split(",")]
    rows = [*asyncio.run(run_mode(args.assets, args.tokens, False, levels)),
            *asyncio.run(run_mode(args.assets, args.tokens, True, levels))]  # fmt: skip
    base = next(r["throughput"] for r in rows if not r["batching"] and r["concurrency"] == 1)
    header = "| batching | concurrency | audio s / wall s | vs one unbatched worker | median TTFB (s) | RSS (MiB) |"
    print(f"\n{header}")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {'on' if r['batching'] else 'off'} | {r['concurrency']} | {r['throughput']:.3f} | "
              f"{r['throughput'] / base:.2f} | {r['ttfb_median_s']:.2f} | {r['rss_mib']:.0f} |")  # fmt: skip


if __name__ == "__main__":
    main()
