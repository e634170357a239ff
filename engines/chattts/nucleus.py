"""ChatTTS's token filter, top-p then top-k (transformers' ``TopPLogitsWarper`` and ``TopKLogitsWarper``, as
``ChatTTS.model.gen_logits`` lists them), without their argsort.

transformers' top-p sorts each row's scores with their indices to scatter its decision back; torch's CPU sort with
indices took 850 us for a batch of 8 (32 rows of 626 audio tokens, ``bench/chattts_sampling.py``), 3 % of a decode
step. The decision needs only the sorted values: the rows' cumulative probabilities, summed in ascending order, fall
under ``1 - top_p`` over a prefix (they never decrease), so top-p keeps every score from some sorted position on, and
top-k the ``top_k`` largest of those. One threshold per row, the score at the later of the two positions, keeps the
same tokens: the values are sorted without indices (NumPy's sort), their probabilities and cumulative sums computed
by the same torch operations on the same values, so each position's decision is transformers' own, bit for bit.
Scores that tie exactly at the threshold are all kept, where transformers keeps those its sort happened to put
last (float scores out of a product do not tie in practice; tested against transformers on random rows).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

__all__ = ["TopPTopK", "fast_filter"]


class TopPTopK:
    """``TopPLogitsWarper(top_p, min_tokens_to_keep)`` then ``TopKLogitsWarper(top_k, min_tokens_to_keep)``, on CPU
    scores ``(rows, vocabulary)``; filtered scores are ``-inf``."""

    def __init__(self, top_p: float, top_k: int, min_tokens_to_keep: int) -> None:
        self.top_p, self.top_k, self.min_tokens_to_keep = top_p, max(top_k, min_tokens_to_keep), min_tokens_to_keep

    def __call__(self, scores: torch.Tensor) -> torch.Tensor:
        vocabulary = scores.size(-1)
        ascending = torch.from_numpy(np.sort(scores.detach().numpy(), axis=-1))
        cumulative = ascending.softmax(dim=-1).cumsum(dim=-1)  # as transformers: the same values, the same ops
        removed = cumulative <= (1 - self.top_p)
        removed[..., -self.min_tokens_to_keep :] = False
        first_kept = removed.sum(dim=-1, keepdim=True)  # a prefix of the sorted positions
        cut = first_kept.clamp(min=vocabulary - min(self.top_k, vocabulary))
        return scores.masked_fill(scores < ascending.gather(-1, cut), -float("inf"))


def fast_filter(warpers: list[Any]) -> TopPTopK | None:
    """The filter the ``warpers`` make where they are ChatTTS's pair (top-p then top-k, filtering to ``-inf``), else
    ``None`` (then the warpers run themselves)."""
    if len(warpers) != 2:
        return None
    top_p, top_k = warpers
    if not isinstance(top_p, TopPLogitsWarper) or not isinstance(top_k, TopKLogitsWarper):
        return None
    if top_p.filter_value != -float("inf") or top_k.filter_value != -float("inf"):
        return None
    if top_p.min_tokens_to_keep != top_k.min_tokens_to_keep:
        return None
    return TopPTopK(top_p.top_p, top_k.top_k, top_p.min_tokens_to_keep)
