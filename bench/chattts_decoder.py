"""The decode step on each decoder (``torch``, ``onnxruntime``), per batch size, against the machine's memory bound.

    .venv/bin/python -m bench.chattts_decoder --assets /tmp/chattts-full    # about 3 minutes on 2 cores

Loads the engine once with ``decoder: onnxruntime`` (the graph exported on first use, then cached beside the
assets); the torch step is the same engine's token loop without the graph, on the same weights. For each batch size,
``--steps`` decode steps of a running batch are timed per decoder, the two alternating over ``--rounds`` rounds so
that the machine's drift falls on both alike; the medians are printed with the weights' bytes per step over the step
time (GB/s) beside the machine's copy rate measured in the same run (bytes per second that a large ``copy_`` reads),
the memory bound (bytes per step over the copy rate), and, over ``--compare-steps`` steps of two batches started
alike (the graph's and torch's), the largest logits difference and the share of (row, codebook) argmax tokens that
agree. With ``--int8``, the same for the 8-bit graph (``weights: int8``) against the float32 graph: its step, and the
share of (row, codebook) argmax tokens that agree over ``--int8-steps`` steps in which both graphs see the same inputs
(the float32 graph's outputs drive the batch), and the log spectral distance between the first row's audio decoded
(DVAE decoder and Vocos) from each graph's hidden states of those steps: a proxy only, as random weights make noise
that no one can judge by ear.
"""

from __future__ import annotations

import argparse
import statistics
import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch

from bench.chattts_join import PROMPTS, prompt_ids, request
from engines.chattts import onnx_step
from engines.chattts.engine import ChatTTSEngine
from engines.chattts.generation import CodeBatch, Sampling
from engines.chattts.loader import verify_directory
from engines.chattts.onnx_step import DecodeGraph, DecodeOutputs, graph_key, graph_path, load_decode_graph
from engines.chattts.streaming import decode_hiddens

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    import numpy as np

__all__ = ["main"]

_COPY_BYTES = 512 * 2**20


def copy_rate() -> float:
    """Bytes per second that copying a buffer far larger than the CPU's caches reads (best of 5)."""
    source = torch.ones(_COPY_BYTES // 4)
    target = torch.empty_like(source)
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        target.copy_(source)
        best = min(best, time.perf_counter() - started)
    return _COPY_BYTES / best


def weight_bytes(engine: ChatTTSEngine) -> int:
    """What a decode step reads: every weight of the backbone's layers and final norm, and the audio heads."""
    backbone = engine._chat.gpt.gpt
    layers = sum(p.numel() * p.element_size() for p in backbone.layers.parameters())
    norm = sum(p.numel() * p.element_size() for p in backbone.norm.parameters())
    heads = CodeBatch(engine._chat, Sampling())._heads
    return int(layers + norm + heads.numel() * heads.element_size())


def running(engine: ChatTTSEngine, prompt: list[int], rows: int, graph: Any) -> CodeBatch:
    """``rows`` sequences past their prefill and a few steps (the steps that allocate)."""
    codes = CodeBatch(engine._chat, Sampling(), graph=graph)
    codes.join([request(engine, prompt, row) for row in range(rows)])
    for _ in range(3):
        codes.step()
    return codes


def step_ms(engine: ChatTTSEngine, prompt: list[int], rows: int, steps: int, graph: Any) -> float:
    codes = running(engine, prompt, rows, graph)
    started = time.perf_counter()
    for _ in range(steps):
        codes.step()
    return (time.perf_counter() - started) / steps * 1000


def logits_of(engine: ChatTTSEngine, prompt: list[int], rows: int, steps: int, graph: Any) -> list[torch.Tensor]:
    """Every step's logits of a batch of ``rows`` after its prefills (each decoder samples its own tokens: where
    they differ, so do the later steps, which the argmax share then shows). The prompts are prefilled over the first
    steps (the first alone, then the others beside its steps), in torch on both."""
    codes = CodeBatch(engine._chat, Sampling(), graph=graph)
    found: list[torch.Tensor] = []
    sample = codes._sample

    def recording(hidden: torch.Tensor, batch_rows: Any, logits: torch.Tensor | None = None) -> torch.Tensor:
        found.append(torch.nn.functional.linear(hidden, codes._heads) if logits is None else logits.clone())
        return sample(hidden, batch_rows, logits)

    codes._sample = recording  # type: ignore[method-assign,assignment]
    codes.join([request(engine, prompt, row) for row in range(rows)])
    for _ in range(steps + 2):
        codes.step()
    return found[2:]  # the first two steps held the prefills, torch's on both


def compare(engine: ChatTTSEngine, prompt: list[int], rows: int, steps: int) -> tuple[float, float]:
    """The largest logits difference between the graph and torch, and the share of argmax tokens that agree."""
    with torch.inference_mode():
        theirs = logits_of(engine, prompt, rows, steps, None)
        ours = logits_of(engine, prompt, rows, steps, engine._graph)
    num_vq, vocabulary = engine._chat.config.gpt.num_vq, engine._chat.config.gpt.num_audio_tokens
    largest, agree, total = 0.0, 0, 0
    for reference, graph in zip(theirs, ours, strict=True):
        largest = max(largest, float((reference - graph).abs().max()))
        same = reference.view(-1, num_vq, vocabulary).argmax(-1) == graph.view(-1, num_vq, vocabulary).argmax(-1)
        agree, total = agree + int(same.sum()), total + same.numel()
    return largest, agree / total


class ShadowedGraph:
    """The float32 graph, with the 8-bit one run on the same inputs each step; their logits and their first row's
    hidden states are kept in pairs."""

    def __init__(self, main: DecodeGraph, shadow: DecodeGraph) -> None:
        self.main, self.shadow = main, shadow
        self.pairs: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.hiddens: list[tuple[torch.Tensor, torch.Tensor]] = []

    def step(self, *inputs: Any) -> DecodeOutputs:
        outputs, shadowed = self.main.step(*inputs), self.shadow.step(*inputs)
        self.pairs.append((outputs.logits, shadowed.logits))
        self.hiddens.append((outputs.hidden[0], shadowed.hidden[0]))
        return outputs


def log_spectral_distance(reference: np.ndarray, other: np.ndarray) -> float:
    """The root mean square difference of two signals' log magnitude spectra (1024-point frames, hop 256), in dB,
    averaged over frames: 0 for the same audio."""
    window = torch.hann_window(1024)
    spectra = [torch.stft(torch.from_numpy(audio), 1024, 256, window=window, return_complex=True).abs()
               for audio in (reference, other)]  # fmt: skip
    decibels = [20 * torch.log10(spectrum.clamp(min=1e-5)) for spectrum in spectra]
    return float((decibels[0] - decibels[1]).pow(2).mean(0).sqrt().mean())


def int8_graph(engine: ChatTTSEngine, assets: str, threads: int) -> DecodeGraph:
    """The engine's graph quantized to 8 bits (made beside the float32 one on first use)."""
    location, dtype = verify_directory(Path(assets)), engine._chat.gpt.gpt.dtype
    cache = Path(engine.options.cache_dir).expanduser()
    path = graph_path(location.path, cache, graph_key(location.hashes, dtype))
    int8_path = graph_path(location.path, cache, graph_key(location.hashes, dtype, int8=True))
    graph = load_decode_graph(engine._chat, CodeBatch(engine._chat, Sampling())._heads, path, threads, int8_path)
    if graph is None:
        raise SystemExit("the 8-bit graph could not be built here (see the log)")
    return graph


def int8_agreement(
    engine: ChatTTSEngine, prompt: list[int], rows: int, steps: int, int8: DecodeGraph
) -> tuple[float, float]:
    """The share of (row, codebook) argmax tokens of the 8-bit graph equal to the float32 graph's, same inputs; and
    the log spectral distance (dB) of the first row's audio decoded from each graph's hidden states of those tokens
    (the float32 graph's tokens drive both)."""
    assert engine._graph is not None
    shadowed = ShadowedGraph(engine._graph, int8)
    codes = CodeBatch(engine._chat, Sampling(), graph=cast("DecodeGraph", shadowed))
    codes.join([request(engine, prompt, row) for row in range(rows)])
    with torch.inference_mode():
        for _ in range(steps + 2):
            codes.step()
    num_vq, vocabulary = engine._chat.config.gpt.num_vq, engine._chat.config.gpt.num_audio_tokens
    same = [(a.view(-1, num_vq, vocabulary).argmax(-1) == b.view(-1, num_vq, vocabulary).argmax(-1))
            for a, b in shadowed.pairs]  # fmt: skip
    audio = [decode_hiddens(engine._chat, torch.stack(side)) for side in zip(*shadowed.hiddens, strict=True)]
    return float(sum(int(s.sum()) for s in same)) / sum(s.numel() for s in same), log_spectral_distance(*audio)


def print_int8(engine: ChatTTSEngine, prompt: list[int], args: argparse.Namespace, weights: int) -> None:
    int8 = int8_graph(engine, args.assets, args.threads)
    print(f"\n8-bit weights (MatMulNBits): argmax agreement with float32 over {args.int8_steps} steps, same inputs;"
          " log spectral distance of the first row's audio decoded from each graph's hidden states")  # fmt: skip
    print("| batch | float32 graph (ms) | int8 graph (ms) | speed-up | int8 GB/s of float32 bytes | argmax agree "
          "| spectral distance (dB) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for rows in (int(size) for size in args.batches.split(",")):
        measures = {name: partial(step_ms, engine, prompt, rows, args.steps, graph)
                    for name, graph in (("float32", engine._graph), ("int8", int8))}  # fmt: skip
        step = alternating(measures, args.rounds)
        agree, distance = int8_agreement(engine, prompt, rows, args.int8_steps, int8)
        print(f"| {rows} | {step['float32']:.1f} | {step['int8']:.1f} | {step['float32'] / step['int8']:.2f}x | "
              f"{weights / step['int8'] / 1e6:.1f} | {agree:.1%} | {distance:.2f} |")  # fmt: skip


def block_graph(engine: ChatTTSEngine, assets: str, threads: int, block: int) -> DecodeGraph:
    """The engine's graph quantized to 8 bits in blocks of ``block`` weights (made beside the float32 one, once)."""
    location, dtype = verify_directory(Path(assets)), engine._chat.gpt.gpt.dtype
    cache = Path(engine.options.cache_dir).expanduser()
    source = graph_path(location.path, cache, graph_key(location.hashes, dtype))
    key = graph_key(location.hashes, dtype, int8=True)
    path = graph_path(location.path, cache, f"{key}-block{block}")
    if not path.is_file():
        onnx_step.quantize_graph(source, path, block)
    return DecodeGraph(path, threads)


def print_blocks(engine: ChatTTSEngine, prompt: list[int], args: argparse.Namespace) -> None:
    """The 8-bit step with each of ``--int8-blocks`` weights to a scale, alternating; tokens and audio as above."""
    graphs = {block: block_graph(engine, args.assets, args.threads, block) for block in args.int8_blocks}
    print(f"\n8-bit blocks: step ms (alternating), argmax agreement with float32 over {args.int8_steps} steps and the "
          "log spectral distance (dB) of the audio, per block size")  # fmt: skip
    print("| batch | " + " | ".join(f"block {block}: step ms, agree, dB" for block in graphs) + " |")
    print("|---|" + "---|" * len(graphs))
    for rows in (int(size) for size in args.batches.split(",")):
        measures = {block: partial(step_ms, engine, prompt, rows, args.steps, graph) for block, graph in graphs.items()}
        step = alternating(measures, args.rounds)
        cells = []
        for block, graph in graphs.items():
            agree, distance = int8_agreement(engine, prompt, rows, args.int8_steps, graph)
            cells.append(f"{step[block]:.1f}, {agree:.1%}, {distance:.2f}")
        print(f"| {rows} | " + " | ".join(cells) + " |", flush=True)


def alternating(measures: Mapping[Any, Callable[[], float]], rounds: int) -> dict[Any, float]:
    """The median of each measure, taken in turns over ``rounds`` rounds after one unrecorded round."""
    samples: dict[Any, list[float]] = {name: [] for name in measures}
    for index in range(rounds + 1):
        for name, measure in measures.items():
            value = measure()
            if index:
                samples[name].append(value)
    return {name: statistics.median(values) for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--assets", required=True, help="a ChatTTS directory (chattts-gateway assets generate ...)")
    parser.add_argument("--batches", default="1,2,4,8,16", help="batch sizes")
    parser.add_argument("--steps", type=int, default=10, help="decode steps timed per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--compare-steps", type=int, default=32, help="steps whose logits are compared")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--int8", action="store_true", help="also the 8-bit graph (weights: int8)")
    parser.add_argument("--int8-steps", type=int, default=512, help="steps whose int8 argmax tokens are compared")
    parser.add_argument("--int8-blocks", type=lambda s: [int(x) for x in s.split(",")], default=[],
                        help="8-bit block sizes to compare, e.g. 32,256 (then no other table)")  # fmt: skip
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    engine = ChatTTSEngine({"source": "dir", "path": args.assets, "device": "cpu", "threads": args.threads,
                            "decoder": "onnxruntime", "weights": "float32", "max_batch": 1})  # fmt: skip
    engine.load()
    if engine._graph is None:
        raise SystemExit("the decode graph could not be built here (see the log): nothing to compare")
    prompt = prompt_ids(engine, PROMPTS[1])
    if args.int8_blocks:
        print_blocks(engine, prompt, args)
        return
    weights, rate = weight_bytes(engine), copy_rate()
    bound_ms = weights / rate * 1000
    print(f"weights read per step {weights / 1e6:.1f} MB; copy rate {rate / 1e9:.1f} GB/s; memory bound "
          f"{bound_ms:.1f} ms per step; medians of {args.rounds} alternating rounds of {args.steps} steps; "
          f"prompts of {len(prompt)} tokens; {args.threads} threads")  # fmt: skip
    print("| batch | torch (ms) | onnxruntime (ms) | speed-up | torch GB/s | onnxruntime GB/s | onnxruntime / bound "
          "| max logits diff | argmax agree |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for rows in (int(size) for size in args.batches.split(",")):
        measures = {name: partial(step_ms, engine, prompt, rows, args.steps, graph)
                    for name, graph in (("torch", None), ("onnxruntime", engine._graph))}  # fmt: skip
        step = alternating(measures, args.rounds)
        largest, agree = compare(engine, prompt, rows, args.compare_steps)
        torch_ms, graph_ms = step["torch"], step["onnxruntime"]
        print(f"| {rows} | {torch_ms:.1f} | {graph_ms:.1f} | {torch_ms / graph_ms:.2f}x | "
              f"{weights / torch_ms / 1e6:.1f} | {weights / graph_ms / 1e6:.1f} | {graph_ms / bound_ms:.2f}x | "
              f"{largest:.1e} | {agree:.1%} |")  # fmt: skip
    if args.int8:
        print_int8(engine, prompt, args, weights)


if __name__ == "__main__":
    main()
