# ruff: noqa: PLC0415 - transformers is imported lazily: the server process never loads it
"""A KV cache that appends in place instead of copying itself at every step.

transformers' ``DynamicCache`` appends a step's keys and values with ``torch.cat``: every decode step copies the whole
cache of every layer. That copy grows with the sequence (a 200-character sentence is about 700 tokens), so a long
sentence's decode steps pay for it (``bench/chattts_kv_cache.py``; its figures: docs/engineering/benchmark-history.md,
"the KV cache"). The layers here keep their keys and values in a buffer with room to spare (half again what is used,
at least :data:`SPARE_COLUMNS`: the price is up to half again the cache's memory), write each step into it and hand
attention a view of the used part (as fast to attend to as a contiguous tensor: measured).

The token loop also rewrites the cache between steps (a row leaves: ``batch_select_indices``; padding is trimmed;
new rows are merged in) by assigning new ``keys`` and ``values``; the next update notices the assignment and takes
the new tensors into a fresh buffer, a copy paid once per change rather than once per step.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["SPARE_COLUMNS", "growing_cache", "whole_buffers"]

SPARE_COLUMNS = 64
"""The least room a buffer is given beyond what it holds."""


def growing_cache(backbone: Any) -> Any:
    """A ``DynamicCache`` for ``backbone`` whose layers append in place (a plain one where transformers' cache has
    no per-layer objects: transformers 4.x before 4.56)."""
    from transformers import DynamicCache

    try:
        cache = DynamicCache(config=backbone.config)
        from transformers.cache_utils import DynamicLayer
    except (TypeError, ImportError):  # transformers 4.x
        return DynamicCache()
    if any(type(layer) is not DynamicLayer for layer in cache.layers):
        return cache  # sliding windows or a layout this does not know: keep transformers' own
    growing_layer = _growing_layer_class()
    cache.layers = [growing_layer() for _ in cache.layers]
    return cache


@functools.cache
def _growing_layer_class() -> type[Any]:
    """``GrowingLayer``, defined on first use: it subclasses transformers' ``DynamicLayer``."""
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):  # type: ignore[no-untyped-call] # transformers' __init_subclass__
        """A ``DynamicLayer`` whose ``update`` writes into spare room instead of concatenating."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]
            self._buffers: tuple[torch.Tensor, torch.Tensor] | None = None
            self._view: torch.Tensor | None = None  # the ``keys`` this layer last handed out

        def update(
            self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
        ) -> tuple[torch.Tensor, torch.Tensor]:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            held_keys, held_values = self.keys, self.values
            assert held_keys is not None, "set by lazy_initialization"
            assert held_values is not None, "set by lazy_initialization"
            used = held_keys.shape[-2] if held_keys.numel() else 0
            needed = used + key_states.shape[-2]
            if self._buffers is None or held_keys is not self._view or needed > self._buffers[0].shape[-2]:
                self._buffers = _room_for((held_keys, held_values), (key_states, value_states), used, needed)
            keys, values = self._buffers
            keys[..., used:needed, :] = key_states
            values[..., used:needed, :] = value_states
            self.keys, self.values = keys[..., :needed, :], values[..., :needed, :]
            self._view = self.keys
            return self.keys, self.values

        def whole(self) -> tuple[torch.Tensor, torch.Tensor, int]:
            """The whole key and value buffers (contiguous: no copy to hand them on), with room for one more column,
            and how many of their columns are used; the others are zeros."""
            held_keys, held_values = self.keys, self.values
            assert held_keys is not None, "a prefilled layer"
            assert held_values is not None, "a prefilled layer"
            used = held_keys.shape[-2]
            if self._buffers is None or held_keys is not self._view or used + 1 > self._buffers[0].shape[-2]:
                self._buffers = _room_for((held_keys, held_values), (held_keys, held_values), used, used + 1)
                self.keys, self.values = self._buffers[0][..., :used, :], self._buffers[1][..., :used, :]
                self._view = self.keys
            return self._buffers[0], self._buffers[1], used

    return GrowingLayer


def _room_for(
    held: tuple[torch.Tensor, torch.Tensor], new: tuple[torch.Tensor, torch.Tensor], used: int, needed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """New key and value buffers holding the first ``used`` columns of ``held``, with room for ``needed`` and more
    (shaped like ``new``, the states about to be written)."""
    capacity = needed + max(SPARE_COLUMNS, needed // 2)
    # Zeros, not garbage: ``whole`` hands the unused columns on, masked; a NaN there would survive the mask.
    keys, values = (states.new_zeros((*states.shape[:-2], capacity, states.shape[-1])) for states in new)
    if used:
        keys[..., :used, :], values[..., :used, :] = held
    return keys, values


def whole_buffers(cache: Any) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], int] | None:
    """Every layer's whole ``(keys, values)`` buffers, contiguous, with room for one more column, and how many of
    their columns are used (the rest are zeros, to be masked); ``None`` for a cache that is not growing.

    What a step that takes its cache as contiguous arrays (the ONNX decode graph) reads instead of the used views:
    those are strided (the spare room lies between heads), and making them contiguous copied the whole cache of
    every layer at every step."""
    layers = getattr(cache, "layers", None)
    if not layers or not all(hasattr(layer, "whole") for layer in layers):
        return None
    wholes = [layer.whole() for layer in layers]
    return [(keys, values) for keys, values, _ in wholes], wholes[0][2]
