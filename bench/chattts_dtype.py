"""The GPT backbone in float32 or bfloat16 (the engine's ``dtype`` option): decode steps and prefill, A/B in process.

    .venv/bin/python -m bench.chattts_dtype --assets /tmp/chattts-full    # about 2 minutes on 2 cores

Loads the engine twice, once per dtype (each measures its small-batch products at load, as a worker does), then
for each batch size times ``--steps`` decode steps of a running batch, and the prefill of that many prompts from
idle, the two engines alternating over ``--rounds`` rounds so that the machine's drift falls on both alike; prints
the medians. bfloat16 pays where the CPU computes it natively (``lscpu``: ``avx512_bf16`` or ``amx_bf16``).
"""

from __future__ import annotations

import argparse
import statistics
import time
from functools import partial
from typing import TYPE_CHECKING

import torch

from bench.chattts_join import PROMPTS, prompt_ids, request, running_batch, steps_s
from engines.chattts.engine import ChatTTSEngine
from engines.chattts.generation import CodeBatch, Sampling

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["main"]

DTYPES = ("float32", "bfloat16")


def steps_ms(engine: ChatTTSEngine, prompt: list[int], rows: int, steps: int) -> float:
    return steps_s(running_batch(engine, prompt, rows), steps) / steps * 1000


def prefill_ms(engine: ChatTTSEngine, prompt: list[int], rows: int) -> float:
    codes = CodeBatch(engine._chat, Sampling())
    codes.join([request(engine, prompt, row) for row in range(rows)])
    started = time.perf_counter()
    codes.step()
    return (time.perf_counter() - started) * 1000


def alternating(measures: dict[str, Callable[[], float]], rounds: int) -> dict[str, float]:
    """The median of each measure, taken in turns over ``rounds`` rounds after one unrecorded round."""
    samples: dict[str, list[float]] = {name: [] for name in measures}
    for index in range(rounds + 1):
        for name, measure in measures.items():
            value = measure()
            if index:
                samples[name].append(value)
    return {name: statistics.median(values) for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--assets", required=True, help="a ChatTTS directory (chattts-gateway assets generate ...)")
    parser.add_argument("--batches", default="1,4,8", help="batch sizes")
    parser.add_argument("--steps", type=int, default=12, help="decode steps timed per round")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    engines = {}
    for dtype in DTYPES:
        engines[dtype] = ChatTTSEngine({"source": "dir", "path": args.assets, "device": "cpu", "threads": args.threads,
                                        "dtype": dtype})  # fmt: skip
        engines[dtype].load()
    prompt = prompt_ids(engines[DTYPES[0]], PROMPTS[1])
    print(f"medians of {args.rounds} alternating rounds; prompts of {len(prompt)} tokens")
    print("| batch | step float32 (ms) | step bfloat16 (ms) | prefill float32 (ms) | prefill bfloat16 (ms) |")
    print("|---|---|---|---|---|")
    for rows in (int(size) for size in args.batches.split(",")):
        step = alternating({d: partial(steps_ms, engines[d], prompt, rows, args.steps) for d in DTYPES}, args.rounds)
        prefill = alternating({d: partial(prefill_ms, engines[d], prompt, rows) for d in DTYPES}, args.rounds)
        print(f"| {rows} | {step['float32']:.1f} | {step['bfloat16']:.1f} | {prefill['float32']:.0f} | "
              f"{prefill['bfloat16']:.0f} |")  # fmt: skip


if __name__ == "__main__":
    main()
