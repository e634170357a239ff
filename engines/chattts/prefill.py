"""Prefill products in fewer bits, where the decode steps already run on 8-bit weights (``weights: int8``).

A prompt's prefill multiplies every prompt position by every weight matrix of the backbone (about 0.38 GFLOP a
position at full size): unlike a decode step, it is bound by arithmetic, not by reading the weights. In float32 it
was the largest cost of a stream's first audio left outside the 8-bit decode step, and what makes a voice from a
sample slower to start than a built-in one (the sample's audio codes follow the text in the prompt: they are
prefilled with every sentence). Two ways do the same products faster on CPUs with the instructions for them:

- ``int8``: torch's dynamic 8-bit product (``quantized::linear_dynamic``, FBGEMM; VNNI where the CPU has it, AVX2's
  byte products elsewhere): the weights in 8 bits, one scale per output channel; a quarter of float32's memory for
  the copy. FBGEMM quantizes a call's activations with one scale for all its rows, which would make a row's result
  depend on the rows beside it (a seeded request's tokens on who joins its batch); so each row is first divided by
  its own peak and every call carries one more row spanning exactly -1 to 1: the call's scale is then the same for
  every pass, and each row is quantized as if alone, in steps of 2/127 of its own peak.
- ``bfloat16``: oneDNN's product on a bfloat16 copy of the weights in its blocked layout (``avx512_bf16`` or AMX);
  half of float32's memory.

Which one is the ``prefill_weights`` option (docs/engines.md); ``auto``, with the decode steps in 8 bits, takes
bfloat16 where the CPU has bfloat16 arithmetic (``avx512_bf16`` or ``amx_bf16``; its state stays about ten times
closer to float32's than int8's), else int8 where it has AVX2 (FBGEMM's kernels: 1.3-2.0x float32 with torch's
libraries held to AVX2; no AVX2-only CPU was at hand), float32 elsewhere. It was first timed at load, as
``engines/chattts/small_batch.py`` times the decode products, but on a busy 2-core machine that timing chose float32
where the benchmark, alternating over many rounds, measured bfloat16 1.4-2.2x faster: the CPU's flags decide, as they
do for the ``dtype`` option's advice. The layers then compute every pass of more than
:data:`~engines.chattts.small_batch.MAX_ROWS` positions that way: prompts (the decode graph steps the running rows
of a pass beside them: ``generation.py``; with torch's steps, those rows too); fewer rows, and the float32 weights
themselves, are unchanged (text refinement and a torch fallback still use them). The results differ from float32's
by rounding: BENCHMARKS.md, "Prefill in fewer bits".
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import torch
from torch import nn

from engines.chattts.small_batch import MAX_ROWS, SmallBatchLinear
from engines.chattts.weights import cpu_flags
from lifecycle import naming

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "PREFILL_ROWS", "PrefillLinear", "PrefillWay", "bfloat16_arithmetic", "bfloat16_product", "int8_arithmetic",
    "int8_product", "use_fast_prefill",
]  # fmt: skip

logger = naming.logger("engine")

_CPUINFO = Path("/proc/cpuinfo")
PrefillWay = Literal["float32", "int8", "bfloat16"]
PREFILL_ROWS = 64
"""The rows oneDNN's blocked bfloat16 layout is made for: a sentence's prompt."""
_SMALLEST_PEAK = 1e-30
"""A row of zeros is divided by this instead (it stays zeros)."""


class PrefillLinear(SmallBatchLinear):
    """A backbone ``nn.Linear`` whose passes of more than ``MAX_ROWS`` rows go through ``prefill`` (a product on
    its own copy of the weight); fewer rows compute as :class:`SmallBatchLinear` does."""

    prefill: Callable[[torch.Tensor], torch.Tensor] | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // self.in_features
        if self.prefill is None or rows <= MAX_ROWS:
            return super().forward(x)
        out = self.prefill(x.reshape(rows, self.in_features))
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*x.shape[:-1], self.out_features)


def int8_product(weight: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    """``rows @ weight.T`` by torch's dynamic 8-bit product: ``weight`` quantized symmetrically per output channel,
    each row of ``rows`` at its own scale (see the module's docstring)."""
    weight = weight.detach().float()
    scales = (weight.abs().amax(1) / 127).clamp(min=1e-12).double()
    with warnings.catch_warnings():
        # torch 2.10+ says quantized tensors are deprecated; the dynamic product has no replacement on CPU yet.
        warnings.simplefilter("ignore", UserWarning)
        quantized = torch.quantize_per_channel(
            weight, scales, torch.zeros(len(weight), dtype=torch.long), 0, torch.qint8
        )
        packed = torch.ops.quantized.linear_prepack(quantized, None)
    span = torch.zeros(weight.size(1))
    span[:2] = torch.tensor([1.0, -1.0])  # the call's activation range, whatever its rows: exactly [-1, 1]

    def product(rows: torch.Tensor) -> torch.Tensor:
        rows = rows.float()
        peaks = rows.abs().amax(1, keepdim=True).clamp_(min=_SMALLEST_PEAK)
        unit = rows.new_empty(len(rows) + 1, rows.size(1))
        torch.div(rows, peaks, out=unit[:-1])  # each row's largest value becomes exactly 1 or -1
        unit[-1] = span
        # reduce_range: 7-bit activations, so that FBGEMM's 8-bit products cannot saturate on CPUs without VNNI.
        out: torch.Tensor = torch.ops.quantized.linear_dynamic(unit, packed, True)
        return out[:-1].mul_(peaks)

    return product


def bfloat16_product(weight: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    """``rows @ weight.T`` by oneDNN on a bfloat16 copy of ``weight`` in its blocked layout; the result float32."""
    blocked = torch.ops.mkldnn._reorder_linear_weight(weight.detach().to(torch.bfloat16), PREFILL_ROWS)

    def product(rows: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = torch.ops.mkldnn._linear_pointwise(
            rows.to(torch.bfloat16).contiguous(), blocked, None, "none", [], ""
        )
        return out.float()

    return product


_MAKERS: dict[str, Callable[[torch.Tensor], Callable[[torch.Tensor], torch.Tensor]]] = {
    "int8": int8_product,
    "bfloat16": bfloat16_product,
}


def use_fast_prefill(backbone: nn.Module, option: str, *, int8_decode: bool, drop_blocked: bool) -> PrefillWay:
    """Switch ``backbone``'s linear layers' prefill products as the ``prefill_weights`` ``option`` says (``auto``:
    with ``int8_decode``, bfloat16 on a CPU with bfloat16 arithmetic, else int8 on one with AVX2); returns the way
    taken (``float32``: nothing changed). ``drop_blocked``: the decode steps do not run in torch (the decode graph
    runs them), so the float32 blocked copies (``small_batch``) go once another way serves the prefill: a torch pass
    of a few rows then takes MKL's product."""
    linears = [module for module in backbone.modules() if isinstance(module, nn.Linear)]
    if not linears or linears[0].weight.dtype != torch.float32 or linears[0].weight.device.type != "cpu":
        return "float32"
    way = option
    if option == "auto":
        way = _auto_way() if int8_decode else "float32"
    if way not in _MAKERS:
        return "float32"
    try:
        products = [_MAKERS[way](module.weight) for module in linears]
        products[0](torch.zeros(MAX_ROWS + 1, linears[0].in_features))  # some CPUs fail only here
    except RuntimeError as exc:  # no such product in this torch build or on this CPU
        logger.warning("no %s prefill here, it stays float32: %s", way, exc)
        return "float32"
    for module, product in zip(linears, products, strict=True):
        if type(module) is nn.Linear:
            module.__class__ = SmallBatchLinear
        module.__class__ = PrefillLinear
        object.__setattr__(module, "prefill", product)  # a plain attribute: no parameter or state-dict entry
        if drop_blocked:
            object.__setattr__(module, "blocked", None)
            object.__setattr__(module, "blocked_rows", frozenset())
    logger.info("prefill products in %s", way)
    return way  # type: ignore[return-value]


def _auto_way() -> str:
    if bfloat16_arithmetic():
        return "bfloat16"
    return "int8" if int8_arithmetic() else "float32"


def bfloat16_arithmetic(cpuinfo: Path = _CPUINFO) -> bool:
    """Whether this CPU multiplies bfloat16 natively (Linux's flags ``avx512_bf16`` or ``amx_bf16``); ``False`` where
    it cannot be told."""
    return bool({"avx512_bf16", "amx_bf16"} & _flags(cpuinfo))


def int8_arithmetic(cpuinfo: Path = _CPUINFO) -> bool:
    """Whether FBGEMM has its 8-bit kernels for this CPU (x86-64 with AVX2); ``False`` where it cannot be told."""
    return "avx2" in _flags(cpuinfo) and "fbgemm" in torch.backends.quantized.supported_engines


def _flags(cpuinfo: Path) -> frozenset[str]:
    try:
        return cpu_flags(cpuinfo.read_text(errors="replace")) or frozenset()
    except OSError:
        return frozenset()
