"""A prompt's prefill in float32 against the same prefill's products in 8 bits or bfloat16 (issue #51).

    .venv/bin/python -m bench.chattts_prefill_bits --assets /tmp/chattts-full    # 2-4 minutes on 2 cores

The engine's torch pass over one waiting prompt with nothing running (``CodeBatch._torch_forward``: what a request
arriving at an idle worker waits for), its weight products the float32 way the engine measured at load, or the ways
of ``engines/chattts/prefill.py``, alternating over ``--rounds`` rounds per prompt length: 27 positions (a built-in
voice's sentence), 64, 198 (a sentence with a 3 s voice sample) and 526 (a 10 s sample); the longer ones are the
text's tokens repeated (the content does not change the work). Wall and CPU time (this process's, every thread: the
steadier figure on a shared machine), medians. Quality: the largest difference of the last hidden state against
float32's, and the agreement of the argmax codes of the 64 decode steps after it (the steps in float32, fed float32's
own greedy tokens: only the prefill's keys and values differ). Prints Markdown.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F  # noqa: N812

from bench.chattts_join import PROMPTS, prompt_ids, request
from engines.chattts.engine import ChatTTSEngine
from engines.chattts.generation import CodeBatch, Sampling
from engines.chattts.prefill import PrefillLinear, bfloat16_product, int8_product
from engines.chattts.small_batch import SmallBatchLinear

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["main"]

LENGTHS = (27, 64, 198, 526)
STEPS = 64
MAKERS: dict[str, Callable[[torch.Tensor], Callable[[torch.Tensor], torch.Tensor]]] = {
    "int8": int8_product, "bfloat16": bfloat16_product,
}  # fmt: skip


def prefill_linears(engine: ChatTTSEngine) -> list[PrefillLinear]:
    """The backbone's linear layers, made ``PrefillLinear`` with no prefill product (float32 as loaded)."""
    linears = []
    for module in engine._chat.gpt.gpt.modules():
        if isinstance(module, torch.nn.Linear):
            if type(module) is torch.nn.Linear:
                module.__class__ = SmallBatchLinear
            module.__class__ = PrefillLinear
            linears.append(module)
    return linears  # type: ignore[return-value]


def use(linears: list[PrefillLinear], products: list[Callable[[torch.Tensor], torch.Tensor]] | None) -> None:
    for index, module in enumerate(linears):
        object.__setattr__(module, "prefill", None if products is None else products[index])


def prefill(engine: ChatTTSEngine, prompt: list[int]) -> tuple[float, float, CodeBatch, Any, torch.Tensor]:
    """The pass over the whole prompt: wall and CPU seconds, the batch and its rows, the last hidden state."""
    codes = CodeBatch(engine._chat, Sampling())
    codes.join([request(engine, prompt, 0)])
    parts = codes._parts()
    wall, cpu = time.perf_counter(), time.process_time()
    (hidden,) = codes._torch_forward(parts)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    ((rows, columns),) = parts
    rows.consume(columns)
    return wall, cpu, codes, rows, hidden


def argmax_codes(codes: CodeBatch, rows: Any, hidden: torch.Tensor, num_vq: int) -> torch.Tensor:
    return F.linear(hidden.float(), codes._heads).view(len(rows), num_vq, -1).argmax(-1)  # (1, num_vq)


def decode(
    engine: ChatTTSEngine, prompt: list[int], forced: list[torch.Tensor] | None
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Prefill, then ``STEPS`` float32 steps fed ``forced`` tokens (``None``: its own argmax); the last hidden state
    and every step's argmax codes."""
    num_vq = int(engine._chat.config.gpt.num_vq)
    _, _, codes, rows, hidden = prefill(engine, prompt)
    first = hidden
    chosen = [argmax_codes(codes, rows, hidden, num_vq)]
    for step in range(STEPS):
        rows.advance(engine._chat, chosen[-1] if forced is None else forced[step])
        (hidden,) = codes._torch_forward([(rows, 1)])
        rows.consume(1)
        chosen.append(argmax_codes(codes, rows, hidden, num_vq))
    return first[0], chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--assets", required=True, help="a ChatTTS asset directory (full size for real figures)")
    parser.add_argument("--rounds", type=int, default=5, help="timings per way and prompt, alternating")
    parser.add_argument("--ways", nargs="+", default=list(MAKERS), choices=list(MAKERS))
    parser.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS))
    args = parser.parse_args()
    engine = ChatTTSEngine({"source": "dir", "path": args.assets, "decoder": "torch", "max_batch": 1})
    engine.load()
    linears = prefill_linears(engine)
    products = {way: [MAKERS[way](module.weight) for module in linears] for way in args.ways}
    text = prompt_ids(engine, PROMPTS[-1])
    print(f"torch threads {torch.get_num_threads()}, load average {os.getloadavg()[0]:.1f} at the start")
    print(
        "| positions | way | wall ms | CPU ms | float32 / way, wall | CPU | largest hidden difference | argmax agree |"
    )
    print("|---|---|---|---|---|---|---|---|")
    with torch.inference_mode():
        for length in args.lengths:
            prompt = (text * (length // len(text) + 1))[:length]
            use(linears, None)
            reference, tokens = decode(engine, prompt, None)
            quality = {}
            for way in args.ways:
                use(linears, products[way])
                hidden, chosen = decode(engine, prompt, tokens[:-1])
                agree = float(
                    torch.stack([(a == b).float().mean() for a, b in zip(chosen, tokens, strict=True)]).mean()
                )
                quality[way] = (float((hidden.float() - reference.float()).abs().max()), agree)
            times: dict[str, list[tuple[float, float]]] = {way: [] for way in ["float32", *args.ways]}
            for _ in range(args.rounds):
                for way, measured in times.items():
                    use(linears, None if way == "float32" else products[way])
                    wall, cpu, *_ = prefill(engine, prompt)
                    measured.append((wall, cpu))
            base = [statistics.median(column) for column in zip(*times["float32"], strict=True)]
            for way, measured in times.items():
                wall, cpu = (statistics.median(column) for column in zip(*measured, strict=True))
                difference, agree = quality.get(way, (0.0, 1.0))
                print(f"| {length} | {way} | {1000 * wall:.1f} | {1000 * cpu:.1f} | {base[0] / wall:.2f} | "
                      f"{base[1] / cpu:.2f} | {difference:.1e} | {100 * agree:.1f} % |", flush=True)  # fmt: skip
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
