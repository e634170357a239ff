"""Where one ChatTTS batch spends its time, in process: prefill (joins), decode steps and streaming decode.

    .venv/bin/python -m bench.chattts_profile --assets /tmp/chattts-full --batch 4    # about 30 s on 2 cores

Loads the engine as a worker does (``threads``, the small-batch product measured at load), speaks ``--batch``
requests of exactly ``--tokens`` audio tokens together once to warm up, then again timed, and prints the wall time
of each part: ``join`` (prefilling the prompts), ``step`` (decode steps, sampling included: what the batching
benchmark's ceiling counts), ``decode`` (the decoder and Vocos turning tokens into streamed audio) and ``plan``
(text preparation). What the parts leave of the total is the engine loop's own bookkeeping.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter, defaultdict
from typing import Any

import torch

from engines.base import CancelFlag, SynthesisRequest
from engines.chattts import generation, streaming
from engines.chattts.engine import ChatTTSEngine

__all__ = ["main"]

PROMPT = "Request number {} is speaking now, and it keeps speaking for a while longer than that."


def timed(owner: Any, name: str, label: str, spent: dict[str, float], calls: Counter[str]) -> None:
    """Replace ``owner.name`` with a wrapper adding its wall time to ``spent[label]``."""
    original = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            spent[label] += time.perf_counter() - started
            calls[label] += 1

    setattr(owner, name, wrapper)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--assets", required=True, help="a ChatTTS directory (tts-gateway assets generate ...)")
    parser.add_argument("--batch", type=int, default=4, help="requests spoken together")
    parser.add_argument("--tokens", type=int, default=64, help="audio tokens per request")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--max-chunk-tokens", type=int, default=96,
                        help="stream_max_chunk_tokens (24: fixed-size chunks, as before they grew)")  # fmt: skip
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    options = {"source": "dir", "path": args.assets, "device": "cpu", "threads": args.threads,
               "max_new_token": args.tokens, "min_new_token": args.tokens, "max_batch": max(8, args.batch),
               "stream_max_chunk_tokens": args.max_chunk_tokens}  # fmt: skip
    engine = ChatTTSEngine(options)
    engine.load()
    spent: defaultdict[str, float] = defaultdict(float)
    calls: Counter[str] = Counter()
    timed(generation.CodeBatch, "join", "join", spent, calls)
    timed(generation.CodeBatch, "step", "step", spent, calls)
    timed(streaming, "decode_windows", "decode", spent, calls)
    timed(ChatTTSEngine, "_plan", "plan", spent, calls)

    def speak() -> float:
        requests = [SynthesisRequest(PROMPT.format(i), "alloy", seed=i) for i in range(args.batch)]
        started = time.perf_counter()
        for _ in engine.synthesize_batch(requests, [CancelFlag() for _ in requests]):
            pass
        return time.perf_counter() - started

    speak()
    spent.clear()
    calls.clear()
    total = speak()
    print(f"batch {args.batch}, {args.tokens} tokens, {args.threads} threads: {total * 1000:.0f} ms in all")
    for label in ("join", "step", "decode", "plan"):
        share = 100 * spent[label] / total
        print(f"  {label:7} {spent[label] * 1000:7.0f} ms  {calls[label]:4d} calls  {share:5.1f} %")


if __name__ == "__main__":
    main()
