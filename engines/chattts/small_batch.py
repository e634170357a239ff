"""Decode steps on CPU: the product of a few rows with each weight matrix, computed the way this CPU does fastest.

A decode step multiplies one row per running sequence (2 to 8 rows in a small batch) by every weight matrix of the
GPT backbone. torch's CPU ``F.linear`` hands that to MKL's ``sgemm``, which on some CPUs takes a slow path for a
handful of rows: measured on the 2-core AMD EPYC of BENCHMARKS.md, 2 rows cost 3.7x one row (one row goes through a
fast matrix-vector path), and a whole decode step at batch 2 cost 1.75x batch 1. The same product written as
``weight @ rows.T`` (a matrix times a few columns) takes another path there that costs about one row's time.

Which is faster depends on the CPU and the BLAS build, so it is measured, not assumed: at load, on CPU, each row
count from 2 to :data:`MAX_ROWS` is timed both ways through all the backbone's weights, as a step goes through them,
and the backbone's linear layers then use ``weight @ rows.T`` for the row counts where it clearly won. The
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

__all__ = ["MAX_ROWS", "SmallBatchLinear", "faster_transposed_rows", "use_small_batch_linear"]

logger = logging.getLogger("tts_gateway.engine")

MAX_ROWS = 8
"""The largest row count considered (on the machine of BENCHMARKS.md ``F.linear`` already won at 8 rows)."""
_MARGIN = 0.85
"""``weight @ rows.T`` is used only where it took at most this share of ``F.linear``'s time."""


class SmallBatchLinear(nn.Linear):
    """An ``nn.Linear`` that computes ``weight @ rows.T`` for the row counts in ``transposed_rows``."""

    transposed_rows: frozenset[int] = frozenset()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // self.in_features
        if rows not in self.transposed_rows:
            return super().forward(x)
        out = (self.weight @ x.reshape(rows, self.in_features).T).T
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*x.shape[:-1], self.out_features)


def use_small_batch_linear(backbone: nn.Module) -> frozenset[int]:
    """Measure, then switch ``backbone``'s linear layers to :class:`SmallBatchLinear`; returns the row counts that
    use ``weight @ rows.T`` (empty: nothing changes)."""
    linears = [module for module in backbone.modules() if type(module) is nn.Linear]
    if not linears:
        return frozenset()
    rows = faster_transposed_rows([module.weight.detach() for module in linears])
    if rows:
        for module in linears:
            module.__class__ = SmallBatchLinear  # the same parameters, another forward
            object.__setattr__(module, "transposed_rows", rows)  # a plain attribute, not a submodule or parameter
        logger.info("decode steps of %s row(s) use weight @ rows.T: faster on this CPU", sorted(rows))
    return rows


@torch.inference_mode()
def faster_transposed_rows(weights: list[torch.Tensor]) -> frozenset[int]:
    """The row counts (2 to :data:`MAX_ROWS`) for which ``weight @ rows.T`` beat ``F.linear`` by the margin.

    Each is timed as a decode step meets it: one product with every weight in turn, so that the weights stream from
    memory as they do then (one weight timed again and again would stay in the CPU's cache and mislead)."""
    faster = set()
    for rows in range(2, MAX_ROWS + 1):
        inputs = {w.shape[1]: torch.randn(rows, w.shape[1], dtype=w.dtype, device=w.device) for w in weights}
        linear = _best_of(lambda: [F.linear(inputs[w.shape[1]], w) for w in weights])  # noqa: B023 - called here
        transposed = _best_of(lambda: [(w @ inputs[w.shape[1]].T).T for w in weights])  # noqa: B023
        if transposed <= _MARGIN * linear:
            faster.add(rows)
    return frozenset(faster)


def _best_of(step: Callable[[], object], rounds: int = 2) -> float:
    """Seconds per call, the best of ``rounds`` after one to warm up (the least disturbed by anything else)."""
    step()
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        step()
        best = min(best, time.perf_counter() - started)
    return best
