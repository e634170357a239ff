# ruff: noqa: PLC0415 - torch, transformers and ChatTTS are imported lazily: the server process never loads them
"""The token loop: batched ChatTTS code generation with per-sequence seeds, ends and cancellation.

Written here instead of calling ``GPT.generate`` because the gateway needs what it does not offer: a cancel check
per token and per sequence (``Chat.interrupt`` stops every call on the instance), each sequence's own length (the
batch output of ``infer`` loses it), a generator per sequence (so that a seeded request samples the same tokens
whatever else shares its batch), and finished or cancelled sequences leaving the batch at once. It runs ChatTTS's
own modules (Llama backbone, ``Embed`` heads, ChatTTS's logits processors) step by step.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F  # noqa: N812
from torch.nn.utils import parametrize

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from engines.base import CancelToken

__all__ = ["CodeRequest", "Sampling", "StepEvent", "generate_codes"]


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


def _new_cache(backbone: Any) -> Any:
    from transformers import DynamicCache

    try:
        return DynamicCache(config=backbone.config)
    except TypeError:  # transformers 4.x
        return DynamicCache()


class _Batch:
    """The mutable state of the sequences still running."""

    def __init__(self, chat: Any, requests: Sequence[CodeRequest]) -> None:
        self.requests = list(requests)
        self.generators = [torch.Generator().manual_seed(r.seed) for r in requests]
        self.steps = 0
        device = chat.device_gpt
        width = max(len(r.token_ids) for r in requests)
        ids = torch.zeros(len(requests), width, dtype=torch.long)
        self.mask = torch.zeros(len(requests), width, dtype=torch.long, device=device)
        for row, request in enumerate(requests):  # left padding, as ChatTTS's tokenizer does
            ids[row, width - len(request.token_ids) :] = torch.tensor(list(request.token_ids), dtype=torch.long)
            self.mask[row, width - len(request.token_ids) :] = 1
        self.positions = (self.mask.cumsum(-1) - 1).clamp(min=0)
        self.embeds = self._prompt_embeds(chat, ids.to(chat.device), requests)
        num_vq = int(chat.config.gpt.num_vq)
        self.history = torch.zeros(len(requests), 0, num_vq, dtype=torch.long, device=chat.device)

    @staticmethod
    def _prompt_embeds(chat: Any, ids: torch.Tensor, requests: Sequence[CodeRequest]) -> torch.Tensor:
        embeds: torch.Tensor = chat.embed.emb_text(ids)
        spk_id = chat.tokenizer.spk_emb_ids
        for row, request in enumerate(requests):
            if request.speaker is not None:
                vector = F.normalize(request.speaker.float(), p=2.0, dim=0, eps=1e-12).to(embeds)
                embeds[row, ids[row] == spk_id] = vector
        return embeds

    def keep(self, rows: list[int], cache: Any) -> None:
        index = torch.tensor(rows, dtype=torch.long)
        cache.batch_select_indices(index.to(self.mask.device))
        self.requests = [self.requests[i] for i in rows]
        self.generators = [self.generators[i] for i in rows]
        self.mask, self.positions = self.mask[index.to(self.mask.device)], self.positions[index.to(self.mask.device)]
        self.history = self.history[index.to(self.history.device)]


@torch.inference_mode()
def generate_codes(chat: Any, requests: Sequence[CodeRequest], sampling: Sampling) -> Iterator[list[StepEvent]]:
    """Run the sequences as one batch; yield, per step, each running sequence's new hidden state or its end.

    A sequence ends at its EOS token, at its ``max_new_token``, or within one step of its ``cancel`` being set; it
    then leaves the batch (its rows of the KV cache are dropped) and the others go on unchanged.
    """
    from ChatTTS.model import gen_logits

    backbone = chat.gpt.gpt
    num_vq = int(chat.config.gpt.num_vq)
    eos = int(chat.config.gpt.num_audio_tokens) - 1
    warpers, processors = gen_logits(eos, sampling.top_p, sampling.top_k, sampling.repetition_penalty)
    batch = _Batch(chat, requests)
    cache, keyword = _new_cache(backbone), _cache_keyword(backbone)
    inputs = batch.embeds
    while batch.requests:
        outputs = backbone(
            inputs_embeds=inputs.to(chat.device_gpt, dtype=backbone.dtype), attention_mask=batch.mask,
            position_ids=batch.positions, use_cache=True, **{keyword: cache},
        )  # fmt: skip
        hidden = outputs.last_hidden_state[:, -1].to(chat.device, dtype=torch.float32)
        tokens = _sample(chat, hidden, batch, sampling, (*processors, *warpers), eos)
        events, rows = _step_events(batch, hidden, tokens, eos)
        yield events
        if len(rows) < len(batch.requests):
            batch.keep(rows, cache)
            tokens = tokens[torch.tensor(rows, dtype=torch.long, device=tokens.device)]
        if not batch.requests:
            return
        batch.history = torch.cat([batch.history, tokens.unsqueeze(1)], dim=1)
        inputs = torch.stack([chat.embed.emb_code[q](tokens[:, q]) for q in range(num_vq)], 2).sum(2).unsqueeze(1)
        ones = torch.ones(len(rows), 1, dtype=batch.mask.dtype, device=batch.mask.device)
        batch.mask = torch.cat([batch.mask, ones], dim=1)
        batch.positions = batch.positions[:, -1:] + 1
        batch.steps += 1


def _sample(  # noqa: PLR0917
    chat: Any, hidden: torch.Tensor, batch: _Batch, sampling: Sampling, processors: Sequence[Any], eos: int
) -> torch.Tensor:
    num_vq = int(chat.config.gpt.num_vq)
    with parametrize.cached():
        logits = torch.stack([chat.embed.head_code[q](hidden) for q in range(num_vq)], 1)  # (B, vq, tokens)
    logits = logits.reshape(-1, logits.size(-1)).float() / sampling.temperature
    generated = batch.history.permute(0, 2, 1).reshape(len(batch.requests) * num_vq, batch.history.size(1))
    for processor in processors:
        logits = processor(generated, logits)
    for row, request in enumerate(batch.requests):
        if batch.steps < max(1, request.min_new_token):  # never an empty sequence
            logits[row * num_vq : (row + 1) * num_vq, eos] = -torch.inf
    probabilities = F.softmax(logits, dim=-1).view(len(batch.requests), num_vq, -1)
    rows = [
        torch.multinomial(probabilities[row], 1, generator=generator).squeeze(1)
        for row, generator in enumerate(batch.generators)
    ]
    return torch.stack(rows)  # (B, vq)


def _step_events(
    batch: _Batch, hidden: torch.Tensor, tokens: torch.Tensor, eos: int
) -> tuple[list[StepEvent], list[int]]:
    events: list[StepEvent] = []
    rows: list[int] = []
    finished = tokens.eq(eos).any(1).tolist()
    for row, request in enumerate(batch.requests):
        if request.cancel.is_set():
            events.append((request.key, None))
            continue
        if finished[row]:
            events.append((request.key, None))
            continue
        events.append((request.key, hidden[row]))
        if batch.steps + 1 >= request.max_new_token:
            events.append((request.key, None))
        else:
            rows.append(row)
    return events, rows
