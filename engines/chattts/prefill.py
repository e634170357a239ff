"""Prefill products in fewer bits, where the decode steps already run on 8-bit weights (``weights: int8``).

A prompt's prefill multiplies every prompt position by every weight matrix of the backbone (about 0.38 GFLOP a
position at full size): unlike a decode step, it is bound by arithmetic, not by reading the weights. In float32 it
was the largest cost of a stream's first audio left outside the 8-bit decode step, and what makes a voice from a
sample slower to start than a built-in one (the sample's audio codes follow the text in the prompt: they are
prefilled with every sentence). Two ways do the same products faster on CPUs with the instructions for them:

- ``int8``: torch's dynamic 8-bit product (``quantized::linear_dynamic``, FBGEMM; VNNI where the CPU has it): the
  weights in 8 bits, one scale per output channel, the activations quantized per pass; a quarter of float32's
  memory for the copy.
- ``bfloat16``: oneDNN's product on a bfloat16 copy of the weights in its blocked layout (``avx512_bf16`` or AMX);
  half of float32's memory.

Which one is the ``prefill_weights`` option (docs/engines.md); ``auto``, with the decode steps in 8 bits, measures
at load, as ``engines/chattts/small_batch.py`` measures the decode products: a pass of :data:`PREFILL_ROWS`
positions through two layers' weights, each way in turn, the fastest taken where it clearly beats float32
(:func:`use_fast_prefill`). The layers then compute every pass of more than
:data:`~engines.chattts.small_batch.MAX_ROWS` positions (prefills, and the running rows' steps that share a pass
with a prefill) that way; fewer rows, and the float32 weights themselves, are unchanged (text refinement and a torch
fallback still use them). The results differ from float32's by rounding: BENCHMARKS.md, "Prefill in fewer bits".
"""

from __future__ import annotations

import functools
import warnings
from typing import TYPE_CHECKING, Literal

import torch
from torch import nn

from engines.chattts.small_batch import MAX_ROWS, SmallBatchLinear, best_of_alternating
from lifecycle import naming

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["PREFILL_ROWS", "PrefillLinear", "PrefillWay", "bfloat16_product", "int8_product", "use_fast_prefill"]

logger = naming.logger("engine")

PrefillWay = Literal["float32", "int8", "bfloat16"]
PREFILL_ROWS = 64
"""Positions of the prefill timed at load: a sentence's prompt."""
_MARGIN = 0.8
"""Another way is taken only where it took at most this share of float32's time."""

_AUTO: tuple[PrefillWay, ...] = ("bfloat16",)
"""What ``auto`` measures: bfloat16 only. The 8-bit product quantizes each pass's activations with one scale for all
its rows, so a sequence's results would depend on what shares its pass (a seeded request's tokens on who joins), and
its last hidden state was 13 times further from float32's for no more speed where both run (BENCHMARKS.md)."""
_TIMED_LINEARS = 14
"""Weights timed at load: two layers' (the full model has 20)."""


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
    the rows per call."""
    weight = weight.detach().float()
    scales = (weight.abs().amax(1) / 127).clamp(min=1e-12).double()
    with warnings.catch_warnings():
        # torch 2.10+ says quantized tensors are deprecated; the dynamic product has no replacement on CPU yet.
        warnings.simplefilter("ignore", UserWarning)
        quantized = torch.quantize_per_channel(
            weight, scales, torch.zeros(len(weight), dtype=torch.long), 0, torch.qint8
        )
        packed = torch.ops.quantized.linear_prepack(quantized, None)

    def product(rows: torch.Tensor) -> torch.Tensor:
        # reduce_range: 7-bit activations, so that FBGEMM's 8-bit products cannot saturate on CPUs without VNNI.
        out: torch.Tensor = torch.ops.quantized.linear_dynamic(rows.float().contiguous(), packed, True)
        return out

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
    with ``int8_decode``, the ways of :data:`_AUTO` measured against float32, the fastest taken where it clearly
    wins); returns the way taken (``float32``: nothing changed). ``drop_blocked``: the decode steps do not run
    in torch (the decode graph runs them), so the float32 blocked copies (``small_batch``) go once another way
    serves the prefill: a torch pass of a few rows then takes MKL's product."""
    linears = [module for module in backbone.modules() if isinstance(module, nn.Linear)]
    if not linears or linears[0].weight.dtype != torch.float32 or linears[0].weight.device.type != "cpu":
        return "float32"
    ways: tuple[PrefillWay, ...] = _AUTO if option == "auto" and int8_decode else ()
    if option in _MAKERS:
        ways = (option,)  # type: ignore[assignment]
    products: dict[str, list[Callable[[torch.Tensor], torch.Tensor]]] = {}
    for way in ways:
        try:
            products[way] = [_MAKERS[way](module.weight) for module in linears]
            products[way][0](torch.zeros(MAX_ROWS + 1, linears[0].in_features))  # some CPUs fail only here
        except RuntimeError as exc:  # no such product in this torch build or on this CPU
            logger.warning("no %s prefill here, it stays float32: %s", way, exc)
    chosen = _fastest(linears, products) if option == "auto" else next(iter(products), "float32")
    if chosen == "float32":
        return "float32"
    for module, product in zip(linears, products[chosen], strict=True):
        if type(module) is nn.Linear:
            module.__class__ = SmallBatchLinear
        module.__class__ = PrefillLinear
        object.__setattr__(module, "prefill", product)  # a plain attribute: no parameter or state-dict entry
        if drop_blocked:
            object.__setattr__(module, "blocked", None)
            object.__setattr__(module, "blocked_rows", frozenset())
    return chosen  # type: ignore[return-value]


@torch.inference_mode()
def _fastest(linears: list[nn.Linear], products: dict[str, list[Callable[[torch.Tensor], torch.Tensor]]]) -> str:
    """The fastest way through the first :data:`_TIMED_LINEARS` weights (a prefill is bound by arithmetic, not by
    reading them: a few layers' weights time it as well as all of them, in a tenth of the time)."""
    linears = linears[:_TIMED_LINEARS]
    products = {way: made[:_TIMED_LINEARS] for way, made in products.items()}
    inputs = {size: torch.randn(PREFILL_ROWS, size) for size in {module.in_features for module in linears}}
    ways: dict[str, Callable[[], object]] = {
        "float32": lambda: [module(inputs[module.in_features]) for module in linears],
    }
    for way, made in products.items():
        ways[way] = functools.partial(_pass, linears, made, inputs)
    seconds = best_of_alternating(ways)
    fastest = min(seconds, key=seconds.__getitem__)
    described = ", ".join(f"{way} {1000 * s:.1f} ms" for way, s in seconds.items())
    if fastest == "float32" or seconds[fastest] > _MARGIN * seconds["float32"]:
        logger.info("prefill stays float32 (a %d-position pass: %s)", PREFILL_ROWS, described)
        return "float32"
    logger.info("prefill products in %s (a %d-position pass: %s)", fastest, PREFILL_ROWS, described)
    return fastest


def _pass(
    linears: list[nn.Linear], products: list[Callable[[torch.Tensor], torch.Tensor]], inputs: dict[int, torch.Tensor]
) -> list[torch.Tensor]:
    return [product(inputs[module.in_features]) for module, product in zip(linears, products, strict=True)]
