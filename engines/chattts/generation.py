# ruff: noqa: PLC0415 - torch, transformers and ChatTTS are imported lazily: the server process never loads them
"""The token loop: batched ChatTTS code generation with per-sequence seeds, ends, cancellation and late joiners.

Written here instead of calling ``GPT.generate`` because the gateway needs what it does not offer: a cancel check
per token and per sequence (``Chat.interrupt`` stops every call on the instance), each sequence's own length (the
batch output of ``infer`` loses it), a generator per sequence (so that a seeded request samples the same tokens
whatever else shares its batch), finished or cancelled sequences leaving the batch at once, and new sequences
joining a batch that is already generating (continuous batching). It runs ChatTTS's own modules (Llama backbone,
``Embed`` heads, ChatTTS's logits processors) step by step.

Every row of the batch keeps its own positions; rows are aligned on the right of one KV cache, whose columns left of
a row's first token are padding hidden by the attention mask. A group of new sequences is prefilled on its own
(left padding, as ChatTTS's tokenizer pads) and its cache rows are then merged into the running cache, the narrower
side padded on the left.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F  # noqa: N812
from torch.nn.utils import parametrize

from engines.chattts import kv_cache

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from engines.base import CancelToken

__all__ = ["CodeBatch", "CodeRequest", "Sampling", "StepEvent", "generate_codes"]

REPETITION_WINDOW = 16
"""Tokens of each sequence's history that ChatTTS's repetition penalty looks at (``gen_logits``'s past window)."""


@dataclass(frozen=True, slots=True)
class Sampling:
    temperature: float = 0.3
    top_p: float = 0.7
    top_k: int = 20
    repetition_penalty: float = 1.05


@dataclass(frozen=True, slots=True)
class CodeRequest:
    """One sequence of a batch."""

    key: int
    token_ids: Sequence[int]
    """The prompt, ``[Stts][spk_emb][speed_N]text[Ptts]``, as token ids."""
    speaker: torch.Tensor | None
    """The speaker embedding written at the ``[spk_emb]`` position."""
    seed: int
    max_new_token: int
    min_new_token: int
    cancel: CancelToken


#: ``(key, hidden)`` for a new audio token's hidden state, ``(key, None)`` when the sequence ended.
StepEvent = tuple[int, "torch.Tensor | None"]


def _cache_keyword(backbone: Any) -> str:
    # transformers 5.x names the argument ``cache`` (``past_key_values`` is deprecated), 4.x ``past_key_values``.
    return "cache" if "cache" in inspect.signature(backbone.forward).parameters else "past_key_values"


def _cache_tensors(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Every layer's ``(keys, values)``, each ``(batch, heads, columns, head_dim)``."""
    if hasattr(cache, "layers"):  # transformers >= 4.56
        return [(layer.keys, layer.values) for layer in cache.layers]
    return list(zip(cache.key_cache, cache.value_cache, strict=True))


def _set_cache_tensors(cache: Any, tensors: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
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


class _Rows:
    """The sequences of one batch, each waiting for its next forward pass: the KV cache holds everything before
    ``inputs``; ``mask`` covers the cache's columns and then ``inputs``."""

    def __init__(self, chat: Any, requests: Sequence[CodeRequest]) -> None:
        self.requests = list(requests)
        self.generators = [torch.Generator().manual_seed(r.seed) for r in requests]
        self.steps = [0] * len(requests)
        """Tokens sampled so far, per row."""
        device = chat.device_gpt
        width = max(len(r.token_ids) for r in requests)
        ids = torch.zeros(len(requests), width, dtype=torch.long)
        self.mask = torch.zeros(len(requests), width, dtype=torch.long, device=device)
        for row, request in enumerate(requests):  # left padding, as ChatTTS's tokenizer does
            ids[row, width - len(request.token_ids) :] = torch.tensor(list(request.token_ids), dtype=torch.long)
            self.mask[row, width - len(request.token_ids) :] = 1
        self.positions = (self.mask.cumsum(-1) - 1).clamp(min=0)
        self.inputs = self._prompt_embeds(chat, ids.to(chat.device), requests)
        num_vq = int(chat.config.gpt.num_vq)
        self.history = torch.zeros(len(requests), REPETITION_WINDOW, num_vq, dtype=torch.long, device=chat.device)
        """The last tokens of each row, right-aligned; only the last ``min(steps, REPETITION_WINDOW)`` are real."""
        self.cache = kv_cache.growing_cache(chat.gpt.gpt)

    @staticmethod
    def _prompt_embeds(chat: Any, ids: torch.Tensor, requests: Sequence[CodeRequest]) -> torch.Tensor:
        embeds: torch.Tensor = chat.embed.emb_text(ids)
        spk_id = chat.tokenizer.spk_emb_ids
        for row, request in enumerate(requests):
            if request.speaker is not None:
                vector = F.normalize(request.speaker.float(), p=2.0, dim=0, eps=1e-12).to(embeds)
                embeds[row, ids[row] == spk_id] = vector
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
            tensors = _cache_tensors(self.cache)
            _set_cache_tensors(self.cache, [(k[:, :, unused:], v[:, :, unused:]) for k, v in tensors])

    def advance(self, chat: Any, tokens: torch.Tensor) -> None:
        """Make the sampled ``tokens`` (one per row, each ``num_vq`` codes) the next inputs."""
        num_vq = int(chat.config.gpt.num_vq)
        self.history = torch.cat([self.history[:, 1:], tokens.unsqueeze(1)], dim=1)
        self.steps = [steps + 1 for steps in self.steps]
        self.inputs = torch.stack([chat.embed.emb_code[q](tokens[:, q]) for q in range(num_vq)], 2).sum(2).unsqueeze(1)
        ones = torch.ones(len(self), 1, dtype=self.mask.dtype, device=self.mask.device)
        self.mask = torch.cat([self.mask, ones], dim=1)
        self.positions = self.positions[:, -1:] + 1

    def absorb(self, other: _Rows) -> None:
        """Append ``other``'s rows (both sides waiting for a one-token step), aligning both caches on the right."""
        width = max(self.mask.size(1), other.mask.size(1))
        mine, theirs = width - self.mask.size(1), width - other.mask.size(1)
        self.mask = torch.cat([_pad_left(self.mask, mine, 1), _pad_left(other.mask, theirs, 1)])
        merged = [
            (torch.cat([_pad_left(k, mine, 2), _pad_left(ok, theirs, 2)]),
             torch.cat([_pad_left(v, mine, 2), _pad_left(ov, theirs, 2)]))
            for (k, v), (ok, ov) in zip(_cache_tensors(self.cache), _cache_tensors(other.cache), strict=True)
        ]  # fmt: skip
        _set_cache_tensors(self.cache, merged)
        self.requests += other.requests
        self.generators += other.generators
        self.steps += other.steps
        self.positions = torch.cat([self.positions, other.positions])
        self.inputs = torch.cat([self.inputs, other.inputs])
        self.history = torch.cat([self.history, other.history])


class CodeBatch:
    """A running batch of sequences: new ones join between steps (:meth:`join`), ended ones leave by themselves.

    Each sequence ends at its EOS token, at its ``max_new_token``, or within one step of its ``cancel`` being set; it
    then leaves the batch (its rows of the KV cache are dropped) and the others go on unchanged.
    """

    def __init__(self, chat: Any, sampling: Sampling) -> None:
        from ChatTTS.model import gen_logits

        self._chat = chat
        self._backbone = chat.gpt.gpt
        self._keyword = _cache_keyword(self._backbone)
        self._num_vq = int(chat.config.gpt.num_vq)
        self._eos = int(chat.config.gpt.num_audio_tokens) - 1
        self._temperature = sampling.temperature
        warpers, processors = gen_logits(self._eos, sampling.top_p, sampling.top_k, sampling.repetition_penalty)
        self._warpers: list[Any] = warpers
        self._processors: list[Any] = processors
        self._rows: _Rows | None = None

    @property
    def size(self) -> int:
        """The sequences still running."""
        return len(self._rows) if self._rows is not None else 0

    @torch.inference_mode()
    def join(self, requests: Sequence[CodeRequest]) -> list[StepEvent]:
        """Prefill new sequences as their own batch, sample their first tokens, and merge them into the running batch.

        Returns the new sequences' events; the running ones do not move.
        """
        if not requests:
            return []
        rows = _Rows(self._chat, requests)
        events = self._forward(rows)
        if not len(rows):
            return events
        if self._rows is None:
            self._rows = rows
        else:
            self._rows.absorb(rows)
        return events

    @torch.inference_mode()
    def step(self) -> list[StepEvent]:
        """One token for every running sequence."""
        if self._rows is None:
            return []
        events = self._forward(self._rows)
        if not len(self._rows):
            self._rows = None  # an empty cache cannot be merged into: the next joiners start a fresh one
        return events

    def _forward(self, rows: _Rows) -> list[StepEvent]:
        chat, backbone = self._chat, self._backbone
        outputs = backbone(
            inputs_embeds=rows.inputs.to(chat.device_gpt, dtype=backbone.dtype), attention_mask=rows.mask,
            position_ids=rows.positions, use_cache=True, **{self._keyword: rows.cache},
        )  # fmt: skip
        hidden = outputs.last_hidden_state[:, -1].to(chat.device, dtype=torch.float32)
        tokens = self._sample(hidden, rows)
        events, kept = self._events(rows, hidden, tokens)
        if len(kept) < len(rows):
            rows.keep(kept)
            tokens = tokens[torch.tensor(kept, dtype=torch.long, device=tokens.device)]
        if len(rows):
            rows.advance(chat, tokens)
        return events

    def _sample(self, hidden: torch.Tensor, rows: _Rows) -> torch.Tensor:
        num_vq = self._num_vq
        with parametrize.cached():
            logits = torch.stack([self._chat.embed.head_code[q](hidden) for q in range(num_vq)], 1)  # (B, vq, V)
        logits = self._penalise_repetition(logits.reshape(-1, logits.size(-1)).float() / self._temperature, rows)
        for warper in self._warpers:
            logits = warper(None, logits)
        for row, request in enumerate(rows.requests):
            if rows.steps[row] < max(1, request.min_new_token):  # never an empty sequence
                logits[row * num_vq : (row + 1) * num_vq, self._eos] = -torch.inf
        probabilities = F.softmax(logits, dim=-1).view(len(rows), num_vq, -1)
        sampled = [
            torch.multinomial(probabilities[row], 1, generator=generator).squeeze(1)
            for row, generator in enumerate(rows.generators)
        ]
        return torch.stack(sampled)  # (B, vq)

    def _penalise_repetition(self, logits: torch.Tensor, rows: _Rows) -> torch.Tensor:
        """ChatTTS's processors, each row over its own history: rows that joined late have a shorter one."""
        if not self._processors:
            return logits
        num_vq = self._num_vq
        lengths = [min(steps, REPETITION_WINDOW) for steps in rows.steps]
        if len(set(lengths)) == 1:  # the usual case: no row joined within the last REPETITION_WINDOW steps
            return self._penalise_group(logits, rows.history, lengths[0])
        for length in sorted(set(lengths)):
            group = [row for row, n in enumerate(lengths) if n == length]
            flat = torch.tensor([row * num_vq + q for row in group for q in range(num_vq)], device=logits.device)
            part = self._penalise_group(logits[flat], rows.history[group], length)
            logits = logits.index_copy(0, flat, part)
        return logits

    def _penalise_group(self, logits: torch.Tensor, history: torch.Tensor, length: int) -> torch.Tensor:
        """The processors over the last ``length`` tokens of ``history`` (rows, window, vq); ``logits`` (rows*vq, V)."""
        generated = (
            history[:, REPETITION_WINDOW - length :].permute(0, 2, 1).reshape(len(history) * self._num_vq, length)
        )
        for processor in self._processors:
            logits = processor(generated, logits)
        return logits

    def _events(self, rows: _Rows, hidden: torch.Tensor, tokens: torch.Tensor) -> tuple[list[StepEvent], list[int]]:
        """Each row's event(s) for this step, and the rows that go on."""
        events: list[StepEvent] = []
        kept: list[int] = []
        finished = tokens.eq(self._eos).any(1).tolist()
        for row, request in enumerate(rows.requests):
            if request.cancel.is_set() or finished[row]:
                events.append((request.key, None))
                continue
            events.append((request.key, hidden[row]))
            if rows.steps[row] + 1 >= request.max_new_token:
                events.append((request.key, None))
            else:
                kept.append(row)
        return events, kept


def generate_codes(chat: Any, requests: Sequence[CodeRequest], sampling: Sampling) -> Iterator[list[StepEvent]]:
    """Run the sequences as one batch, no one joining; yield, per step, each running sequence's new hidden state or
    its end (see :class:`CodeBatch`)."""
    batch = CodeBatch(chat, sampling)
    yield batch.join(requests)
    while batch.size:
        yield batch.step()
