"""The backbone's weight products, each way the worker can compute them on CPU, per row count.

    .venv/bin/python -m bench.chattts_products --assets /tmp/chattts-full    # about a minute on 2 cores

Loads the full model's GPT weights (every linear layer of the backbone, 0.76 GB in float32) and times one product
with each of them in turn, as a pass goes through them, for each row count: MKL's ``F.linear``, ``weight @ rows.T``
(``engines/chattts/small_batch.py``) and oneDNN on blocked copies of the weights; the best of 4 rounds taken in turns
(as the worker measures at load). It prints the milliseconds per pass and the weight bytes read per second on the
blocked copies, the way a memory-bound decode step meets them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import torch.nn.functional as F  # noqa: N812 - torch's own name for it
from torch import nn

from engines.chattts.loader import load_chat, locate_weights
from engines.chattts.small_batch import best_of_alternating, blocked_product, blocked_weight, transposed_product

__all__ = ["main"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--assets", required=True, help="a ChatTTS directory (chattts-gateway assets generate ...)")
    parser.add_argument("--rows", default="1,2,4,8,64", help="row counts")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    location = locate_weights("dir", args.assets, Path(args.assets), download=False, timeout_s=1.0)
    chat = load_chat(location, torch.device("cpu"), torch.float32)
    weights = [m.weight.detach() for m in chat.gpt.gpt.modules() if type(m) is nn.Linear]
    blocked = [blocked_weight(w) for w in weights]
    gigabytes = sum(w.numel() * w.element_size() for w in weights) / 1e9
    print(f"{len(weights)} weights, {gigabytes:.2f} GB; the best of 4 rounds taken in turns")
    print("| rows | F.linear (ms) | weight @ rows.T (ms) | oneDNN blocked (ms) | blocked, GB/s |")
    print("|---|---|---|---|---|")
    with torch.inference_mode():
        for rows in (int(count) for count in args.rows.split(",")):
            inputs = {w.shape[1]: torch.randn(rows, w.shape[1]) for w in weights}
            seconds = best_of_alternating({
                "linear": lambda: [F.linear(inputs[w.shape[1]], w) for w in weights],  # noqa: B023 - called here
                "transposed": lambda: [transposed_product(w, inputs[w.shape[1]]) for w in weights],  # noqa: B023
                "blocked": lambda: [blocked_product(b, inputs[b.shape[1]]) for b in blocked],  # noqa: B023
            })  # fmt: skip
            ms = {way: 1000 * value for way, value in seconds.items()}
            print(f"| {rows} | {ms['linear']:.1f} | {ms['transposed']:.1f} | {ms['blocked']:.1f} | "
                  f"{gigabytes / ms['blocked'] * 1000:.1f} |")  # fmt: skip


if __name__ == "__main__":
    main()
