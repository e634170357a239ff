"""What a sequence joining a running batch costs: its prompt prefilled in the running rows' decode step, or apart.

    .venv/bin/python -m bench.chattts_join --assets /tmp/chattts-full    # about a minute on 2 cores

For each prompt length, ``--running`` sequences decode while one more joins, timed both ways, alternating over
``--rounds`` rounds (medians): **one pass**, the token loop as it runs (the joiner's prompt packed into the running
rows' step: the weights are read once for both), and **apart**, a prefill of the joiner on its own followed by the
running rows' step (what the token loop did before it packed them). Both produce the same tokens; what differs is
the wall time before the running sequences have their next token and the joiner its first.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import TYPE_CHECKING, Any

import torch

from engines.base import OPENAI_VOICES, CancelFlag
from engines.chattts.engine import ChatTTSEngine
from engines.chattts.generation import CodeBatch, CodeRequest, Sampling

if TYPE_CHECKING:
    from engines.chattts.onnx_step import DecodeGraph

__all__ = ["main"]

PROMPTS = (
    "Request number twelve is speaking now.",
    "Request number twelve is speaking now, and it keeps speaking for a while longer than that.",
    "Request number twelve is speaking now, and it keeps speaking for a while longer than that, much longer than "
    "anyone would want to hear it, really, and then some more.",
)


def prompt_ids(engine: ChatTTSEngine, text: str) -> list[int]:
    return engine.prompts.named_voice_prompt(text)


def running_batch(engine: ChatTTSEngine, prompt: list[int], rows: int, graph: DecodeGraph | None = None) -> CodeBatch:
    """``rows`` sequences past their prefill and a few steps (the steps that allocate); ``graph``: stepping through
    it (``engines/chattts/onnx_step.py``), else in torch."""
    codes = CodeBatch(engine._chat, Sampling(), None, graph)
    codes.join([request(engine, prompt, row) for row in range(rows)])
    for _ in range(3):
        codes.step()
    return codes


def steps_s(codes: CodeBatch, steps: int) -> float:
    """Seconds that ``steps`` decode steps of ``codes`` take."""
    started = time.perf_counter()
    for _ in range(steps):
        codes.step()
    return time.perf_counter() - started


def request(engine: ChatTTSEngine, prompt: list[int], key: int) -> CodeRequest:
    voice = engine._voices.named[OPENAI_VOICES[key % len(OPENAI_VOICES)]]  # type: ignore[union-attr]
    return CodeRequest(key, prompt, voice, key, 4096, 4096, CancelFlag())


def one_pass_ms(engine: ChatTTSEngine, prompt: list[int], rows: int) -> float:
    codes = running_batch(engine, prompt, rows)
    codes.join([request(engine, prompt, 99)])
    started = time.perf_counter()
    codes.step()
    return (time.perf_counter() - started) * 1000


def apart_ms(engine: ChatTTSEngine, prompt: list[int], rows: int) -> float:
    codes = running_batch(engine, prompt, rows)
    joiner = CodeBatch(engine._chat, Sampling())
    joiner.join([request(engine, prompt, 99)])
    started = time.perf_counter()
    joiner.step()
    codes.step()
    return (time.perf_counter() - started) * 1000


def measure(engine: ChatTTSEngine, rows: int, rounds: int) -> list[dict[str, Any]]:
    results = []
    for text in PROMPTS:
        prompt = prompt_ids(engine, text)
        together, apart = [], []
        for _ in range(rounds):
            together.append(one_pass_ms(engine, prompt, rows))
            apart.append(apart_ms(engine, prompt, rows))
        results.append({"prompt_tokens": len(prompt), "one_pass_ms": statistics.median(together),
                        "apart_ms": statistics.median(apart)})  # fmt: skip
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--assets", required=True, help="a ChatTTS directory (chattts-gateway assets generate ...)")
    parser.add_argument("--running", type=int, default=3, help="sequences decoding when one joins")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    engine = ChatTTSEngine({"source": "dir", "path": args.assets, "device": "cpu", "threads": args.threads})
    engine.load()
    print(f"{args.running} running, one joining; medians of {args.rounds} alternating rounds")
    print("| joiner's prompt (tokens) | one pass (ms) | prefill apart, then the step (ms) | saved (ms) |")
    print("|---|---|---|---|")
    for row in measure(engine, args.running, args.rounds):
        saved = row["apart_ms"] - row["one_pass_ms"]
        print(f"| {row['prompt_tokens']} | {row['one_pass_ms']:.0f} | {row['apart_ms']:.0f} | {saved:.0f} |")


if __name__ == "__main__":
    main()
