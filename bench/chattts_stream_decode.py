"""The streaming decode (DVAE decoder + Vocos) on one torch thread against the worker's, in one process (issue #51).

    .venv/bin/python -m bench.chattts_stream_decode --assets /tmp/chattts-full    # about 2 minutes on 2 cores

Decodes one window of each ``--tokens`` size (random hidden states: the decode's cost does not depend on them) with
:func:`engines.chattts.streaming.decode_windows`, on ``--threads`` torch threads and on one, alternating ``--rounds``
times, and prints the median wall and CPU time (every thread of the process) of each way. CPU time is the steadier
figure on a machine that other work shares.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

import torch

from engines.chattts import streaming
from engines.chattts.engine import ChatTTSEngine

__all__ = ["main"]


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def timed(chat: object, window: torch.Tensor, threads: int) -> tuple[float, float]:
    """Wall and CPU seconds of one decode of ``window`` on ``threads`` torch threads."""
    cpu, wall = cpu_s(), time.perf_counter()
    streaming.decode_windows(chat, [window], threads)
    return time.perf_counter() - wall, cpu_s() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--assets", required=True, help="a ChatTTS directory (chattts-gateway assets generate ...)")
    parser.add_argument("--tokens", type=lambda s: [int(x) for x in s.split(",")], default=[40, 88])
    parser.add_argument("--threads", type=int, default=2, help="the worker's torch threads")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    engine = ChatTTSEngine({"source": "dir", "path": args.assets, "device": "cpu", "threads": args.threads})
    engine.load()
    chat = engine._chat
    hidden = int(chat.config.gpt.hidden_size)
    ways = {f"{args.threads} threads": args.threads, "1 thread": 1}
    print("| window tokens | torch threads | wall ms | CPU ms |\n|---|---|---|---|")
    for tokens in args.tokens:
        window = torch.randn(tokens, hidden, generator=torch.Generator().manual_seed(tokens))
        for threads in ways.values():
            timed(chat, window, threads)  # warm-up
        found: dict[str, list[tuple[float, float]]] = {way: [] for way in ways}
        for _ in range(args.rounds):
            for way, threads in ways.items():
                found[way].append(timed(chat, window, threads))
        for way, times in found.items():
            wall = statistics.median(wall for wall, _ in times)
            cpu = statistics.median(cpu for _, cpu in times)
            print(f"| {tokens} | {way} | {wall * 1000:.1f} | {cpu * 1000:.1f} |", flush=True)


if __name__ == "__main__":
    main()
