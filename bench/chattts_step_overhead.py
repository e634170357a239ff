"""What a decode step through ONNX Runtime costs around the graph, by how long the sequences have run (issue #51).

    .venv/bin/python -m bench.chattts_step_overhead --assets /tmp/chattts-full --weights int8    # about 3 minutes

Loads the engine with ``decoder: onnxruntime`` (``--weights``), runs a batch of ``--rows`` sequences, and at each
``--at`` steps into their generation times ``--steps`` decode steps two ways, alternating over ``--rounds`` rounds:
``engine``, as the engine steps now; ``all threads``, torch left on all its threads during graph steps (its OpenMP
threads then spin between steps on the cores ONNX Runtime needs: ``engines/chattts/threads.py``); ``before``, that and
the KV cache's used columns made contiguous at every step (``kv_cache.whole_buffers`` off), as before issue #51.
Each way is timed as wall time and as
this process's CPU time (every thread's, ONNX Runtime's included: on a busy machine the wall time also counts the
other processes' turns, the CPU time much less), with the graph's step (``DecodeGraph.step``: its feeds, copies
included, and ``session.run``) apart: the rest is what the step costs around the graph (the rotary, the bias,
sampling, bookkeeping).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from typing import Any
from unittest import mock

import torch

from bench.chattts_join import PROMPTS, prompt_ids, request
from engines.chattts import generation, kv_cache
from engines.chattts.engine import ChatTTSEngine
from engines.chattts.generation import CodeBatch, Sampling

__all__ = ["main"]


class TimedGraph:
    """The engine's decode graph, adding up the wall time of its runs."""

    def __init__(self, graph: Any) -> None:
        self.graph, self.spent = graph, 0.0

    def step(self, *inputs: Any) -> Any:
        started = time.perf_counter()
        try:
            return self.graph.step(*inputs)
        finally:
            self.spent += time.perf_counter() - started


def way(name: str) -> contextlib.ExitStack:
    """The patches of way ``name`` (see the module docstring)."""
    stack = contextlib.ExitStack()
    if name in {"all threads", "before"}:
        stack.enter_context(mock.patch.object(generation, "torch_threads", return_value=contextlib.nullcontext()))
    if name == "before":
        stack.enter_context(mock.patch.object(kv_cache, "whole_buffers", return_value=None))
    return stack


def measure(codes: CodeBatch, timed: TimedGraph, steps: int, name: str) -> tuple[float, float, float]:
    """Per step: wall ms, CPU ms and the graph's step ms, over ``steps`` steps the way ``name``."""
    timed.spent = 0.0
    with way(name), torch.inference_mode():
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(steps):
            codes.step()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return wall / steps * 1000, cpu / steps * 1000, timed.spent / steps * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--assets", required=True)
    parser.add_argument("--weights", default="int8", choices=("float32", "int8"))
    parser.add_argument("--rows", type=int, default=1)
    parser.add_argument("--at", default="32,256,512", help="steps into the generation where each row is timed")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    engine = ChatTTSEngine({"source": "dir", "path": args.assets, "device": "cpu", "threads": args.threads,
                            "decoder": "onnxruntime", "weights": args.weights, "max_batch": 1})  # fmt: skip
    engine.load()
    timed = TimedGraph(engine._graph)
    codes = CodeBatch(engine._chat, Sampling(), graph=timed)  # type: ignore[arg-type]
    prompt = prompt_ids(engine, PROMPTS[1])
    codes.join([request(engine, prompt, row) for row in range(args.rows)])  # 4096 tokens each: none ends
    done = 0
    print(f"{args.weights} graph, {args.rows} row(s), {args.threads} threads; per step, medians of {args.rounds} "
          f"alternating rounds of {args.steps} steps")  # fmt: skip
    print("| steps in | way | wall ms | CPU ms | graph.step ms (wall) | wall outside it |")
    print("|---|---|---|---|---|---|")
    for at in (int(at) for at in args.at.split(",")):
        with torch.inference_mode():
            for _ in range(max(0, at - done)):
                codes.step()
        done = max(done, at)
        samples: dict[str, list[tuple[float, float, float]]] = {"engine": [], "all threads": [], "before": []}
        for index in range(args.rounds + 1):
            for name, kept in samples.items():
                figures = measure(codes, timed, args.steps, name)
                done += args.steps
                if index:
                    kept.append(figures)
        for name, rounds in samples.items():
            wall, cpu, run = (statistics.median(column) for column in zip(*rounds, strict=True))
            print(f"| {at} | {name} | {wall:.1f} | {cpu:.1f} | {run:.1f} | {wall - run:.1f} |")


if __name__ == "__main__":
    main()
