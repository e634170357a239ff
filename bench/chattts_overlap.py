"""Can the streaming decode run beside the token loop instead of between its steps? Measured on this CPU.

    .venv/bin/python -m bench.chattts_overlap --assets /tmp/chattts-full    # about a minute on 2 cores

A server at concurrency 4 spends part of its time outside decode steps (``bench/chattts_profile.py``): prefilling
prompts and decoding tokens to audio. Running the decode in a second thread while the steps go on would hide it
only if the two shared the CPU better than taking turns. This times ``--running`` sequences' decode steps alone,
one decode of as many 88-token windows alone (the windows a 64-token request's stream decodes), and then the steps
again while a second thread decodes windows back to back, in three ways:

- **same**: the decode thread with torch's threads, as the token loop has them;
- **one thread**: the decode thread with one torch thread (each thread keeps its own count);
- **idle**: one torch thread at Linux's ``SCHED_IDLE`` priority, so that it runs only when a core has nothing else.

It prints the step time while decoding and the gain: the work done (steps and decodes, each at its time alone)
over the wall time it took; above 1 the two overlap.
"""

from __future__ import annotations

import argparse
import os
import threading
import time

import torch

from bench.chattts_join import PROMPTS, prompt_ids, running_batch, steps_s
from engines.chattts import streaming
from engines.chattts.engine import ChatTTSEngine

__all__ = ["main"]

WINDOW_TOKENS = 88
MODES = ("same", "one thread", "idle")


class DecodeLoop(threading.Thread):
    """Decodes the same windows back to back until stopped, the way ``mode`` says; counts whole decodes."""

    def __init__(self, engine: ChatTTSEngine, windows: list[torch.Tensor], mode: str) -> None:
        super().__init__(daemon=True)
        self.engine, self.windows, self.mode = engine, windows, mode
        self.decodes = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        if self.mode != "same":
            torch.set_num_threads(1)  # this thread's count: the token loop's thread keeps its own
        if self.mode == "idle":
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))  # 0: this thread, on Linux
        while not self.stopping.is_set():
            streaming.decode_windows(self.engine._chat, self.windows)
            self.decodes += 1


def decode_s(engine: ChatTTSEngine, windows: list[torch.Tensor], rounds: int = 3) -> float:
    streaming.decode_windows(engine._chat, windows)
    started = time.perf_counter()
    for _ in range(rounds):
        streaming.decode_windows(engine._chat, windows)
    return (time.perf_counter() - started) / rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--assets", required=True, help="a ChatTTS directory (chattts-gateway assets generate ...)")
    parser.add_argument("--running", type=int, default=4, help="sequences decoding (and windows per decode)")
    parser.add_argument("--steps", type=int, default=60, help="steps timed each way")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    engine = ChatTTSEngine({"source": "dir", "path": args.assets, "device": "cpu", "threads": args.threads})
    engine.load()
    prompt = prompt_ids(engine, PROMPTS[0])
    hidden_size = int(engine._chat.config.gpt.hidden_size)
    windows = [torch.randn(WINDOW_TOKENS, hidden_size) for _ in range(args.running)]
    print(f"{args.running} sequences; {args.running} windows of {WINDOW_TOKENS} tokens per decode")
    print("| decode thread | step alone (ms) | step while decoding (ms) | decode alone (ms) | decodes | gain |")
    print("|---|---|---|---|---|---|")
    for mode in MODES:
        step = steps_s(running_batch(engine, prompt, args.running), args.steps) / args.steps
        decode = decode_s(engine, windows)
        codes = running_batch(engine, prompt, args.running)
        loop = DecodeLoop(engine, windows, mode)
        loop.start()
        wall = steps_s(codes, args.steps)
        loop.stopping.set()
        loop.join()
        gain = (args.steps * step + loop.decodes * decode) / wall
        print(f"| {mode} | {step * 1000:.1f} | {wall / args.steps * 1000:.1f} | {decode * 1000:.0f} | "
              f"{loop.decodes} | {gain:.2f} x |")  # fmt: skip


if __name__ == "__main__":
    main()
