"""Where one ChatTTS batch spends its time, in process: prefill (joins), decode steps and streaming decode.

    .venv/bin/python -m bench.chattts_profile --assets /tmp/chattts-full --batch 4    # about 30 s on 2 cores

Loads the engine as a worker does (``threads``, the small-batch product measured at load), speaks ``--batch``
requests of exactly ``--tokens`` audio tokens together once to warm up, then again timed, and prints the wall time
of each part: ``prefill`` (passes with nothing running: prompts alone), ``step`` (decode steps, sampling included:
what the batching benchmark's ceiling counts), ``step+prefill`` (decode steps that also carry prompt tokens of
joining sequences), ``decode`` (the decoder and Vocos turning tokens into streamed audio) and ``plan`` (text
preparation). What the parts leave of the total is the engine loop's own bookkeeping.

``--stagger N`` starts the requests N steps apart instead of together (each joins a running batch), as requests
arriving one by one do.
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


def timed_steps(spent: dict[str, float], calls: Counter[str]) -> None:
    """Time ``CodeBatch.step`` by what the pass computes (see the module docstring)."""
    original = generation.CodeBatch.step

    def wrapper(self: Any) -> Any:
        running, waiting = self._rows is not None, bool(self._waiting)
        label = "step+prefill" if running and waiting else "step" if running else "prefill"
        started = time.perf_counter()
        try:
            return original(self)
        finally:
            spent[label] += time.perf_counter() - started
            calls[label] += 1

    generation.CodeBatch.step = wrapper  # type: ignore[method-assign]


class Staggered:
    """A job source for ``synthesize_batch`` handing over one more request every ``steps`` polls."""

    def __init__(self, requests: list[SynthesisRequest], steps: int) -> None:
        self.requests, self.steps, self.polls = requests, steps, 0

    def __call__(self, limit: int) -> list[tuple[SynthesisRequest, CancelFlag]]:
        self.polls += 1
        if not self.requests or self.polls % self.steps or limit < 1:
            return []
        return [(self.requests.pop(0), CancelFlag())]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--assets", required=True, help="a ChatTTS directory (tts-gateway assets generate ...)")
    parser.add_argument("--batch", type=int, default=4, help="requests spoken together")
    parser.add_argument("--tokens", type=int, default=64, help="audio tokens per request")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--stagger", type=int, default=0, help="steps between requests (0: all together)")
    parser.add_argument("--prefill-chunk-tokens", type=int, help="prefill_chunk_tokens (default: prompts whole)")
    parser.add_argument("--max-chunk-tokens", type=int, default=96,
                        help="stream_max_chunk_tokens (24: fixed-size chunks, as before they grew)")  # fmt: skip
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    options = {"source": "dir", "path": args.assets, "device": "cpu", "threads": args.threads,
               "max_new_token": args.tokens, "min_new_token": args.tokens, "max_batch": max(8, args.batch),
               "stream_max_chunk_tokens": args.max_chunk_tokens,
               "prefill_chunk_tokens": args.prefill_chunk_tokens}  # fmt: skip
    engine = ChatTTSEngine(options)
    engine.load()
    spent: defaultdict[str, float] = defaultdict(float)
    calls: Counter[str] = Counter()
    timed_steps(spent, calls)
    timed(streaming, "decode_windows", "decode", spent, calls)
    timed(ChatTTSEngine, "_plan", "plan", spent, calls)

    def speak() -> float:
        requests = [SynthesisRequest(PROMPT.format(i), "alloy", seed=i) for i in range(args.batch)]
        first = requests if not args.stagger else requests[:1]
        arrivals = Staggered(requests[1:], args.stagger) if args.stagger else None
        started = time.perf_counter()
        for _ in engine.synthesize_batch(first, [CancelFlag() for _ in first], arrivals):
            pass
        return time.perf_counter() - started

    speak()
    spent.clear()
    calls.clear()
    total = speak()
    print(f"batch {args.batch}, {args.tokens} tokens, {args.threads} threads: {total * 1000:.0f} ms in all")
    for label in ("prefill", "step", "step+prefill", "decode", "plan"):
        share = 100 * spent[label] / total
        print(f"  {label:12} {spent[label] * 1000:7.0f} ms  {calls[label]:4d} calls  {share:5.1f} %")


if __name__ == "__main__":
    main()
