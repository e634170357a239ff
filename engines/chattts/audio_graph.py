# ruff: noqa: PLC0415 - onnxruntime is imported lazily: the server process never loads it
"""The streaming decode's network (the DVAE decoder and Vocos) through ONNX Runtime, in 8 bits where asked.

Unlike a decode step, turning tokens into audio is bound by arithmetic: each token is two frames through twelve
ConvNeXt blocks of the decoder and eight of Vocos, about 75 MFLOP a frame, 85 % of it in the blocks' products. torch
runs those at about 83 GFLOP/s on one AVX-512 core, near that core's float32 peak, so a faster decode needs fewer
bits per product. In 8 bits the graph's products are ONNX Runtime's ``MatMulNBits`` with int8 compute, as the decode
step's (blocks of :data:`INT8_BLOCK` weights to a scale; each frame's activations quantized per block of its own):
a 64-token window decoded in 61 ms against torch's 137 ms on one thread, its audio 0.19 dB from float32's
(``bench/chattts_stream_decode.py``). ONNX Runtime's dynamic 8-bit products (``MatMulInteger``, one activation scale
per call) were faster still in a trial by hand, but made a chunk's audio depend on where its window was cut (by 1.1 %
of the peak where a chunk waited for another request's first one); per-frame scales keep a seeded request's audio
whatever its chunks and neighbours (``tests/unit/engines``). On a 2-core machine the decode shares the cores with the
decode steps, so what it saves goes to them (BENCHMARKS.md, issue #51). In float32 the graph gives torch's audio
(within 1e-5) at 1.2-1.4x its speed on one thread.

The graph maps hidden states ``(rows, tokens, hidden)`` to the input of Vocos' inverse STFT ``(rows, frames, n_fft +
2)``; the head's magnitude and phase and the inverse STFT stay in torch (ONNX has no inverse STFT). It is exported
from the loaded weights on first use and kept beside them like the decode step's graph (``onnx_step.graph_path``),
named by a key over the decoder's and Vocos' weight files and the exporter's version (and ONNX Runtime's, in 8 bits).
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from engines.chattts.onnx_step import EXPORTER_VERSION, export_module, graph_path, open_session, quantize_graph
from lifecycle import naming

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

__all__ = ["INT8_BLOCK", "AudioGraph", "audio_graph_key", "load_audio_graph"]

logger = naming.logger("chattts")

_STEM = "audio-decoder"
_KEYED_FILES = ("sha256_asset_Decoder_safetensors", "sha256_asset_Vocos_safetensors")
INT8_BLOCK = 256
"""Weights per scale in 8 bits, as the decode step's (``onnx_step``): fewer scales, less work per product."""


class _AudioNetwork(nn.Module):
    """What the graph computes: ChatTTS's ``DVAE.forward`` for a decoder without a quantizer (each token's hidden
    state split into two frames), then Vocos' backbone and the linear layer of its inverse-STFT head."""

    def __init__(self, decoder: Any, vocos: Any) -> None:
        super().__init__()
        self.decoder, self.vocos = decoder, vocos

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        features = hidden.transpose(1, 2)
        rows, channels, tokens = features.shape
        frames = features.reshape(rows, 2, channels // 2, tokens).permute(0, 2, 3, 1).flatten(2)
        mel = self.decoder.out_conv(self.decoder.decoder(x=frames)) * self.decoder.coef
        spectra: torch.Tensor = self.vocos.head.out(self.vocos.backbone(mel))
        return spectra


class AudioGraph:
    """ONNX Runtime sessions over the exported audio network: one on ``threads`` threads, and one on ``wide_threads``
    where given (a session's thread count is fixed when it opens) for the decodes nothing else runs beside."""

    def __init__(self, path: Path, threads: int, *, int8: bool, wide_threads: int | None = None) -> None:
        self.path, self.int8 = path, int8
        self._sessions = {threads: open_session(path, threads)}
        if wide_threads is not None and wide_threads != threads:
            self._sessions[wide_threads] = open_session(path, wide_threads)
        self._session = self._sessions[threads]

    @property
    def thread_counts(self) -> tuple[int, ...]:
        return tuple(self._sessions)

    @property
    def threads(self) -> int:
        """The threads of the session this graph decodes through."""
        count: int = self._session.get_session_options().intra_op_num_threads
        return count

    def on(self, threads: int) -> AudioGraph:
        """This graph through its session of ``threads`` threads (its first where it has none)."""
        view = copy.copy(self)
        view._session = self._sessions.get(threads, self._session)
        return view

    def describe(self) -> str:
        return f"onnxruntime {'int8' if self.int8 else 'float32'}"

    def decode(self, head: Any, hiddens: torch.Tensor) -> torch.Tensor:
        """Float audio ``(rows, samples)`` of ``hiddens`` ``(rows, tokens, hidden)``; ``head``: Vocos' ISTFT head."""
        feed = hiddens.detach().to(torch.float32).contiguous().numpy()
        spectra = torch.from_numpy(self._session.run(None, {"hidden": feed})[0]).transpose(1, 2)
        magnitude, phase = spectra.chunk(2, dim=1)
        magnitude = torch.exp(magnitude).clip(max=1e2)  # as Vocos' head: no excessive magnitudes
        waveform: torch.Tensor = head.istft(magnitude * (torch.cos(phase) + 1j * torch.sin(phase)))
        return waveform


def audio_graph_key(hashes: Mapping[str, str], *, int8: bool) -> str:
    """The cache key of the audio graph built from the weight files of ``hashes`` by this exporter (``int8``: then
    quantized by this ONNX Runtime)."""
    described: dict[str, object] = {
        "files": {name: hashes.get(name, "") for name in _KEYED_FILES},
        "exporter": EXPORTER_VERSION,
        "torch": torch.__version__,
    }
    if int8:
        import onnxruntime

        described |= {"int8": INT8_BLOCK, "onnxruntime": onnxruntime.__version__}
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:24]


def export_audio_graph(chat: Any, path: Path) -> None:
    if getattr(chat.decoder, "vq_layer", None) is not None:
        raise ValueError("this decoder quantizes its input: not the stream decoder's network")
    module = _AudioNetwork(chat.decoder, chat.vocos).eval()
    example = torch.zeros(2, 3, int(chat.config.gpt.hidden_size))
    export_module(module, (example,), path, input_names=["hidden"], output_names=["spectra"],
                  dynamic_axes={"hidden": {0: "rows", 1: "tokens"}, "spectra": {0: "rows", 1: "frames"}})  # fmt: skip


def load_audio_graph(
    chat: Any,
    hashes: Mapping[str, str],
    model_dir: Path,
    cache_dir: Path,
    threads: int,
    *,
    int8: bool,
    wide_threads: int | None = None,
) -> AudioGraph | None:
    """The sessions over the audio graph kept beside the weights (exported, and quantized where ``int8``, when
    missing), or ``None`` with one log line saying why (the decode then stays in torch)."""
    try:
        float32 = graph_path(model_dir, cache_dir, audio_graph_key(hashes, int8=False), _STEM)
        if not int8:
            if not float32.is_file():
                export_audio_graph(chat, float32)
            return AudioGraph(float32, threads, int8=False, wide_threads=wide_threads)
        path = graph_path(model_dir, cache_dir, audio_graph_key(hashes, int8=True), _STEM)
        if not path.is_file():
            if not float32.is_file():
                export_audio_graph(chat, float32)
            quantize_graph(float32, path, INT8_BLOCK)
        return AudioGraph(path, threads, int8=True, wide_threads=wide_threads)
    except Exception as exc:  # any failure of the exporter, the quantizer or ONNX Runtime: torch still decodes
        logger.warning("audio_decoder onnxruntime unavailable, audio decoded in torch: %s: %s", type(exc).__name__, exc)
        return None
