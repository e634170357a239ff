# ruff: noqa: PLC0415 - torch and ONNX Runtime are imported lazily: the server process never loads them
"""Where each part of ChatTTS runs: the device and number type, the decode step (torch or ONNX Runtime's graph, in
float32 or 8 bits) and the streaming decode (torch or its own graph), as the options ask and the machine allows."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from engines.base import EngineUnavailableError
from engines.chattts.weights import WeightsChoice, choose_weights
from lifecycle import naming

if TYPE_CHECKING:
    import torch

    from engines.chattts.audio_graph import AudioGraph
    from engines.chattts.loader import WeightsLocation
    from engines.chattts.onnx_step import DecodeGraph
    from engines.chattts.options import ChatTTSOptions

__all__ = ["alone_decode_threads", "choose_device", "choose_dtype", "step_graph", "stream_decode_graph"]

logger = naming.logger("chattts")


def choose_device(options: ChatTTSOptions, torch_module: Any) -> torch.device:
    wanted = options.device
    if wanted == "cuda" and not torch_module.cuda.is_available():
        raise EngineUnavailableError("device 'cuda' was asked for but torch sees no CUDA device")
    if wanted == "auto":
        wanted = "cuda" if torch_module.cuda.is_available() else "cpu"
    device: torch.device = torch_module.device(wanted)
    return device


def choose_dtype(options: ChatTTSOptions, torch_module: Any, device: torch.device) -> torch.dtype:
    wanted = options.dtype
    if wanted == "auto":
        wanted = "float16" if device.type == "cuda" else "float32"
    if device.type == "cpu" and wanted == "float16":
        logger.warning(
            "dtype float16 on CPU: torch has no fast path for it there (use float32, or bfloat16 "
            "where the CPU supports it)"
        )
    if device.type == "cpu" and wanted == "bfloat16" and not torch_module.ops.mkldnn._is_mkldnn_bf16_supported():
        logger.warning("dtype bfloat16 on a CPU without bfloat16 support in torch: expect it slower than float32")
    dtype: torch.dtype = getattr(torch_module, wanted)
    return dtype


def step_graph(
    chat: Any, options: ChatTTSOptions, location: WeightsLocation, device: torch.device
) -> tuple[DecodeGraph, WeightsChoice] | None:
    """The decode graph and its weights where ``decoder`` asks for it (``auto``: on CPU with a float32 backbone),
    else ``None`` (torch steps)."""
    import torch

    wanted = options.decoder
    on_cpu_in_float32 = device.type == "cpu" and chat.gpt.gpt.dtype == torch.float32
    if wanted == "torch" or (wanted == "auto" and not on_cpu_in_float32):
        return None
    from engines.chattts.generation import stacked_audio_heads
    from engines.chattts.onnx_step import graph_key, graph_path, load_decode_graph

    if device.type != "cpu":
        logger.warning("decoder onnxruntime runs on CPU only here (the device is %s): decode steps stay in torch",
                       device)  # fmt: skip
        return None
    dtype, cache_dir = chat.gpt.gpt.dtype, Path(options.cache_dir).expanduser()
    try:
        path = graph_path(location.path, cache_dir, graph_key(location.hashes, dtype))
        int8_path, choice = None, choose_weights(options.weights, onnxruntime_on_cpu=True)
        if choice.weights == "int8":
            int8_path = graph_path(location.path, cache_dir, graph_key(location.hashes, dtype, int8=True))
    except (OSError, ImportError) as exc:
        logger.warning("decoder onnxruntime unavailable, decode steps stay in torch: %s", exc)
        return None
    graph = load_decode_graph(chat, stacked_audio_heads(chat), path, torch.get_num_threads(), int8_path)
    if graph is None:
        return None
    logger.info("decode steps through ONNX Runtime (%s), weights %s", graph.path, choice.describe())
    return graph, choice


def stream_decode_graph(
    chat: Any, options: ChatTTSOptions, location: WeightsLocation, device: torch.device, steps: WeightsChoice | None
) -> AudioGraph | None:
    """The streaming decode's graph where ``audio_decoder`` asks for it (``auto``: beside ONNX Runtime's steps, whose
    weights are ``steps``; ``None``: the steps run in torch), in 8 bits as ``audio_weights`` says (``auto``: as the
    steps); ``None``: the decode runs in torch."""
    wanted = options.audio_decoder
    if wanted == "torch" or (wanted == "auto" and steps is None):
        return None
    if device.type != "cpu":
        logger.warning("audio_decoder onnxruntime runs on CPU only here (the device is %s): audio decoded in torch",
                       device)  # fmt: skip
        return None
    import torch

    from engines.chattts.audio_graph import load_audio_graph

    weights = options.audio_weights
    int8 = weights == "int8" or (weights == "auto" and steps is not None and steps.weights == "int8")
    threads = options.stream_decode_threads or torch.get_num_threads()
    cache_dir = Path(options.cache_dir).expanduser()
    return load_audio_graph(chat, location.hashes, location.path, cache_dir, threads, int8=int8,
                            wide_threads=alone_decode_threads(options))  # fmt: skip


def alone_decode_threads(options: ChatTTSOptions) -> int:
    """The threads of a decode no step runs beside (``stream_decode_threads_alone``; default: torch's)."""
    import torch

    return options.stream_decode_threads_alone or torch.get_num_threads()
