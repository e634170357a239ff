"""A prompt's prefill in torch (the engine's own pass) against the same prefill through an ONNX Runtime graph.

    .venv/bin/python -m bench.chattts_prefill --assets /tmp/chattts-full    # about a minute on 2 cores

Issue #37: "Prefill goes through the same graph or stays in torch, whichever measures faster." The decode graph
(``engines/chattts/onnx_step.py``) takes one new token per row; a prompt's prefill takes its tokens at once. This
bench exports a prefill graph of the same layers from the loaded weights (one row, the prompt's tokens at once, a
causal mask, no cache; out: the normed last hidden state and every layer's keys and values, what the engine's pass
leaves) and times it against the engine's torch pass (``CodeBatch`` over one waiting prompt with nothing running:
what a request arriving at an idle worker waits for), the two alternating over ``--rounds`` rounds, per prompt length:
the three prompts of ``bench/chattts_join.py`` and longer ones (a voice sample's codes make prompts of hundreds of
tokens). The largest difference between the two last hidden states is printed beside the times, and below them
the resident memory the prefill graph's session takes (ONNX Runtime holds its own copy of the weights).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import psutil
import torch
from torch import nn

from bench.chattts_join import PROMPTS, prompt_ids, request
from engines.chattts.engine import ChatTTSEngine
from engines.chattts.generation import CodeBatch, Sampling
from engines.chattts.onnx_step import (  # the decode graph's own products and rotary embedding
    _linear,
    _rotary,
    open_session,
)

__all__ = ["PrefillStep", "main"]

LONG_PROMPTS = (256, 1024)
"""Prompt lengths beyond the texts': the longest text's tokens repeated (the content does not change the work)."""


class PrefillStep(nn.Module):
    """One row's prompt through every layer at once: ``(hidden (tokens, hidden), cos, sin (tokens, head_dim), bias
    (tokens, tokens))`` to the normed last hidden state and each layer's keys and values ``(heads, tokens,
    head_dim)``, as the decode graph's products are written (``_DecodeStep``)."""

    def __init__(self, backbone: Any) -> None:
        super().__init__()
        self.backbone = backbone
        attention = backbone.layers[0].self_attn
        self.head_dim = int(attention.head_dim)
        self.scale = float(attention.scaling)
        self.num_heads = int(backbone.config.num_attention_heads)
        if int(backbone.config.num_key_value_heads) != self.num_heads:
            raise SystemExit("this bench's prefill graph is written for as many key and value heads as query heads")

    def forward(self, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                bias: torch.Tensor) -> tuple[torch.Tensor, ...]:  # fmt: skip
        cos, sin = cos[None], sin[None]
        columns: list[torch.Tensor] = []
        for layer in self.backbone.layers:
            attention = layer.self_attn
            normed = layer.input_layernorm(hidden)
            queries = _rotary(self._heads_of(_linear(attention.q_proj, normed)), cos, sin)
            keys = _rotary(self._heads_of(_linear(attention.k_proj, normed)), cos, sin)
            values = self._heads_of(_linear(attention.v_proj, normed))
            weights = torch.softmax((queries @ keys.transpose(-1, -2)) * self.scale + bias, dim=-1)
            attended = (weights @ values).transpose(0, 1).reshape(-1, self.num_heads * self.head_dim)
            hidden = hidden + _linear(attention.o_proj, attended)
            normed = layer.post_attention_layernorm(hidden)
            mlp = layer.mlp
            hidden = hidden + _linear(
                mlp.down_proj, mlp.act_fn(_linear(mlp.gate_proj, normed)) * _linear(mlp.up_proj, normed)
            )
            columns += [keys, values]
        return (self.backbone.norm(hidden[-1:]), *columns)

    def _heads_of(self, states: torch.Tensor) -> torch.Tensor:
        """``(tokens, heads * head_dim)`` as ``(heads, tokens, head_dim)``."""
        return states.reshape(-1, self.num_heads, self.head_dim).transpose(0, 1)


def export_prefill(engine: ChatTTSEngine, path: Path) -> None:
    backbone = engine._chat.gpt.gpt
    module = PrefillStep(backbone).eval()
    tokens, hidden_size, head_dim = 5, int(backbone.config.hidden_size), module.head_dim
    example = (torch.zeros(tokens, hidden_size), torch.ones(tokens, head_dim), torch.zeros(tokens, head_dim),
               torch.zeros(tokens, tokens))  # fmt: skip
    layers = len(backbone.layers)
    columns = [f"{kind}_{index}" for index in range(layers) for kind in ("keys", "values")]
    dynamic = {"hidden": {0: "tokens"}, "cos": {0: "tokens"}, "sin": {0: "tokens"}, "bias": {0: "tokens", 1: "keys"}}
    dynamic |= {name: {1: "tokens"} for name in columns}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(
            module, example, str(path), input_names=["hidden", "cos", "sin", "bias"],
            output_names=["hidden_out", *columns], dynamic_axes=dynamic, opset_version=17, dynamo=False,
        )  # fmt: skip


def waiting_prompt(engine: ChatTTSEngine, prompt: list[int]) -> tuple[CodeBatch, list[Any]]:
    """A batch with ``prompt`` waiting for its prefill and nothing running, and the pass that would prefill it."""
    codes = CodeBatch(engine._chat, Sampling())
    codes.join([request(engine, prompt, 0)])
    return codes, codes._parts()


def torch_prefill(engine: ChatTTSEngine, prompt: list[int]) -> tuple[float, torch.Tensor]:
    """The engine's torch pass over the whole prompt: its seconds and the last hidden state."""
    codes, parts = waiting_prompt(engine, prompt)
    started = time.perf_counter()
    (hidden,) = codes._torch_forward(parts)
    return time.perf_counter() - started, hidden[0]


def graph_prefill(
    engine: ChatTTSEngine, session: ort.InferenceSession, prompt: list[int]
) -> tuple[float, torch.Tensor]:
    """The prefill graph over the same prompt, its inputs made as the engine's pass makes them (not timed)."""
    _, parts = waiting_prompt(engine, prompt)
    ((rows, tokens),) = parts
    hidden = rows.inputs[0, :tokens].to(torch.float32)
    cos, sin = engine._chat.gpt.gpt.rotary_emb(hidden[None], rows.positions[:, :tokens])
    bias = torch.full((tokens, tokens), torch.finfo(torch.float32).min).triu_(1)
    feeds = {"hidden": hidden.numpy(), "cos": cos[0].numpy(), "sin": sin[0].numpy(), "bias": bias.numpy()}
    started = time.perf_counter()
    hidden_out, *_ = session.run(None, feeds)
    return time.perf_counter() - started, torch.from_numpy(np.asarray(hidden_out))[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--assets", required=True, help="a ChatTTS asset directory (full size for real figures)")
    parser.add_argument("--rounds", type=int, default=7, help="timings per decoder and prompt, alternating")
    args = parser.parse_args()
    engine = ChatTTSEngine({"source": "dir", "path": args.assets, "decoder": "torch", "max_batch": 1})
    engine.load()
    longest = prompt_ids(engine, PROMPTS[-1])
    prompts = [prompt_ids(engine, text) for text in PROMPTS]
    prompts += [(longest * (size // len(longest) + 1))[:size] for size in LONG_PROMPTS]
    print(f"torch threads {torch.get_num_threads()}, onnxruntime {ort.__version__}")
    print("| prompt tokens | torch ms | onnxruntime ms | torch / onnxruntime | largest hidden difference |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as directory, torch.inference_mode():
        path = Path(directory) / "prefill.onnx"
        export_prefill(engine, path)
        gc.collect()
        before = psutil.Process().memory_info().rss
        session = open_session(path, torch.get_num_threads())
        gc.collect()
        grown_mb = (psutil.Process().memory_info().rss - before) / 2**20
        for prompt in prompts:
            torch_prefill(engine, prompt), graph_prefill(engine, session, prompt)  # warm-up of both
            ours, theirs = [], []
            for _ in range(args.rounds):
                seconds, reference = torch_prefill(engine, prompt)
                theirs.append(seconds)
                seconds, hidden = graph_prefill(engine, session, prompt)
                ours.append(seconds)
            difference = float((reference.float() - hidden).abs().max())
            torch_ms, graph_ms = 1000 * statistics.median(theirs), 1000 * statistics.median(ours)
            print(f"| {len(prompt)} | {torch_ms:.1f} | {graph_ms:.1f} | {torch_ms / graph_ms:.2f} | {difference:.1e} |")
    print(f"\nthe prefill graph's session: +{grown_mb:.0f} MiB resident (its own copy of the weights)")


if __name__ == "__main__":
    main()
