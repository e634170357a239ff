"""The rows of the token loop's batch (``engines/chattts/generation.py``): each sequence's prompt, positions,
attention mask, sampling state and KV cache, and how rows leave, merge and advance.

Every row of the running batch keeps its own positions; rows are aligned on the right of one KV cache, whose columns
left of a row's first token are padding hidden by the attention mask. A sequence whose prompt is complete is merged
into the running rows (:meth:`Rows.absorb`), the narrower side padded on the left; a row that ends leaves, and so do
the padding columns no row needs any more (:meth:`Rows.keep`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F  # noqa: N812

from engines.chattts import kv_cache

if TYPE_CHECKING:
    from collections.abc import Sequence

    from engines.base import CancelToken
    from engines.chattts.prefix_cache import LayerStates

__all__ = ["REPETITION_WINDOW", "CodeRequest", "Rows", "StepEvent", "cache_tensors", "set_cache_tensors"]

REPETITION_WINDOW = 16
"""Tokens of each sequence's history that ChatTTS's repetition penalty looks at (``gen_logits``'s past window)."""


@dataclass(frozen=True, slots=True)
class CodeRequest:
    """One sequence of a batch."""

    key: int
    token_ids: Sequence[int]
    """The prompt's text, ``[Stts][spk_emb][speed_N]text[Ptts]`` (or, for a voice from a sample,
    ``[Stts][empty_spk]transcript[speed_N]text[Ptts]``), as token ids."""
    speaker: torch.Tensor | None
    """The speaker embedding written at the ``[spk_emb]`` position."""
    seed: int
    max_new_token: int
    min_new_token: int
    cancel: CancelToken
    prompt_codes: torch.Tensor | None = None
    """A voice sample's audio codes ``(frames, num_vq)``, after the text: the prompt ends with the sample's audio, and
    generation goes on from it, as ChatTTS's ``spk_smp`` does (``Tokenizer.encode(prompt=...)``)."""
    shared_prefix: int = 0
    """How many of the first ``token_ids`` every prompt of this voice starts with (a sample voice's
    ``[Stts][empty_spk]transcript[speed_N]``): with a prefix cache, their keys and values are computed once and
    copied into the later prompts' caches (``engines/chattts/prefix_cache.py``); 0: none."""
    repeatable: bool = False
    """Its hidden states must not depend on any other sequence (a seeded request's audio repeats byte for byte): it
    runs in a batch of its own (``engines/chattts/batches.py``)."""

    @property
    def length(self) -> int:
        """The prompt's positions: its text tokens, then its sample's frames."""
        return len(self.token_ids) + (len(self.prompt_codes) if self.prompt_codes is not None else 0)


#: ``(key, hidden)`` for a new audio token's hidden state, ``(key, None)`` when the sequence ended.
StepEvent = tuple[int, "torch.Tensor | None"]


def cache_tensors(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Every layer's ``(keys, values)``, each ``(batch, heads, columns, head_dim)``."""
    if hasattr(cache, "layers"):  # transformers >= 4.56
        return [(layer.keys, layer.values) for layer in cache.layers]
    return list(zip(cache.key_cache, cache.value_cache, strict=True))


def set_cache_tensors(cache: Any, tensors: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    if hasattr(cache, "layers"):
        for layer, (keys, values) in zip(cache.layers, tensors, strict=True):
            layer.keys, layer.values = keys, values
    else:
        cache.key_cache[:] = [keys for keys, _ in tensors]
        cache.value_cache[:] = [values for _, values in tensors]


def _pad_left(tensor: torch.Tensor, columns: int, dim: int) -> torch.Tensor:
    if columns == 0:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = columns
    return torch.cat([tensor.new_zeros(shape), tensor], dim=dim)


class Rows:
    """The sequences of one batch, each waiting for its next forward pass: the KV cache holds everything before
    ``inputs``; ``mask`` covers the cache's columns and then ``inputs``."""

    def __init__(self, chat: Any, requests: Sequence[CodeRequest]) -> None:
        self.requests = list(requests)
        self.generators = [torch.Generator().manual_seed(r.seed) for r in requests]
        self.steps = [0] * len(requests)
        """Tokens sampled so far, per row."""
        device = chat.device_gpt
        width = max(r.length for r in requests)
        ids = torch.zeros(len(requests), width, dtype=torch.long)
        self.mask = torch.zeros(len(requests), width, dtype=torch.long, device=device)
        for row, request in enumerate(requests):  # left padding, as ChatTTS's tokenizer does
            start = width - request.length
            ids[row, start : start + len(request.token_ids)] = torch.tensor(list(request.token_ids), dtype=torch.long)
            self.mask[row, start:] = 1
        self.positions = (self.mask.cumsum(-1) - 1).clamp(min=0)
        self.inputs = self._prompt_embeds(chat, ids.to(chat.device), requests)
        num_vq = int(chat.config.gpt.num_vq)
        self.history = torch.zeros(len(requests), REPETITION_WINDOW, num_vq, dtype=torch.long, device=chat.device)
        """The last tokens of each row, right-aligned; only the last ``min(steps, REPETITION_WINDOW)`` are real."""
        self.cache = kv_cache.growing_cache(chat.gpt.gpt)
        self.capture: tuple[int, ...] | None = None
        """The prefix whose layer states go into the prefix cache once prefilled (a single row's prompt)."""

    def fill_prefix(self, states: LayerStates) -> None:
        """Take a single row's first columns' keys and values from ``states`` (copied: the cache writes its own
        buffers) instead of prefilling them."""
        for index, (keys, values) in enumerate(states):
            self.cache.update(keys.clone(), values.clone(), index)
        self.consume(states[0][0].size(2))

    def prefix_states(self, columns: int) -> LayerStates:
        """A copy of a single row's first ``columns`` keys and values, every layer (no padding before them)."""
        return [(k[:, :, :columns].clone(), v[:, :, :columns].clone()) for k, v in cache_tensors(self.cache)]

    @staticmethod
    def _prompt_embeds(chat: Any, ids: torch.Tensor, requests: Sequence[CodeRequest]) -> torch.Tensor:
        """Text embeddings, the speaker embedding at ``[spk_emb]``, and a sample's codes embedded as audio tokens
        are (the sum over the ``num_vq`` code embeddings, as ChatTTS's ``Embed`` does for non-text positions)."""
        embeds: torch.Tensor = chat.embed.emb_text(ids)
        spk_id = chat.tokenizer.spk_emb_ids
        for row, request in enumerate(requests):
            if request.speaker is not None:
                vector = F.normalize(request.speaker.float(), p=2.0, dim=0, eps=1e-12).to(embeds)
                embeds[row, ids[row] == spk_id] = vector
            if request.prompt_codes is not None:
                codes = request.prompt_codes.to(ids.device)
                audio = torch.stack([chat.embed.emb_code[q](codes[:, q]) for q in range(codes.size(1))], 2).sum(2)
                embeds[row, embeds.size(1) - len(codes) :] = audio.to(embeds.dtype)
        return embeds

    def __len__(self) -> int:
        return len(self.requests)

    def keep(self, rows: list[int]) -> None:
        """Drop every other row, then the padding columns no remaining row needs."""
        index = torch.tensor(rows, dtype=torch.long, device=self.mask.device)
        self.cache.batch_select_indices(index)
        self.requests = [self.requests[i] for i in rows]
        self.generators = [self.generators[i] for i in rows]
        self.steps = [self.steps[i] for i in rows]
        self.mask, self.positions, self.inputs = self.mask[index], self.positions[index], self.inputs[index]
        self.history = self.history[index.to(self.history.device)]
        self._trim_padding()

    def _trim_padding(self) -> None:
        # Rows are right-aligned, so the columns no row attends to are a prefix; the long sequence that needed them
        # has left, and attending to them would only cost time.
        unused = int(self.mask.any(0).long().argmax())
        if unused:
            self.mask = self.mask[:, unused:]
            tensors = cache_tensors(self.cache)
            set_cache_tensors(self.cache, [(k[:, :, unused:], v[:, :, unused:]) for k, v in tensors])

    @property
    def cached_columns(self) -> int:
        """Columns of the KV cache (the mask's columns before ``inputs``)."""
        return self.mask.size(1) - self.inputs.size(1)

    def consume(self, columns: int) -> None:
        """The first ``columns`` of ``inputs`` went through a forward pass: the cache holds them now."""
        self.inputs, self.positions = self.inputs[:, columns:], self.positions[:, columns:]

    def advance(self, chat: Any, tokens: torch.Tensor) -> None:
        """Make the sampled ``tokens`` (one per row, each ``num_vq`` codes) the next inputs (all inputs consumed)."""
        num_vq = int(chat.config.gpt.num_vq)
        self.history = torch.cat([self.history[:, 1:], tokens.unsqueeze(1)], dim=1)
        self.steps = [steps + 1 for steps in self.steps]
        self.inputs = torch.stack([chat.embed.emb_code[q](tokens[:, q]) for q in range(num_vq)], 2).sum(2).unsqueeze(1)
        self.positions = self.mask.sum(1, keepdim=True)  # each row's real tokens so far: the new one's position
        ones = torch.ones(len(self), 1, dtype=self.mask.dtype, device=self.mask.device)
        self.mask = torch.cat([self.mask, ones], dim=1)

    def attention_mask(self, columns: int) -> torch.Tensor:
        """Which keys each of the next ``columns`` inputs attends to: ``(rows, 1, columns, keys)``, True to attend.

        The keys are the cache's columns then those inputs: a row's own real tokens up to the query's column."""
        cached = self.cached_columns
        keys = self.mask[:, : cached + columns].bool()[:, None, None, :]
        if columns == 1:
            return keys
        key_columns = torch.arange(cached + columns, device=keys.device)
        query_columns = cached + torch.arange(columns, device=keys.device)
        return keys & (key_columns[None, :] <= query_columns[:, None])

    def absorb(self, other: Rows) -> None:
        """Append ``other``'s rows (both sides waiting for a one-token step), aligning both caches on the right."""
        width = max(self.mask.size(1), other.mask.size(1))
        mine, theirs = width - self.mask.size(1), width - other.mask.size(1)
        self.mask = torch.cat([_pad_left(self.mask, mine, 1), _pad_left(other.mask, theirs, 1)])
        merged = [
            (torch.cat([_pad_left(k, mine, 2), _pad_left(ok, theirs, 2)]),
             torch.cat([_pad_left(v, mine, 2), _pad_left(ov, theirs, 2)]))
            for (k, v), (ok, ov) in zip(cache_tensors(self.cache), cache_tensors(other.cache), strict=True)
        ]  # fmt: skip
        set_cache_tensors(self.cache, merged)
        self.requests += other.requests
        self.generators += other.generators
        self.steps += other.steps
        self.positions = torch.cat([self.positions, other.positions])
        self.inputs = torch.cat([self.inputs, other.inputs])
        self.history = torch.cat([self.history, other.history])
