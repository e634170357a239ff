"""Decode steps on CPU: the product of a few rows with each weight matrix, computed the way this CPU does fastest.

A decode step multiplies one row per running sequence (1 to 8 rows in a small batch) by every weight matrix of the
GPT backbone. torch's CPU ``F.linear`` hands that to MKL's ``sgemm`` (``sgemv`` for one row), which on some CPUs
takes a slow path for a handful of rows, where a few rows can cost several times one row, and one row (the
matrix-vector path) more than two rows the fast way. The same product written as ``weight @ rows.T`` (a matrix times
a few columns) takes another path there that costs about one row's time. It is fast only with the columns laid out
one after the other in memory: rows that come straight from an earlier ``weight @ rows.T`` (transposed, through an
elementwise op such as the MLP's activation) are made contiguous first. One row is computed as two (the row twice),
where that is faster.

A third way skips MKL: oneDNN's product on a copy of the weight laid out once, at load, in oneDNN's blocked format
(``torch.ops.mkldnn._reorder_linear_weight``, what torch's compiler does for frozen CPU models). The blocked copy is a
second copy of the weights (0.76 GB for the full model, per worker), made only where some row count takes it. What
each way costs on the machines measured: BENCHMARKS.md, "Products per row count" (``bench/chattts_products.py``).

Which is faster depends on the CPU and the BLAS build, so it is measured, not assumed: at load, on CPU, each row
count from 1 to :data:`MAX_ROWS`, and a prefill of :data:`PREFILL_ROWS`, is timed each way through all the
backbone's weights of one shape, as a pass goes through them, and the layers of that shape then take, for each row
count, the fastest way where it clearly beat ``F.linear`` (the attention's square matrices and the MLP's wide and
tall ones do not all favour the same way). The result is the same product (to float rounding); GPUs are untouched.

That rounding is why a seeded sequence's passes take ``F.linear`` whatever their row count (:func:`plain_products`):
the way timed fastest at load may be another at the next load, and a seeded request's audio must repeat byte for byte.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F  # noqa: N812 - torch's own name for it
from torch import nn

from lifecycle import naming

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

__all__ = [
    "MAX_ROWS",
    "PREFILL_ROWS",
    "Products",
    "SmallBatchLinear",
    "best_of_alternating",
    "blocked_product",
    "blocked_weight",
    "measure_products",
    "plain_products",
    "transposed_product",
    "use_small_batch_linear",
]

logger = naming.logger("engine")

MAX_ROWS = 8
"""The largest row count timed on its own; more rows (prefills) take the way timed for :data:`PREFILL_ROWS`."""
PREFILL_ROWS = 32
"""The rows of the prefill timed too: a few prompts' tokens."""
_MARGIN = 0.85
"""Another way is used only where it took at most this share of the time of the way it replaces."""
_ROUNDS = 4
_PLAIN = contextvars.ContextVar("plain_products", default=False)


@contextlib.contextmanager
def plain_products() -> Iterator[None]:
    """Meanwhile, in this thread, every :class:`SmallBatchLinear` computes through ``F.linear``: the same way at every
    load, not the way this load timed fastest for the row count."""
    token = _PLAIN.set(True)
    try:
        yield
    finally:
        _PLAIN.reset(token)


class SmallBatchLinear(nn.Linear):
    """An ``nn.Linear`` whose product takes, for each row count, the way measured fastest: oneDNN on ``blocked`` (its
    weight in oneDNN's blocked layout) for ``blocked_rows`` (:data:`PREFILL_ROWS` in it: every count above
    :data:`MAX_ROWS` too), ``weight @ rows.T`` for ``transposed_rows``, ``F.linear`` for the rest."""

    transposed_rows: frozenset[int] = frozenset()
    blocked_rows: frozenset[int] = frozenset()
    blocked: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if _PLAIN.get():
            return super().forward(x)
        rows = x.numel() // self.in_features
        flat = x.reshape(rows, self.in_features)
        if self.blocked is not None and (rows if rows <= MAX_ROWS else PREFILL_ROWS) in self.blocked_rows:
            out = blocked_product(self.blocked, flat, self.bias)
        elif rows in self.transposed_rows:
            out = transposed_product(self.weight, flat)
            if self.bias is not None:
                out = out + self.bias
        else:
            return super().forward(x)
        return out.reshape(*x.shape[:-1], self.out_features)


def blocked_weight(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` laid out for oneDNN's product (:func:`blocked_product`), tuned for decode steps' few rows (it serves
    any row count)."""
    blocked: torch.Tensor = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), MAX_ROWS // 2)
    return blocked


def blocked_product(blocked: torch.Tensor, rows: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``rows @ weight.T + bias`` with ``blocked`` from :func:`blocked_weight`; ``rows`` is ``(rows, in)``."""
    out: torch.Tensor = torch.ops.mkldnn._linear_pointwise(rows.contiguous(), blocked, bias, "none", [], "")
    return out


def transposed_product(weight: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``rows @ weight.T`` computed as ``weight @ rows.T``, the rows contiguous (one row: computed as two)."""
    if len(rows) == 1:
        return (weight @ rows.expand(2, -1).contiguous().T)[:, :1].T
    return (weight @ rows.contiguous().T).T


@dataclass(frozen=True, slots=True)
class Products:
    """How the layers of one weight shape compute (see :class:`SmallBatchLinear`); ``blocked``: the blocked copies,
    one per weight, where some row count takes them."""

    transposed_rows: frozenset[int] = frozenset()
    blocked_rows: frozenset[int] = frozenset()
    blocked: list[torch.Tensor] | None = None


def use_small_batch_linear(backbone: nn.Module, *, blocked: bool = True) -> dict[str, list[int]]:
    """Measure, then switch ``backbone``'s linear layers, each weight shape the way measured fastest for each row
    count (``blocked``: oneDNN's blocked copies among the ways); returns, per way (``blocked``, ``transposed``), the
    row counts some shape takes it for (empty: nothing changed)."""
    by_shape: dict[tuple[int, ...], list[nn.Linear]] = {}
    for module in backbone.modules():
        if type(module) is nn.Linear:
            by_shape.setdefault(tuple(module.weight.shape), []).append(module)
    switched: dict[str, set[int]] = {}
    for shape, linears in by_shape.items():
        products = measure_products([module.weight.detach() for module in linears], blocked=blocked)
        if not products.transposed_rows and not products.blocked_rows:
            continue
        copies = products.blocked if products.blocked_rows else None
        for index, module in enumerate(linears):
            module.__class__ = SmallBatchLinear  # the same parameters, another forward
            # Plain attributes: no parameter, buffer or state-dict entry.
            object.__setattr__(module, "transposed_rows", products.transposed_rows)
            object.__setattr__(module, "blocked_rows", products.blocked_rows)
            object.__setattr__(module, "blocked", None if copies is None else copies[index])
        logger.info("products with %s weights: weight @ rows.T for %s row(s), oneDNN's blocked layout for %s: faster "
                    "on this CPU", "x".join(map(str, shape)), sorted(products.transposed_rows),
                    sorted(products.blocked_rows))  # fmt: skip
        switched.setdefault("transposed", set()).update(products.transposed_rows)
        switched.setdefault("blocked", set()).update(products.blocked_rows)
    return {way: sorted(rows) for way, rows in switched.items() if rows}


@torch.inference_mode()
def measure_products(weights: list[torch.Tensor], *, blocked: bool = True) -> Products:
    """Time each way of computing products with ``weights`` (all of one shape) for each row count, and choose.

    Each row count is timed as a pass meets it: one product with every weight in turn, so that the weights stream
    from memory as they do then (one weight timed again and again would stay in the CPU's cache and mislead)."""
    copies = _blocked_copies(weights) if blocked else None
    transposed_rows: set[int] = set()
    blocked_rows: set[int] = set()
    for rows in [*range(1, MAX_ROWS + 1), PREFILL_ROWS]:
        inputs = {w.shape[1]: torch.randn(rows, w.shape[1], dtype=w.dtype, device=w.device) for w in weights}
        ways = {"linear": lambda: [F.linear(inputs[w.shape[1]], w) for w in weights]}  # noqa: B023 - called here
        if rows <= MAX_ROWS:
            ways["transposed"] = lambda: [transposed_product(w, inputs[w.shape[1]]) for w in weights]  # noqa: B023
        if copies is not None:
            ways["blocked"] = lambda: [blocked_product(b, inputs[b.shape[1]]) for b in copies]  # noqa: B023
        seconds = best_of_alternating(ways)
        fastest = min(seconds, key=seconds.__getitem__)
        if fastest != "linear" and seconds[fastest] <= _MARGIN * seconds["linear"]:
            (blocked_rows if fastest == "blocked" else transposed_rows).add(rows)
    return Products(frozenset(transposed_rows), frozenset(blocked_rows), copies if blocked_rows else None)


def _blocked_copies(weights: list[torch.Tensor]) -> list[torch.Tensor] | None:
    """Each weight laid out for oneDNN, or ``None`` where this torch or CPU has no such product for their dtype
    (oneDNN lays out float16 only on CPUs with float16 arithmetic)."""
    if not torch.backends.mkldnn.is_available():  # type: ignore[no-untyped-call]
        return None
    try:
        return [blocked_weight(w) for w in weights]
    except RuntimeError as exc:
        logger.info("no oneDNN layout for %s weights here (%s): MKL's products only", weights[0].dtype, exc)
        return None


def best_of_alternating(ways: Mapping[str, Callable[[], object]]) -> dict[str, float]:
    """Seconds per call of each way, the best of :data:`_ROUNDS` taken in turns after one of each to warm up: the
    machine's drift (it is shared) then falls on all alike, and the best is the least disturbed."""
    for way in ways.values():
        way()
    best = dict.fromkeys(ways, float("inf"))
    for _ in range(_ROUNDS):
        for name, way in ways.items():
            started = time.perf_counter()
            way()
            best[name] = min(best[name], time.perf_counter() - started)
    return best
