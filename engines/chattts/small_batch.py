"""Decode steps on CPU: the product of a few rows with each weight matrix, computed the way this CPU does fastest.

A decode step multiplies one row per running sequence (1 to 8 rows in a small batch) by every weight matrix of the
GPT backbone. torch's CPU ``F.linear`` hands that to MKL's ``sgemm`` (``sgemv`` for one row), which on some CPUs
takes a slow path for a handful of rows: measured on the 2-core AMD EPYC of BENCHMARKS.md, 2 rows cost 3.7x one
row, and one row (the matrix-vector path) cost twice what two rows cost the fast way. The same product written as
``weight @ rows.T`` (a matrix times a few columns) takes another path there that costs about one row's time. It
is fast only with the columns laid out one after the other in memory: rows that come straight from an earlier
``weight @ rows.T`` (transposed, through an elementwise op such as the MLP's activation) are made contiguous first,
which halved the MLP's down projection. One row is computed as two (the row twice), where that is faster.

Which is faster depends on the CPU and the BLAS build, so it is measured, not assumed: at load, on CPU, each row
count from 1 to :data:`MAX_ROWS` is timed both ways through all the backbone's weights, as a step goes through them,
and the backbone's linear layers then use ``weight @ rows.T`` for the row counts where it clearly won, decided per
weight shape (the attention's square matrices and the MLP's wide and tall ones do not all favour the same way). The
result is the same product (to float rounding); prefill (many rows) and GPUs are untouched.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F  # noqa: N812 - torch's own name for it
from torch import nn

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["MAX_ROWS", "SmallBatchLinear", "faster_transposed_rows", "transposed_product", "use_small_batch_linear"]

logger = logging.getLogger("tts_gateway.engine")

MAX_ROWS = 8
"""The largest row count considered (on the machine of BENCHMARKS.md ``F.linear`` already won at 8 rows)."""
_MARGIN = 0.85
_ROUNDS = 4
"""``weight @ rows.T`` is used only where it took at most this share of ``F.linear``'s time."""


class SmallBatchLinear(nn.Linear):
    """An ``nn.Linear`` that computes ``weight @ rows.T`` for the row counts in ``transposed_rows``."""

    transposed_rows: frozenset[int] = frozenset()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // self.in_features
        if rows not in self.transposed_rows:
            return super().forward(x)
        out = transposed_product(self.weight, x.reshape(rows, self.in_features))
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*x.shape[:-1], self.out_features)


def transposed_product(weight: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``rows @ weight.T`` computed as ``weight @ rows.T``, the rows contiguous (one row: computed as two)."""
    if len(rows) == 1:
        return (weight @ rows.expand(2, -1).contiguous().T)[:, :1].T
    return (weight @ rows.contiguous().T).T


def use_small_batch_linear(backbone: nn.Module) -> frozenset[int]:
    """Measure, then switch ``backbone``'s linear layers to :class:`SmallBatchLinear`, each weight shape with the row
    counts measured for it; returns the row counts that use ``weight @ rows.T`` for some shape (empty: nothing
    changes)."""
    by_shape: dict[tuple[int, ...], list[nn.Linear]] = {}
    for module in backbone.modules():
        if type(module) is nn.Linear:
            by_shape.setdefault(tuple(module.weight.shape), []).append(module)
    switched: set[int] = set()
    for shape, linears in by_shape.items():
        rows = faster_transposed_rows([module.weight.detach() for module in linears])
        if not rows:
            continue
        for module in linears:
            module.__class__ = SmallBatchLinear  # the same parameters, another forward
            object.__setattr__(module, "transposed_rows", rows)  # a plain attribute, not a submodule or parameter
        logger.info("decode steps of %s row(s) use weight @ rows.T for %s weights: faster on this CPU",
                    sorted(rows), "x".join(map(str, shape)))  # fmt: skip
        switched |= rows
    return frozenset(switched)


@torch.inference_mode()
def faster_transposed_rows(weights: list[torch.Tensor]) -> frozenset[int]:
    """The row counts (1 to :data:`MAX_ROWS`) for which ``weight @ rows.T`` beat ``F.linear`` by the margin.

    Each is timed as a decode step meets it: one product with every weight in turn, so that the weights stream from
    memory as they do then (one weight timed again and again would stay in the CPU's cache and mislead)."""
    faster = set()
    for rows in range(1, MAX_ROWS + 1):
        inputs = {w.shape[1]: torch.randn(rows, w.shape[1], dtype=w.dtype, device=w.device) for w in weights}
        linear, transposed = _best_of_alternating(
            lambda: [F.linear(inputs[w.shape[1]], w) for w in weights],  # noqa: B023 - called here
            lambda: [transposed_product(w, inputs[w.shape[1]]) for w in weights],  # noqa: B023
        )
        if transposed <= _MARGIN * linear:
            faster.add(rows)
    return frozenset(faster)


def _best_of_alternating(first: Callable[[], object], second: Callable[[], object]) -> tuple[float, float]:
    """Seconds per call of each, the best of :data:`_ROUNDS` taken in turns after one of each to warm up: the
    machine's drift (it is shared) then falls on both alike, and the best is the least disturbed."""
    first()
    second()
    best = [float("inf"), float("inf")]
    for _ in range(_ROUNDS):
        for index, step in enumerate((first, second)):
            started = time.perf_counter()
            step()
            best[index] = min(best[index], time.perf_counter() - started)
    return best[0], best[1]
