"""What a decode step costs with the token loop's KV cache (appending in place) against transformers' ``DynamicCache``
(``torch.cat`` of the whole cache at every step), at a given batch and cache width.

    .venv/bin/python -m bench.chattts_kv_cache --assets /tmp/chattts-full --batch 4 --width 700   # about 2 minutes

Each round prefills ``--batch`` prompts of ``--width`` tokens (so that the cache starts that wide), runs 3 steps,
then times ``--steps``; the two caches alternate round by round (``--rounds`` each) so that the machine's drift
touches both alike, and the medians are compared.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch
from transformers import DynamicCache

from engines.base import CancelFlag
from engines.chattts import kv_cache
from engines.chattts.engine import ChatTTSEngine
from engines.chattts.generation import CodeBatch, CodeRequest, Sampling

__all__ = ["main"]

CACHES = {
    "in place": kv_cache.growing_cache,
    "DynamicCache": lambda backbone: DynamicCache(config=backbone.config),
}


def step_ms(engine: Any, cache: Any, batch: int, width: int, steps: int) -> float:
    kv_cache.growing_cache = cache  # the factory the token loop calls for each new batch
    text = engine.prompts.text_ids("request number twelve is speaking now " * (width // 6 + 1))[:width]
    stts, spk_emb, speed, ptts = engine.prompts.tag_ids(["[Stts]", "[spk_emb]", "[speed_5]", "[Ptts]"])
    prompt = [stts, spk_emb, speed, *text, ptts]
    voice = engine._voices.named["alloy"]
    codes = CodeBatch(engine._chat, Sampling())
    codes.join([CodeRequest(row, prompt, voice, row, 4096, 4096, CancelFlag()) for row in range(batch)])
    for _ in range(3):
        codes.step()
    started = time.perf_counter()
    for _ in range(steps):
        codes.step()
    return (time.perf_counter() - started) / steps * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--assets", required=True, help="a ChatTTS directory (chattts-gateway assets generate ...)")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--width", type=int, default=700, help="prompt tokens: the cache's width when timing starts")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    engine = ChatTTSEngine({"source": "dir", "path": args.assets, "device": "cpu", "threads": args.threads})
    engine.load()
    times: dict[str, list[float]] = {name: [] for name in CACHES}
    for _ in range(args.rounds):
        for name, cache in CACHES.items():
            times[name].append(step_ms(engine, cache, args.batch, args.width, args.steps))
    print(f"batch {args.batch}, cache {args.width}+ columns, {args.threads} threads, ms per decode step:")
    for name, values in times.items():
        rounds = " / ".join(f"{value:.1f}" for value in values)
        print(f"  {name:13} median {statistics.median(values):6.1f}   (rounds: {rounds})")


if __name__ == "__main__":
    main()
