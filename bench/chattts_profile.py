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

``--compare torch,onnxruntime,onnxruntime+int8`` (issue #51) loads the model once with both ONNX graphs beside it
and speaks the batch on each decode step in turn, ``--rounds`` times, the order reversed every other round: on a
busy machine the variants share its moods. Per run it prints each part's share of the batch's wall time (the rest:
the engine loop, sampling's bookkeeping, PCM), then each variant's batch time over torch's (median of the rounds).

Then the bound: the requests are spoken once more with torch's FLOP counter on (not timed), giving each part's
arithmetic; with the CPU's own peak (the best of a large matrix product, timed here) it prints how fast prefill and
decode already run, and the largest share of the time the steps could have if both ran at that peak and the stream
decoded no token twice (its left context re-decodes some): how close to the step-only ceiling a server can come.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, get_args

import torch
from torch.utils.flop_counter import FlopCounterMode

from engines.base import CancelFlag, SynthesisRequest
from engines.chattts import generation, streaming
from engines.chattts.assets import ASSET_FILES, HASH_FILE
from engines.chattts.engine import ChatTTSEngine
from engines.chattts.options import Dtype, Weights

__all__ = ["main"]

PROMPT = "Request number {} is speaking now, and it keeps speaking for a while longer than that."


LABELS = ("prefill", "step", "step+prefill", "decode", "plan")


def blocked_product_flops(rows_shape: tuple[int, ...], weight_shape: tuple[int, ...], *_: Any, **__: Any) -> int:
    """The arithmetic of oneDNN's product on a blocked weight (``engines/chattts/small_batch.py``), which torch's
    FLOP counter does not know: two operations per row, input and output feature."""
    return 2 * math.prod(rows_shape) * weight_shape[0]


BLOCKED_PRODUCT_FLOPS = {torch.ops.mkldnn._linear_pointwise: blocked_product_flops}


class Tally:
    """Per label: wall seconds and calls, or (while ``counting``) floating-point operations instead."""

    def __init__(self) -> None:
        self.spent: defaultdict[str, float] = defaultdict(float)
        self.cpu: defaultdict[str, float] = defaultdict(float)
        """CPU seconds of the whole process (every thread): on a busy machine, less disturbed than wall time."""
        self.calls: Counter[str] = Counter()
        self.flops: Counter[str] = Counter()
        self.decoded_tokens = 0
        """Token rows the streaming decode went through (left context included)."""
        self.counting = False

    def clear(self) -> None:
        self.spent.clear()
        self.cpu.clear()
        self.calls.clear()
        self.decoded_tokens = 0

    def run(self, label: str, call: Any) -> Any:
        if self.counting:
            with FlopCounterMode(display=False, custom_mapping=BLOCKED_PRODUCT_FLOPS) as counter:
                result = call()
            self.flops[label] += counter.get_total_flops()
            return result
        started, cpu = time.perf_counter(), time.process_time()
        try:
            return call()
        finally:
            self.spent[label] += time.perf_counter() - started
            self.cpu[label] += time.process_time() - cpu
            self.calls[label] += 1


def timed(owner: Any, name: str, label: str, tally: Tally) -> None:
    """Replace ``owner.name`` with a wrapper adding its wall time (or FLOPs) to ``label``."""
    original = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if label == "decode":
            tally.decoded_tokens += sum(len(window) for window in args[1])
        return tally.run(label, lambda: original(*args, **kwargs))

    setattr(owner, name, wrapper)


def timed_steps(tally: Tally) -> None:
    """Time ``CodeBatch.step`` by what the pass computes (see the module docstring)."""
    original = generation.CodeBatch.step

    def wrapper(self: Any) -> Any:
        running, waiting = self._rows is not None, bool(self._waiting)
        label = "step+prefill" if running and waiting else "step" if running else "prefill"
        return tally.run(label, lambda: original(self))

    generation.CodeBatch.step = wrapper  # type: ignore[method-assign]


@torch.inference_mode()
def matmul_peak() -> float:
    """FLOP per second of the best of several large float32 matrix products: what this CPU's BLAS reaches."""
    left, right = torch.randn(2048, 1024), torch.randn(1024, 2048)
    best = float("inf")
    for _ in range(8):
        started = time.perf_counter()
        torch.mm(left, right)
        best = min(best, time.perf_counter() - started)
    return 2 * 2048 * 1024 * 2048 / best


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
    parser.add_argument("--assets", required=True, help="a ChatTTS directory (chattts-gateway assets generate ...)")
    parser.add_argument("--batch", type=int, default=4, help="requests spoken together")
    parser.add_argument("--tokens", type=int, default=64, help="audio tokens per request")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--dtype", default="auto", choices=get_args(Dtype),
                        help="the engine's dtype option")  # fmt: skip
    parser.add_argument("--decoder", default="torch", choices=("torch", "onnxruntime"), help="the decoder option")
    parser.add_argument("--weights", default="float32", choices=get_args(Weights), help="the weights option")
    parser.add_argument("--stagger", type=int, default=0, help="steps between requests (0: all together)")
    parser.add_argument("--prefill-chunk-tokens", type=int, help="prefill_chunk_tokens (default: prompts whole)")
    parser.add_argument("--max-chunk-tokens", type=int, default=96,
                        help="stream_max_chunk_tokens (24: fixed-size chunks, as before they grew)")  # fmt: skip
    parser.add_argument("--stream-decode-threads", type=lambda s: None if s == "none" else int(s), default=1,
                        help="stream_decode_threads (none: the worker's threads, as before issue #51)")  # fmt: skip
    parser.add_argument("--compare", help="decode steps to alternate: torch, onnxruntime, onnxruntime+int8")
    parser.add_argument("--rounds", type=int, default=2, help="with --compare: runs of each")
    args = parser.parse_args()
    if args.compare:
        args.decoder, args.weights = "onnxruntime", "float32"
    torch.set_num_threads(args.threads)
    options = {"source": "dir", "path": args.assets, "device": "cpu", "threads": args.threads,
               "max_new_token": args.tokens, "min_new_token": args.tokens, "max_batch": max(8, args.batch),
               "stream_max_chunk_tokens": args.max_chunk_tokens,
               "prefill_chunk_tokens": args.prefill_chunk_tokens, "dtype": args.dtype,
               "decoder": args.decoder, "weights": args.weights,
               "stream_decode_threads": args.stream_decode_threads}  # fmt: skip
    engine = ChatTTSEngine(options)
    engine.load()
    tally = Tally()
    timed_steps(tally)
    timed(streaming, "decode_windows", "decode", tally)
    timed(ChatTTSEngine, "_plan", "plan", tally)

    def speak() -> float:
        # Unseeded: a request's own seed would run it apart from the batch (docs/engines.md, "Seeded requests").
        requests = [SynthesisRequest(PROMPT.format(i), "alloy") for i in range(args.batch)]
        first = requests if not args.stagger else requests[:1]
        arrivals = Staggered(requests[1:], args.stagger) if args.stagger else None
        started = time.perf_counter()
        for _ in engine.synthesize_batch(first, [CancelFlag() for _ in first], arrivals):
            pass
        return time.perf_counter() - started

    if args.compare:
        compare(engine, tally, speak, args.compare.split(","), args.rounds)
        return
    speak()
    tally.clear()
    total = speak()
    decoded_tokens = tally.decoded_tokens
    tally.counting = True
    speak()
    print(f"batch {args.batch}, {args.tokens} tokens, {args.threads} threads: {total * 1000:.0f} ms in all")
    for label in LABELS:
        spent, share = tally.spent[label], 100 * tally.spent[label] / total
        rate = f"{tally.flops[label] / spent / 1e9:6.1f} GFLOP/s" if spent else ""
        cpu, cpu_share = tally.cpu[label], 100 * tally.cpu[label] / max(sum(tally.cpu.values()), 1e-9)
        print(f"  {label:12} {spent * 1000:7.0f} ms  {tally.calls[label]:4d} calls  {share:5.1f} %  "
              f"CPU {cpu * 1000:7.0f} ms {cpu_share:5.1f} %  {rate}")  # fmt: skip
    print_bound(tally, args.batch * args.tokens / decoded_tokens)


def compare(engine: ChatTTSEngine, tally: Tally, speak: Any, variants: list[str], rounds: int) -> None:
    """Speak the batch on each variant's decode step in turn (see the module docstring)."""
    from engines.chattts.onnx_step import DecodeGraph

    assert engine._graph is not None, "the float32 graph did not load"
    float32 = engine._graph
    graphs: dict[str, Any] = {"torch": None, "onnxruntime": float32}
    if "onnxruntime+int8" in variants:
        graphs["onnxruntime+int8"] = DecodeGraph(engine_int8_path(engine), torch.get_num_threads())
    totals: dict[str, list[float]] = {variant: [] for variant in variants}
    print("| round | decode steps | batch ms | prefill | steps | DVAE + Vocos | rest | CPU s | load |")
    print("|---|---|---|---|---|---|---|---|---|")
    for round_number in range(rounds):
        for variant in variants if round_number % 2 == 0 else variants[::-1]:
            engine._graph = graphs[variant]
            tally.clear()
            total = speak()
            totals[variant].append(total)
            steps = tally.spent["step"] + tally.spent["step+prefill"]
            parts = [tally.spent["prefill"], steps, tally.spent["decode"]]
            shares = [f"{100 * part / total:.1f} %" for part in [*parts, total - sum(parts)]]
            print(f"| {round_number} | {variant} | {total * 1000:.0f} | {' | '.join(shares)} | "
                  f"{sum(tally.cpu.values()):.1f} | {os.getloadavg()[0]:.1f} |", flush=True)  # fmt: skip
    base = statistics.median(totals[variants[0]])
    for variant in variants[1:]:
        ratios = ", ".join(f"{a / b:.2f}" for a, b in zip(totals[variants[0]], totals[variant], strict=True))
        print(f"- {variants[0]} batch time / {variant}'s: {base / statistics.median(totals[variant]):.2f}x "
              f"(median; per round {ratios})")  # fmt: skip


def engine_int8_path(engine: ChatTTSEngine) -> Path:
    """Where the engine keeps (or would keep) its 8-bit graph of generated assets, made now if missing (their hash
    map is their own: read, not computed again)."""
    from engines.chattts.onnx_step import graph_key, graph_path, quantize_graph

    assert engine._graph is not None
    assert engine.options.path is not None
    model = Path(engine.options.path)
    hashes = json.loads((model / HASH_FILE).read_text())
    key = graph_key({name: hashes[name] for name in ASSET_FILES}, torch.float32, int8=True)
    path = graph_path(model, Path(engine.options.cache_dir).expanduser(), key)
    if not path.is_file():
        quantize_graph(engine._graph.path, path)
    return path


def print_bound(tally: Tally, needed_share: float) -> None:
    """The steps' largest share of the time (see the module docstring); ``needed_share``: the part of the decoded
    token rows that were not left context decoded again."""
    peak = matmul_peak()
    steps = tally.spent["step"] + tally.spent["step+prefill"]
    prefill = tally.flops["prefill"] / peak
    decode = tally.flops["decode"] * needed_share / peak
    print(f"  matrix product peak {peak / 1e9:.1f} GFLOP/s; prefill {prefill * 1000:.0f} ms and decode of each token "
          f"once ({needed_share:.0%} of those decoded) {decode * 1000:.0f} ms at that peak; "
          f"the steps' share could at best be {steps / (steps + prefill + decode):.1%}")  # fmt: skip


if __name__ == "__main__":
    main()
