"""ChatTTS's token filter per decode step: transformers' top-p then top-k against ours without their sort
(``engines/chattts/nucleus.py``, issue #51), in one process.

    .venv/bin/python -m bench.chattts_sampling --batches 1,4,8,16 --rounds 7

For each batch size, scores for its rows' codebooks (4 per row, 626 audio tokens each, random: the filter's cost does
not depend on them) filtered both ways, alternating over ``--rounds``, on the worker's ``--threads`` torch threads;
prints the median time per step of each, the ratio, and whether they kept the same tokens (they must, bit for bit).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import TYPE_CHECKING

import torch
from ChatTTS.model import gen_logits

from engines.chattts.nucleus import fast_filter

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["main"]

CODEBOOKS, VOCABULARY = 4, 626


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=lambda s: [int(x) for x in s.split(",")], default=[1, 4, 8, 16])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=200, help="filters timed per round")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warpers, _ = gen_logits(VOCABULARY - 1, 0.7, 20, 1.05)  # ChatTTS's defaults
    ours = fast_filter(warpers)
    assert ours is not None

    def transformers(scores: torch.Tensor) -> torch.Tensor:
        for warper in warpers:
            scores = warper(None, scores)
        return scores

    ways: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"transformers": transformers, "without the sort": ours}
    print("| rows | transformers, us per step | without the sort | speed-up | same tokens |")
    print("|---|---|---|---|---|")
    for rows in args.batches:
        scores = torch.randn(rows * CODEBOOKS, VOCABULARY, generator=torch.Generator().manual_seed(rows)) / 0.3
        same = torch.equal(transformers(scores), ours(scores))
        times: dict[str, list[float]] = {name: [] for name in ways}
        for round_ in range(args.rounds):
            for name in ways if round_ % 2 == 0 else reversed(ways):
                started = time.perf_counter()
                for _ in range(args.steps):
                    ways[name](scores)
                times[name].append((time.perf_counter() - started) / args.steps)
        theirs, mine = (statistics.median(times[name]) * 1e6 for name in ways)
        print(f"| {rows} | {theirs:.0f} | {mine:.0f} | {theirs / mine:.1f}x | {'yes' if same else 'NO'} |", flush=True)


if __name__ == "__main__":
    main()
