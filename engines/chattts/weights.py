"""``weights: auto``: the decode graph's weights in 8 bits where ONNX Runtime multiplies them fast, float32 elsewhere.

A decode step on CPU is bound by reading the weights (762.8 MB for the full model in float32). ONNX Runtime's 8-bit
graph (``MatMulNBits`` with int8 compute) reads a quarter of the bytes: its step took 12 against 27 ms on an AVX-512
VNNI CPU and 18.8 against 35.3 ms on an AVX2 one (issue #51), and one stream crossed playback speed on 2 cores
(BENCHMARKS.md). Those products run in MLAS kernels that ONNX Runtime selects at start from the CPU's instructions:
on x86-64, AVX2 with FMA (``MlasSQNBitGemmDispatchAvx2``; AVX-VNNI and AVX-512 VNNI pick faster variants of it), on
ARM64 the NEON dot product (``asimddp``). Without them ``MatMulNBits`` unpacks each weight matrix to float32 at every
call and multiplies that (``ComputeBUnpacked``): more bytes moved than the float32 graph reads, so slower than it
(not measured: no such CPU here); there ``auto`` keeps float32. On CUDA, and wherever the steps run in torch, there is
no 8-bit graph: float32. Quality: int8's tokens agreed with float32's on 98.1 % of 512 steps and the decoded audio
was 0.20 dB apart (log spectral distance), on random weights that cannot be judged by ear (docs/engines.md).
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from pathlib import Path

__all__ = ["WeightsChoice", "choose_weights", "cpu_flags", "int8_instructions"]

_CPUINFO = Path("/proc/cpuinfo")
_X86_NEEDED = ("avx2", "fma")
_X86_BETTER = ("avx512_vnni", "avx_vnni")
_ARM_NEEDED = ("asimddp",)


@dataclass(frozen=True, slots=True)
class WeightsChoice:
    """The decode graph's weights, and (for ``auto``) why."""

    weights: str
    reason: str | None = None
    """Set where ``auto`` chose: shown in the engine's details (``/readyz``)."""

    def describe(self) -> str:
        return self.weights if self.reason is None else f"{self.weights} (auto; {self.reason})"


def cpu_flags(cpuinfo: str | None = None) -> frozenset[str] | None:
    """The instruction flags of the CPU (Linux's ``flags``, ARM's ``Features``) in ``cpuinfo`` (the text of
    ``/proc/cpuinfo``, read here when not given), or ``None`` where they cannot be read (not Linux)."""
    if cpuinfo is None:
        try:
            cpuinfo = _CPUINFO.read_text(errors="replace")
        except OSError:
            return None
    for line in cpuinfo.splitlines():
        name, _, value = line.partition(":")
        if name.strip() in {"flags", "Features"}:
            return frozenset(value.split())
    return frozenset()


def int8_instructions(cpuinfo: str | None = None, machine: str | None = None) -> str | None:
    """The CPU's instructions ONNX Runtime's 8-bit products run on (e.g. ``avx2, fma, avx512_vnni``), or ``None``
    where it has none of them (or they cannot be read: not Linux)."""
    flags = cpu_flags(cpuinfo)
    if flags is None:
        return None
    machine = (machine or platform.machine()).lower()
    needed = _ARM_NEEDED if machine in {"aarch64", "arm64"} else _X86_NEEDED
    if not all(flag in flags for flag in needed):
        return None
    return ", ".join([*needed, *(flag for flag in _X86_BETTER if flag in flags and needed == _X86_NEEDED)])


def choose_weights(wanted: str, *, onnxruntime_on_cpu: bool, instructions: str | None = None) -> WeightsChoice:
    """Settle ``weights`` (``wanted``) for a worker whose decode steps run through ONNX Runtime on CPU or not.
    ``instructions``: what :func:`int8_instructions` found (read here when not given and needed)."""
    if wanted != "auto":
        return WeightsChoice(wanted if onnxruntime_on_cpu else "float32")
    if not onnxruntime_on_cpu:
        return WeightsChoice("float32", "the decode steps run in torch")
    found = instructions if instructions is not None else int8_instructions()
    if not found:
        return WeightsChoice("float32", "this CPU lacks the instructions ONNX Runtime's 8-bit products need")
    return WeightsChoice("int8", f"onnxruntime on a CPU with {found}")
