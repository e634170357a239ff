"""A request that joins a running batch at a chosen pass: the engine's ``arrivals`` (``BatchingEngine``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from engines.base import CancelFlag

if TYPE_CHECKING:
    from collections.abc import Sequence

    from engines.base import CancelToken, SynthesisRequest

__all__ = ["JoinAt"]


class JoinAt:
    """Hands ``request`` over at the engine's ``at``-th poll (one poll per forward pass); ``polls`` counts them."""

    def __init__(self, request: SynthesisRequest, at: int) -> None:
        self.request, self.at, self.polls = request, at, 0
        self.cancel = CancelFlag()

    def __call__(self, limit: int) -> Sequence[tuple[SynthesisRequest, CancelToken]]:
        self.polls += 1
        return [(self.request, self.cancel)] if self.polls == self.at and limit else []
