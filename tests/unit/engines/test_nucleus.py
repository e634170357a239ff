"""ChatTTS's token filter without its sort (``engines/chattts/nucleus.py``) keeps exactly the tokens transformers'
top-p then top-k keep, bit for bit, on rows of every shape the engine samples: flat, peaked, a few near-equal
leaders, batches of 1 to 16 requests' codebooks."""

from __future__ import annotations

import pytest
import torch
from ChatTTS.model import gen_logits
from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

from engines.chattts.nucleus import TopPTopK, fast_filter

VOCABULARY = 626
"""ChatTTS's audio tokens per codebook at full size."""


def transformers_filter(scores: torch.Tensor, top_p: float, top_k: int, keep: int = 3) -> torch.Tensor:
    top_p_warper = TopPLogitsWarper(top_p, min_tokens_to_keep=keep)
    top_k_warper = TopKLogitsWarper(top_k, min_tokens_to_keep=keep)
    filtered: torch.Tensor = top_k_warper(None, top_p_warper(None, scores))
    return filtered


def rows(seed: int, count: int, scale: float, vocabulary: int = VOCABULARY) -> torch.Tensor:
    """Scores as the engine filters them: logits over a temperature (0.3), some peaked, some flat."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(count, vocabulary, generator=generator) * scale / 0.3


@pytest.mark.parametrize("count", [4, 16, 64])
@pytest.mark.parametrize("scale", [0.05, 0.5, 1.0, 3.0, 10.0])
@pytest.mark.parametrize(("top_p", "top_k"), [(0.7, 20), (0.9, 5), (0.3, 50), (0.99, 626)])
def test_the_same_tokens_as_transformers_top_p_then_top_k(count: int, scale: float, top_p: float, top_k: int) -> None:
    for seed in range(20):
        scores = rows(seed, count, scale)
        ours = TopPTopK(top_p, top_k, 3)(scores)
        assert torch.equal(ours, transformers_filter(scores, top_p, top_k))


def test_near_equal_leaders_and_a_small_vocabulary() -> None:
    """A few leaders within a rounding of each other (the cut falls among them), and the tiny assets' vocabulary."""
    for seed in range(50):
        scores = rows(seed, 8, 0.1)
        scores[:, :5] = 10.0 + torch.arange(5) * 1e-5
        assert torch.equal(TopPTopK(0.7, 20, 3)(scores), transformers_filter(scores, 0.7, 20))
        small = rows(seed, 8, 1.0, vocabulary=12)
        assert torch.equal(TopPTopK(0.7, 20, 3)(small), transformers_filter(small, 0.7, 20))


def test_chatttss_warpers_get_the_filter_and_others_do_not() -> None:
    warpers, _ = gen_logits(625, 0.7, 20, 1.05)
    found = fast_filter(warpers)
    assert found is not None and (found.top_p, found.top_k, found.min_tokens_to_keep) == (0.7, 20, 3)
    assert fast_filter(warpers[:1]) is None  # top-p alone
    assert fast_filter(list(reversed(warpers))) is None  # top-k first
    assert fast_filter([TopPLogitsWarper(0.7, filter_value=-1e4, min_tokens_to_keep=3), warpers[1]]) is None
