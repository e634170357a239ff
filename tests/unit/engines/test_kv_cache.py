"""The ChatTTS token loop's KV cache: it appends in place, holds exactly what transformers' own ``DynamicCache``
holds, takes in the rewrites the token loop makes between steps, and the token loop gives the same tokens with it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
import torch
from transformers import DynamicCache, LlamaConfig

from engines.base import CancelFlag
from engines.chattts import ChatTTSEngine, kv_cache, rows
from engines.chattts.generation import CodeBatch, CodeRequest, Sampling
from tests.chattts_assets import chattts_engine_options

if TYPE_CHECKING:
    from collections.abc import Callable

LAYERS, BATCH, HEADS, HEAD_DIM = 2, 3, 4, 8


class Backbone:
    config = LlamaConfig(num_hidden_layers=LAYERS, hidden_size=HEADS * HEAD_DIM, num_attention_heads=HEADS)


def columns(count: int, batch: int = BATCH) -> torch.Tensor:
    return torch.randn(batch, HEADS, count, HEAD_DIM)


def test_appending_holds_what_concatenation_holds_without_copying_at_every_step() -> None:
    cache = kv_cache.growing_cache(Backbone())
    reference = DynamicCache()
    buffers = set()
    for count in (7, *[1] * 300):
        for layer in range(LAYERS):
            keys, values = columns(count), columns(count)
            got = cache.layers[layer].update(keys, values)
            expected = reference.update(keys, values, layer)
            assert torch.equal(got[0], expected[0])
            assert torch.equal(got[1], expected[1])
        buffers.add(cache.layers[0].keys.untyped_storage().data_ptr())
    assert len(buffers) <= 8, "a new buffer only now and then (307 columns in all), not at every step"


def test_rewrites_between_steps_are_taken_in() -> None:
    # What the token loop does: a row leaves (batch_select_indices), padding columns are trimmed, rows are merged.
    cache, reference = kv_cache.growing_cache(Backbone()), DynamicCache()
    for count in (5, 1, 1):
        for layer in range(LAYERS):
            states = columns(count), columns(count)
            cache.layers[layer].update(*states)
            reference.update(*states, layer)
    for target in (cache, reference):
        target.batch_select_indices(torch.tensor([0, 2]))
    for target in (cache, reference):  # as the token loop trims padding
        tensors = rows.cache_tensors(target)
        rows.set_cache_tensors(target, [(keys[:, :, 2:], values[:, :, 2:]) for keys, values in tensors])
    for step in range(3):
        for layer in range(LAYERS):
            states = columns(1, batch=2), columns(1, batch=2)
            got = cache.layers[layer].update(*states)
            expected = reference.update(*states, layer)
            assert torch.equal(got[0], expected[0]), step
            assert torch.equal(got[1], expected[1]), step


@pytest.fixture(scope="module")
def engine() -> ChatTTSEngine:
    loaded = ChatTTSEngine(chattts_engine_options(max_batch=4))
    loaded.load()
    return loaded


def run_with_a_joiner(engine: ChatTTSEngine) -> list[tuple[int, Any]]:
    """Two sequences, a third joining after 5 steps, one ending early: every event, in order."""
    voices = engine._voices.named  # type: ignore[union-attr]
    prompt = engine.prompts.named_voice_prompt("hello world")
    first = [CodeRequest(key, prompt[: len(prompt) - key], voices["alloy"], key, 60 - 20 * key, 1, CancelFlag())
             for key in range(2)]  # fmt: skip
    codes = CodeBatch(engine._chat, Sampling())
    codes.join(first)
    events: list[tuple[int, Any]] = []
    for step in range(80):
        if step == 5:
            codes.join([CodeRequest(9, prompt, voices["echo"], 9, 50, 1, CancelFlag())])
        events += codes.step()
    return events


def test_the_token_loop_gives_the_same_tokens_as_with_transformers_cache(
    engine: ChatTTSEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    ours = run_with_a_joiner(engine)
    plain: Callable[[Any], Any] = lambda backbone: DynamicCache(config=backbone.config)  # noqa: E731
    monkeypatch.setattr(kv_cache, "growing_cache", plain)
    theirs = run_with_a_joiner(engine)
    assert [key for key, _ in ours] == [key for key, _ in theirs]
    for (_, mine), (_, reference) in zip(ours, theirs, strict=True):
        assert (mine is None) == (reference is None)
        if mine is not None:
            torch.testing.assert_close(mine, reference, rtol=1e-4, atol=1e-5)
