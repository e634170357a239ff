"""Should the decode graph step on fewer threads while the streaming decode runs beside it? Measured on this CPU.

    .venv/bin/python -m bench.chattts_narrow_steps --assets /tmp/chattts-full --rows 1,4,8    # a few minutes

Beside the token loop, the streaming decode (``engines/chattts/overlap.py``) runs on one thread while the decode
graph's step runs on the worker's ``threads``: on 2 cores, three threads. This times, per row count and alternating
over ``--rounds``, the engine's own step session (**wide**, the worker's threads) and one more session of the same
graph on ``threads - 1`` (**narrow**): each one's step alone, then its steps while a second thread decodes
``--window``-token windows back to back through the engine's audio graph, as the served loop does. It prints the
step time both ways, the decodes done meanwhile, and the work done (steps and decodes, each at its time alone) over
the wall time it took; above 1 the two overlap.

A served stream's time is its steps' (its decode hides beside them), so what counts is the step beside a decode:
a narrower session gains only if its step beside a decode is no slower and the decode ends sooner, leaving more steps
alone. A second session also holds a second copy of the graph's weights (about 260 MB for the 8-bit full-size step).
"""

from __future__ import annotations

import argparse
import threading
import time

import torch

from bench.chattts_join import PROMPTS, prompt_ids, running_batch, steps_s
from engines.chattts import streaming
from engines.chattts.engine import ChatTTSEngine
from engines.chattts.onnx_step import DecodeGraph

__all__ = ["main"]


class DecodeLoop(threading.Thread):
    """Decodes the same windows back to back through ``engine``'s audio graph until stopped; counts the decodes."""

    def __init__(self, engine: ChatTTSEngine, windows: list[torch.Tensor]) -> None:
        super().__init__(daemon=True)
        self.engine, self.windows = engine, windows
        self.decodes = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            decode(self.engine, self.windows)
            self.decodes += 1


def decode(engine: ChatTTSEngine, windows: list[torch.Tensor]) -> None:
    # The decode beside the steps: one thread, the engine's audio graph (as ``DecodeRunner`` hands it).
    assert engine._decodes is not None  # loaded
    streaming.decode_windows(engine._chat, windows, 1, engine._decodes.graph)


def decode_s(engine: ChatTTSEngine, windows: list[torch.Tensor], rounds: int = 5) -> float:
    decode(engine, windows)
    started = time.perf_counter()
    for _ in range(rounds):
        decode(engine, windows)
    return (time.perf_counter() - started) / rounds


def measure(engine: ChatTTSEngine, graph: DecodeGraph, rows: int, windows: list[torch.Tensor], steps: int) -> str:
    prompt = prompt_ids(engine, PROMPTS[0])
    alone = steps_s(running_batch(engine, prompt, rows, graph), steps) / steps
    decode_alone = decode_s(engine, windows)
    codes = running_batch(engine, prompt, rows, graph)
    loop = DecodeLoop(engine, windows)
    loop.start()
    wall = steps_s(codes, steps)
    loop.stopping.set()
    loop.join()
    gain = (steps * alone + loop.decodes * decode_alone) / wall
    return f"{alone * 1000:.1f} | {wall / steps * 1000:.1f} | {decode_alone * 1000:.0f} | {loop.decodes} | {gain:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--assets", required=True, help="a ChatTTS directory (chattts-gateway assets generate ...)")
    parser.add_argument("--rows", default="1,4,8", help="running sequences, comma-separated")
    parser.add_argument("--window", type=int, default=64, help="tokens per decoded window")
    parser.add_argument("--steps", type=int, default=60, help="steps timed each way")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--weights", default="auto", help="the decode step's weights (engine option `weights`)")
    args = parser.parse_args()
    engine = ChatTTSEngine({
        "source": "dir", "path": args.assets, "device": "cpu", "threads": args.threads, "max_batch": 8,
        "decoder": "onnxruntime", "weights": args.weights, "stream_decode_overlap": "on",
    })  # fmt: skip
    engine.load()
    wide = engine._graph
    assert wide is not None, "the decode step runs in torch here: nothing to compare"
    ways = {"wide": wide, "narrow": DecodeGraph(wide.path, max(1, args.threads - 1))}
    windows = [torch.randn(args.window, int(engine._chat.config.gpt.hidden_size))]
    print(f"threads {args.threads} (narrow: {max(1, args.threads - 1)}); one {args.window}-token window per decode")
    print("| rows | round | session | step alone (ms) | beside a decode (ms) | decode alone (ms) | decodes | gain |")
    print("|---|---|---|---|---|---|---|---|")
    for rows in (int(part) for part in args.rows.split(",")):
        for round_ in range(args.rounds):
            order = list(ways) if round_ % 2 == 0 else list(reversed(ways))
            for name in order:
                print(f"| {rows} | {round_ + 1} | {name} | {measure(engine, ways[name], rows, windows, args.steps)} |")


if __name__ == "__main__":
    main()
