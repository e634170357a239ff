"""How many threads torch uses for a stretch of work: fewer than the worker's where sharing out costs more than it
gives."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["torch_threads"]


@contextlib.contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """torch on ``threads`` threads meanwhile (``None``: unchanged). The count is the calling thread's own.

    Every op torch shares out leaves its OpenMP threads spinning for a while after it, on the cores something else
    (ONNX Runtime's threads, the next decode step) then needs (``bench/chattts_step_overhead.py``,
    ``bench/chattts_stream_decode.py``); on one thread, torch starts none.
    """
    if threads is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
