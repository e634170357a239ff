"""Two exported decode graphs timed on the same decode-step inputs, alternating: what a change to the exporter costs.

    .venv/bin/python -m bench.chattts_graph_ab OLD.onnx NEW.onnx    # under a minute for the full model

Each graph's file is what ``engines/chattts/onnx_step.py`` writes (``onnx/decode-step-KEY.onnx`` beside the weights):
export the old one from a checkout of the old code (``git worktree add``) by loading the engine there with ``decoder:
onnxruntime`` on the same assets. Both sessions get the engine's options; random inputs of the full model's shapes
(``--cached`` columns in the cache) are fed to both, one step each in turn (each first half the time: the second of a
pair runs warmer), ``--steps`` times per batch size, and the medians compared. A graph whose ``hidden`` input is
``(rows, hidden)`` (the engine's: one token per row) gets its inputs so; one whose ``hidden`` is ``(rows, tokens,
hidden)`` (a graph of several tokens per row, as tried for prefill: BENCHMARKS.md, "Prefill through ONNX Runtime")
gets one token per row.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from engines.chattts.onnx_step import open_session

if TYPE_CHECKING:
    import onnxruntime as ort

__all__ = ["main"]


def step_inputs(graph: ort.InferenceSession, rows: int, cached: int, seed: int = 0) -> dict[str, np.ndarray]:
    """A decode step's inputs for ``graph``: one new token per row over ``cached`` columns."""
    shapes = {node.name: node.shape for node in graph.get_inputs()}
    one_token_layout = len(shapes["hidden"]) == 2
    hidden_size, head_dim = int(shapes["hidden"][-1]), int(shapes["cos"][-1])
    kv_heads = int(shapes["past_keys_0"][1])
    random = np.random.default_rng(seed)

    def tensor(*shape: int) -> np.ndarray:
        return random.standard_normal(shape, dtype=np.float32)

    per_row: dict[str, np.ndarray] = {
        "hidden": tensor(rows, hidden_size), "cos": tensor(rows, head_dim), "sin": tensor(rows, head_dim),
        "bias": np.zeros((rows, cached + 1), np.float32),
    }  # fmt: skip
    feeds = per_row if one_token_layout else {name: array[:, None] for name, array in per_row.items()}
    for name in shapes:
        if name.startswith("past_"):
            feeds[name] = tensor(rows, kv_heads, cached, head_dim)
    return feeds


def median_ms(runs: list[float]) -> float:
    return 1000 * statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("old", help="the first graph's .onnx file")
    parser.add_argument("new", help="the second graph's .onnx file")
    parser.add_argument("--batches", default="1,4,8", help="rows per step")
    parser.add_argument("--cached", type=int, default=100, help="columns in the KV cache")
    parser.add_argument("--steps", type=int, default=30, help="steps timed per graph and batch size")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    graphs = [open_session(Path(args.old), args.threads), open_session(Path(args.new), args.threads)]
    print("| rows | old (ms) | new (ms) | new / old |")
    print("|---|---|---|---|")
    for rows in (int(size) for size in args.batches.split(",")):
        feeds = [step_inputs(graph, rows, args.cached) for graph in graphs]
        times: list[list[float]] = [[], []]
        for _ in range(3):  # warm-up
            for graph, inputs in zip(graphs, feeds, strict=True):
                graph.run(None, inputs)
        for step in range(args.steps):
            order = (0, 1) if step % 2 == 0 else (1, 0)  # each graph goes first half the time: a second runs warmer
            for which in order:
                started = time.perf_counter()
                graphs[which].run(None, feeds[which])
                times[which].append(time.perf_counter() - started)
        old_ms, new_ms = median_ms(times[0]), median_ms(times[1])
        print(f"| {rows} | {old_ms:.1f} | {new_ms:.1f} | {new_ms / old_ms:.3f} |")


if __name__ == "__main__":
    main()
