"""The token loop's batches: one that sequences share, and one of its own for each seeded sequence.

A seeded request's audio must repeat byte for byte, whatever else the engine is doing. Its audio is decoded from its
hidden states, so they must not move by a bit when other sequences share its passes, and in a shared pass they do: CPU
products round a row by how many rows share them (MKL and ONNX Runtime take other kernels, and share out their sums
otherwise, at other row counts; measured with ``F.linear`` at the full model's shapes: a row's product at 2 rows equals
it at 3, not at 1 nor at 4-16). On the tiny test assets a seeded row's hidden state left its lone value at its first
shared step in every configuration, and its audio by 1 to 7 int16 steps with fixed chunks. Where the steps are 8-bit
(``weights: int8``) such a difference can tip an activation's 8-bit rounding, and then a sampled token: what was found
after a seeded prompt was prefilled in one pass with another (the prefill's own products are row by row,
``engines/chattts/prefill.py``; the steps after it were shared). No cheap product is row by row at every count (oneDNN's
blocked one is not at the MLP's 3072 columns either), so a seeded sequence (``CodeRequest.repeatable``) runs in a batch
of its own: its prompt prefilled whole in a pass of its own, each of its steps a pass of one row. That costs the weight
reads that batching shares (eight seeded streams step as eight passes, where a batch of eight costs about 1.8 on 2 CPU
cores: docs/engines.md, ``max_batch: auto``); unseeded sequences are batched as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from engines.chattts.generation import CodeBatch, CodeRequest, StepEvent

__all__ = ["CodeBatches"]


class CodeBatches:
    """:class:`CodeBatch`'s ``join``, ``step`` and ``size`` over ``shared`` and the seeded sequences' own batches
    (:meth:`CodeBatch.apart`)."""

    def __init__(self, shared: CodeBatch) -> None:
        self._shared = shared
        self._own: list[CodeBatch] = []

    @property
    def size(self) -> int:
        """The sequences still running or waiting for their prefill, in every batch."""
        return self._shared.size + sum(batch.size for batch in self._own)

    def join(self, requests: Sequence[CodeRequest]) -> None:
        """Add new sequences: the repeatable ones each to a batch of its own, the others to the shared batch."""
        self._shared.join([request for request in requests if not request.repeatable])
        for request in requests:
            if request.repeatable:
                own = self._shared.apart()
                own.join([request])
                self._own.append(own)

    def step(self) -> list[StepEvent]:
        """One forward pass of each batch (see :meth:`CodeBatch.step`); the ended batches of their own go."""
        events = self._shared.step() if self._shared.size else []
        for batch in self._own:
            events += batch.step()
        self._own = [batch for batch in self._own if batch.size]
        return events
