# ruff: noqa: PLC0415 - torch, onnxruntime and the ONNX exporter are imported lazily: the server process never loads them
"""The decode step through ONNX Runtime: the backbone's layers over one new token per row, with the KV cache, and
the audio heads, as one graph.

A decode step on CPU is bound by reading the weights (762.8 MB for the full model, fp32); torch adds time between and
around its products (Python, dispatch, small element-wise ops), up to as long again on some CPUs. ONNX Runtime's CPU
provider runs the same step, exported from the loaded weights, at 1.16x the memory bound at batch 1 (BENCHMARKS.md,
"Decode steps through ONNX Runtime": 1.16x torch's speed there, 1.93x on a CPU where torch's products are slower).

The graph takes each row's new input embedding, the rotary ``cos``/``sin`` at its position, an additive attention
bias over the cache's columns and the new one, and every layer's cached keys and values; it returns the audio heads'
logits, the normed hidden state (the stream decoder's input) and every layer's new key and value column. The caller
appends those to its own KV cache (``engines/chattts/kv_cache.py``): the graph never copies the cache into a bigger
one, and attention reads the cached columns and the new one separately (two products whose scores are joined), so
nothing the size of the cache is written per step. Prefill stays in torch (``CodeBatch``): a prefill graph of its own
was 15-28 ms faster for a segment's prompt and level for long ones, but its session would hold the weights a third
time, and this graph taking several tokens per row made every decode step 1-3 % slower (BENCHMARKS.md, "Prefill
through ONNX Runtime"); a prompt that joins running rows shares their torch pass.

The graph is exported on first use and kept beside the weights (``onnx/`` in the model directory, or in
``cache_dir`` where that is read-only), named by a key over the weight files' sha256 values, the backbone's number
type and the exporter's version: a changed model never runs a stale graph.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F  # noqa: N812 - torch's own name for it
from torch import nn

from lifecycle import naming

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    import numpy as np
    from onnxruntime import InferenceSession

__all__ = [
    "EXPORTER_VERSION",
    "DecodeGraph",
    "DecodeOutputs",
    "export_decode_graph",
    "export_module",
    "graph_key",
    "graph_path",
    "load_decode_graph",
    "open_session",
    "quantize_graph",
    "write_whole",
]

logger = naming.logger("chattts")

EXPORTER_VERSION = 1
"""Bumped whenever the graph's inputs, outputs or computation change: part of the cache key."""
_OPSET = 17
_GRAPH_DIR = "onnx"
_INT8_BLOCK = 256
"""Weights per 8-bit block (one scale each): a step at 1, 4 and 8 rows took 12.0, 15.6 and 23.2 ms against 14.0,
19.6 and 30.4 ms with blocks of 32, its tokens nearly as close to float32's (98.1 % against 98.4-98.6 % argmax
agreement over 512 steps; the audio 0.20 against 0.15 dB away; ``bench/chattts_decoder.py --int8-blocks``)."""
_INT8_ACCURACY_LEVEL = 4
"""``MatMulNBits``' int8 compute: the activations quantized per block too (level 0, float32 compute, took 224 ms a
step for the full model against 12 ms at level 4 and 27 ms in float32)."""
_KEYED_FILES = ("sha256_asset_gpt_model_safetensors", "sha256_asset_gpt_config_json", "sha256_asset_Embed_safetensors")
"""The weight files the graph is built from: the backbone and its config, and the audio heads (in ``Embed``)."""


@dataclass(frozen=True, slots=True)
class DecodeOutputs:
    logits: torch.Tensor
    """``(rows, num_vq * num_audio_tokens)``: every audio head's logits."""
    hidden: torch.Tensor
    """``(rows, hidden)``: the normed last hidden state."""
    columns: list[tuple[torch.Tensor, torch.Tensor]]
    """Per layer, the new ``(keys, values)`` column, each ``(rows, kv_heads, 1, head_dim)``."""


class _DecodeStep(nn.Module):
    """What the graph computes, written for export: plain products on the weights (whatever the layers' own forward
    does on this CPU), the rotary embedding and the mask given as inputs."""

    def __init__(self, backbone: Any, heads: torch.Tensor) -> None:
        super().__init__()
        self.backbone = backbone
        self.heads = nn.Parameter(heads.detach(), requires_grad=False)
        attention = backbone.layers[0].self_attn
        self.head_dim = int(attention.head_dim)
        self.scale = float(attention.scaling)
        self.num_heads = int(backbone.config.num_attention_heads)
        self.num_kv_heads = int(backbone.config.num_key_value_heads)

    def forward(self, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, bias: torch.Tensor,
                *past: torch.Tensor) -> tuple[torch.Tensor, ...]:  # fmt: skip
        cos, sin, bias = cos[:, None, None, :], sin[:, None, None, :], bias[:, None, None, :]
        columns: list[torch.Tensor] = []
        rotary = (cos, sin)
        for index, layer in enumerate(self.backbone.layers):
            hidden, keys, values = self._layer(layer, hidden, rotary, bias, (past[2 * index], past[2 * index + 1]))
            columns += [keys, values]
        hidden = self.backbone.norm(hidden)
        return (F.linear(hidden, self.heads), hidden, *columns)

    def _layer(
        self, layer: Any, hidden: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor], bias: torch.Tensor,
        past: tuple[torch.Tensor, torch.Tensor],
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
        """One layer over one new token per row: ``(hidden, new keys, new values)``."""
        attention = layer.self_attn
        past_keys, past_values = past
        normed = layer.input_layernorm(hidden)
        queries = _rotary(self._heads_of(_linear(attention.q_proj, normed), self.num_heads), *rotary)
        keys = _rotary(self._heads_of(_linear(attention.k_proj, normed), self.num_kv_heads), *rotary)
        values = self._heads_of(_linear(attention.v_proj, normed), self.num_kv_heads)
        # The cached columns and the new one scored apart, then softmaxed together: no copy of the cache.
        scores = torch.cat([queries @ past_keys.transpose(-1, -2), (queries * keys).sum(-1, keepdim=True)], -1)
        weights = torch.softmax(scores * self.scale + bias, dim=-1)
        attended = weights[..., :-1] @ past_values + weights[..., -1:] * values
        hidden = hidden + _linear(attention.o_proj, attended.reshape(-1, self.num_heads * self.head_dim))
        normed = layer.post_attention_layernorm(hidden)
        mlp = layer.mlp
        gated = mlp.act_fn(_linear(mlp.gate_proj, normed)) * _linear(mlp.up_proj, normed)
        return hidden + _linear(mlp.down_proj, gated), keys, values

    def _heads_of(self, states: torch.Tensor, heads: int) -> torch.Tensor:
        """``(rows, heads * head_dim)`` as ``(rows, heads, 1, head_dim)``."""
        return states.reshape(-1, heads, 1, self.head_dim)


def _linear(module: nn.Linear, rows: torch.Tensor) -> torch.Tensor:
    return F.linear(rows, module.weight, module.bias)


def _rotary(states: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """transformers' ``apply_rotary_pos_emb`` for one tensor."""
    half = states.shape[-1] // 2
    return states * cos + torch.cat((-states[..., half:], states[..., :half]), dim=-1) * sin


def graph_key(hashes: Mapping[str, str], dtype: torch.dtype, *, int8: bool = False) -> str:
    """The cache key of the graph built from the weight files of ``hashes`` (their sha256 values, as verified at
    load) in ``dtype``, by this exporter (``int8``: then quantized by this ONNX Runtime)."""
    described: dict[str, object] = {
        "files": {name: hashes.get(name, "") for name in _KEYED_FILES},
        "dtype": str(dtype),
        "exporter": EXPORTER_VERSION,
        "torch": torch.__version__,
        "opset": _OPSET,
    }
    if int8:
        import onnxruntime

        described |= {"int8": _INT8_BLOCK, "onnxruntime": onnxruntime.__version__}
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:24]


def export_decode_graph(chat: Any, heads: torch.Tensor, path: Path) -> None:
    """Export the decode step of ``chat``'s backbone and ``heads`` (the stacked audio heads) to ``path``, written
    whole or not at all (a temporary file renamed into place: workers starting together may export at once)."""
    backbone = chat.gpt.gpt
    module = _DecodeStep(backbone, heads.to(backbone.dtype)).eval()
    layers = len(backbone.layers)
    kv_heads, head_dim = module.num_kv_heads, module.head_dim
    rows, cached = 2, 3
    dtype = backbone.dtype
    example = (
        torch.zeros(rows, int(backbone.config.hidden_size), dtype=dtype),
        torch.ones(rows, head_dim, dtype=dtype), torch.zeros(rows, head_dim, dtype=dtype),
        torch.zeros(rows, cached + 1, dtype=dtype),
        *(torch.zeros(rows, kv_heads, cached, head_dim, dtype=dtype) for _ in range(2 * layers)),
    )  # fmt: skip
    past = [f"past_{kind}_{index}" for index in range(layers) for kind in ("keys", "values")]
    new = [f"new_{kind}_{index}" for index in range(layers) for kind in ("keys", "values")]
    dynamic = {name: {0: "rows"} for name in ("hidden", "cos", "sin", "logits", "hidden_out", *new)}
    dynamic |= {"bias": {0: "rows", 1: "keys"}} | {name: {0: "rows", 2: "cached"} for name in past}
    export_module(module, example, path, input_names=["hidden", "cos", "sin", "bias", *past],
                  output_names=["logits", "hidden_out", *new], dynamic_axes=dynamic)  # fmt: skip


def export_module(module: nn.Module, example: tuple[torch.Tensor, ...], path: Path, **names: Any) -> None:
    """Export ``module`` (traced on ``example``) to ``path`` with TorchScript's exporter, whole or not at all;
    ``names``: the exporter's ``input_names``, ``output_names`` and ``dynamic_axes``."""

    def export(temporary: str) -> None:
        with torch.no_grad(), warnings.catch_warnings():
            # The TorchScript exporter (deprecated since torch 2.9 in favour of torch.export's, which needs onnxscript
            # and traced this loop of layers no better) says so on every call.
            warnings.simplefilter("ignore", DeprecationWarning)
            torch.onnx.export(module, example, temporary, opset_version=_OPSET, dynamo=False, **names)

    write_whole(path, export)


def write_whole(path: Path, write: Callable[[str], None]) -> None:
    """``write`` a file to a temporary name beside ``path``, then rename it into place: workers starting together may
    build the same graph at once, and none must read a half-written one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".part")
    os.close(handle)
    try:
        write(temporary)
        Path(temporary).chmod(0o644)  # mkstemp's 0600 would hide it from workers running as another user
        Path(temporary).replace(path)
    finally:
        Path(temporary).unlink(missing_ok=True)


class DecodeGraph:
    """An ONNX Runtime session over the exported decode step."""

    def __init__(self, path: Path, threads: int) -> None:
        self.path = path
        self._session = open_session(path, threads)

    def step(self, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, bias: torch.Tensor,
             cache: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> DecodeOutputs:  # fmt: skip
        """One step for ``hidden`` ``(rows, hidden)`` at the rotary ``cos``/``sin`` ``(rows, head_dim)``, attending
        with the additive ``bias`` ``(rows, cached + 1)`` over ``cache`` (per layer, ``(keys, values)`` each
        ``(rows, kv_heads, cached, head_dim)``) and the new column."""
        feeds: dict[str, np.ndarray] = {
            "hidden": _array(hidden), "cos": _array(cos), "sin": _array(sin), "bias": _array(bias),
        }  # fmt: skip
        for index, (keys, values) in enumerate(cache):
            feeds[f"past_keys_{index}"], feeds[f"past_values_{index}"] = _array(keys), _array(values)
        logits, hidden_out, *new = (torch.from_numpy(array) for array in self._session.run(None, feeds))
        return DecodeOutputs(logits, hidden_out, list(zip(new[::2], new[1::2], strict=True)))


def open_session(path: Path, threads: int) -> InferenceSession:
    """An ONNX Runtime session over the graph at ``path`` on ``threads`` threads, as the engine runs its graphs."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # Between steps the process samples and decodes audio in torch: ORT's threads must not spin meanwhile.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _array(tensor: torch.Tensor) -> np.ndarray:
    array: np.ndarray = tensor.detach().contiguous().numpy()
    return array


def graph_path(model_dir: Path, fallback_dir: Path, key: str, stem: str = "decode-step") -> Path:
    """Where the graph of ``key`` is kept (``stem``: which graph, e.g. the audio decoder's): beside the weights, or
    under ``fallback_dir`` where they are read-only."""
    for directory in (model_dir / _GRAPH_DIR, fallback_dir / _GRAPH_DIR):
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(directory, os.W_OK) or (directory / f"{stem}-{key}.onnx").is_file():
            return directory / f"{stem}-{key}.onnx"
    raise OSError(f"neither {model_dir} nor {fallback_dir} can hold the {stem} graph")


def quantize_graph(source: Path, target: Path, block: int = _INT8_BLOCK) -> None:
    """Write ``source``'s graph to ``target`` with its weight products in 8 bits, ``block`` weights to a scale (whole
    or not at all)."""
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    quantizer = MatMulNBitsQuantizer(
        onnx.load(str(source)), bits=8, block_size=block, is_symmetric=True, accuracy_level=_INT8_ACCURACY_LEVEL
    )
    quantizer.process()
    write_whole(target, lambda temporary: onnx.save(quantizer.model.model, temporary))


def load_decode_graph(
    chat: Any, heads: torch.Tensor, path: Path, threads: int, int8_path: Path | None = None
) -> DecodeGraph | None:
    """The session over the graph at ``path`` (or its 8-bit version at ``int8_path``), exported (and quantized) first
    when missing; ``None`` (with one log line saying why: the engine then steps in torch) when the backbone is not
    float32 or export or session fails."""
    dtype = chat.gpt.gpt.dtype
    if dtype != torch.float32:
        logger.warning("decoder onnxruntime runs float32 backbones only (this one is %s): decode steps stay in torch",
                       str(dtype).removeprefix("torch."))  # fmt: skip
        return None
    try:
        if not path.is_file() and (int8_path is None or not int8_path.is_file()):
            export_decode_graph(chat, heads, path)
        if int8_path is None:
            return DecodeGraph(path, threads)
        if not int8_path.is_file():
            quantize_graph(path, int8_path)
        return DecodeGraph(int8_path, threads)
    except Exception as exc:  # any failure of the exporter or ONNX Runtime: torch still serves
        logger.warning("decoder onnxruntime unavailable, decode steps stay in torch: %s: %s", type(exc).__name__, exc)
        return None
