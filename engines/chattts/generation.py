# ruff: noqa: PLC0415 - torch, transformers and ChatTTS are imported lazily: the server process never loads them
"""The token loop: batched ChatTTS code generation with per-sequence seeds, ends, cancellation and late joiners.

Written here instead of calling ``GPT.generate`` because the gateway needs what it does not offer: a cancel check
per token and per sequence (``Chat.interrupt`` stops every call on the instance), each sequence's own length (the
batch output of ``infer`` loses it), a generator per sequence (so that a seeded request samples the same tokens
whatever else shares its batch), finished or cancelled sequences leaving the batch at once, and new sequences
joining a batch that is already generating (continuous batching). It runs ChatTTS's own modules (the Llama
backbone's layers, ``Embed`` heads, ChatTTS's logits processors) step by step.

Every row of the running batch keeps its own positions, aligned on the right of one KV cache
(``engines/chattts/rows.py``). A new sequence's prompt is prefilled in the same forward pass as the running rows'
next decode step: the pass packs the running rows' one new token each and the waiting prompts' tokens (whole by
default; at most ``prefill_chunk_tokens`` per pass when set) into one product with every weight matrix, then attends
per sequence over its own cache with its own positions and mask. The weights are read once for both, where a prefill
on its own stopped every running sequence for its duration (what a join saves: ``bench/chattts_join.py``, in
docs/engineering/benchmark-history.md, "ChatTTS batching"). Where the decode graph runs the steps
(``onnx_step.py``), the graph steps the running rows of such a pass and torch prefills only its prompts: a running
row's step is then the same computation as all its others whatever the prefill's number type, so that a seeded
sequence's tokens never depend on who joins, and the pass took as long as one torch pass over both (18-55 prompt
positions beside 3 rows, full size: within 6 ms either way). A sequence whose prompt is complete samples its first
token and its cache rows are merged into the running cache, the narrower side padded on the left.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F  # noqa: N812
from torch.nn.utils import parametrize

from engines.chattts import kv_cache
from engines.chattts.nucleus import fast_filter
from engines.chattts.rows import REPETITION_WINDOW, CodeRequest, Rows, StepEvent, cache_tensors
from engines.chattts.small_batch import plain_products
from engines.chattts.threads import torch_threads

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from engines.chattts.onnx_step import DecodeGraph
    from engines.chattts.prefix_cache import PrefixCache

__all__ = ["CodeBatch", "CodeRequest", "Sampling", "StepEvent", "generate_codes", "stacked_audio_heads"]

_LARGE_PREFILL_TOKENS = 1 << 30
"""A prefill budget no prompt reaches: every waiting prompt whole in the next pass."""


@dataclass(frozen=True, slots=True)
class Sampling:
    temperature: float = 0.3
    top_p: float = 0.7
    top_k: int = 20
    repetition_penalty: float = 1.05


def _by_row(states: torch.Tensor, rows: int, columns: int) -> torch.Tensor:
    """``(1, heads, rows * columns, head_dim)`` packed states as ``(rows, heads, columns, head_dim)``."""
    return states.view(states.size(1), rows, columns, -1).transpose(0, 1)


class CodeBatch:
    """A running batch of sequences: new ones join (:meth:`join`) and are prefilled along with the running ones'
    steps; ended ones leave by themselves.

    Each sequence ends at its EOS token, at its ``max_new_token``, or within one step of its ``cancel`` being set; it
    then leaves the batch (its rows of the KV cache are dropped) and the others go on unchanged.

    ``prefill_chunk_tokens`` bounds the prompt tokens a pass prefills beside running sequences (``None``: every
    waiting prompt whole in the next pass). With nothing running, the first waiting prompt is prefilled whole at once
    however long it is: there is no decode step then whose weight reads it could share.
    """

    def __init__(
        self,
        chat: Any,
        sampling: Sampling,
        prefill_chunk_tokens: int | None = None,
        graph: DecodeGraph | None = None,
        prefixes: PrefixCache | None = None,
        *,
        heads: torch.Tensor | None = None,
        plain: bool = False,
    ) -> None:
        from ChatTTS.model import gen_logits

        self._chat = chat
        self._sampling = sampling
        self._backbone = chat.gpt.gpt
        self._num_vq = int(chat.config.gpt.num_vq)
        self._eos = int(chat.config.gpt.num_audio_tokens) - 1
        self._temperature = sampling.temperature
        warpers, processors = gen_logits(self._eos, sampling.top_p, sampling.top_k, sampling.repetition_penalty)
        self._warpers: list[Any] = warpers
        self._filter = fast_filter(warpers)
        """The warpers' filter without their sort (``engines/chattts/nucleus.py``), on CPU."""
        self._processors: list[Any] = processors
        self._prefill_budget = prefill_chunk_tokens or _LARGE_PREFILL_TOKENS
        self._heads = stacked_audio_heads(chat) if heads is None else heads
        """The audio heads (:func:`stacked_audio_heads`; ``heads``: another batch's, already stacked)."""
        self._plain = plain
        """Its torch products through ``F.linear`` at any row count (``small_batch.plain_products``): the same at every
        load, for a seeded sequence's batch of its own (``engines/chattts/batches.py``)."""
        self._graph = graph
        """The decode step through ONNX Runtime (``engines/chattts/onnx_step.py``); ``None``: in torch."""
        self._prefixes = prefixes
        """Voice prompts' shared beginnings, prefilled once (``CodeRequest.shared_prefix``); ``None``: every prompt
        prefilled whole."""
        self._rows: Rows | None = None
        self._waiting: list[Rows] = []
        """Sequences whose prompts are not yet wholly prefilled, one ``Rows`` each, first come first."""

    @property
    def size(self) -> int:
        """The sequences still running or waiting for their prefill."""
        return (len(self._rows) if self._rows is not None else 0) + len(self._waiting)

    def join(self, requests: Sequence[CodeRequest]) -> None:
        """Add new sequences: the next steps prefill their prompts and then sample their tokens with the others'."""
        for request in requests:
            rows = Rows(self._chat, [request])
            if self._prefixes is not None and request.shared_prefix:
                key = tuple(request.token_ids[: request.shared_prefix])
                states = self._prefixes.get(key)
                if states is None:
                    rows.capture = key  # kept once this prefill has passed it
                else:
                    rows.fill_prefix(states)
            self._waiting.append(rows)

    @torch.inference_mode()
    def step(self) -> list[StepEvent]:
        """One forward pass: a token for every running sequence, and the next part of the waiting prompts (a
        sequence whose prompt completes gets its first token)."""
        # A pass the decode graph computes leaves torch only small tensors (the rotary, the bias, sampling), too small
        # to share out: on one thread, torch's spinning threads leave ONNX Runtime's cores alone.
        plain = plain_products() if self._plain else contextlib.nullcontext()
        with torch_threads(1 if self._graph is not None and not self._waiting else None), plain:
            return self._step()

    def apart(self) -> CodeBatch:
        """A new, empty batch for one sequence that must not share passes (a seeded one,
        ``engines/chattts/batches.py``): this one's sampling, heads and decode graph, no prefix cache (a cached prefix
        came from other passes), its products through ``F.linear``."""
        return CodeBatch(self._chat, self._sampling, graph=self._graph, heads=self._heads, plain=True)

    def _step(self) -> list[StepEvent]:
        events = self._drop_cancelled_waiting()
        parts = self._parts()
        if not parts:
            return events
        outputs = self._forward(parts)
        for rows, columns in parts:
            rows.consume(columns)
            self._keep_prefix(rows)
        running, completed = self._rows, []
        for (rows, _), (hidden, logits) in zip(parts, outputs, strict=True):
            if rows is not running and rows.inputs.size(1):
                continue  # its prompt goes on in the next pass
            events += self._sample_and_advance(rows, hidden, logits)
            if rows is not running:
                self._waiting.remove(rows)
                completed.append(rows)
        self._rows = running if running is not None and len(running) else None
        for rows in completed:
            if not len(rows):
                continue  # it ended at its first token
            if self._rows is None:
                self._rows = rows
            else:
                self._rows.absorb(rows)
        return events

    def _keep_prefix(self, rows: Rows) -> None:
        """Put a waiting prompt's shared prefix into the prefix cache once its prefill has passed it (causal: what
        follows changed nothing in it)."""
        if rows.capture is None or rows.cached_columns < len(rows.capture):
            return
        assert self._prefixes is not None, "only set with a prefix cache"
        self._prefixes.put(rows.capture, rows.prefix_states(len(rows.capture)))
        rows.capture = None

    def _drop_cancelled_waiting(self) -> list[StepEvent]:
        cancelled = [rows for rows in self._waiting if rows.requests[0].cancel.is_set()]
        for rows in cancelled:
            self._waiting.remove(rows)
        return [(rows.requests[0].key, None) for rows in cancelled]

    def _parts(self) -> list[tuple[Rows, int]]:
        """What the next pass computes: ``(rows, input columns)``, the running rows' one column first, then waiting
        prompts (the first one whole when nothing runs) until the prefill budget is spent."""
        parts: list[tuple[Rows, int]] = []
        budget = self._prefill_budget
        if self._rows is not None:
            parts.append((self._rows, 1))
        for rows in self._waiting:
            left = rows.inputs.size(1)
            columns = left if not parts else min(left, budget)
            if columns <= 0:
                break
            parts.append((rows, columns))
            budget -= columns
            if columns < left:
                break  # the rest of this prompt comes first in the next pass
        return parts

    def _sample_and_advance(self, rows: Rows, hidden: torch.Tensor, logits: torch.Tensor | None) -> list[StepEvent]:
        """Sample each row's token from its last hidden state (or the heads' ``logits`` of it, where the step computed
        them); drop the rows that ended; make the tokens the inputs."""
        hidden = hidden.to(self._chat.device, dtype=torch.float32)
        tokens = self._sample(hidden, rows, logits)
        events, kept = self._events(rows, hidden, tokens)
        if len(kept) < len(rows):
            rows.keep(kept)
            tokens = tokens[torch.tensor(kept, dtype=torch.long, device=tokens.device)]
        if len(rows):
            rows.advance(self._chat, tokens)
        return events

    def _forward(self, parts: list[tuple[Rows, int]]) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
        """The backbone over the next input columns of each part; returns each part's last hidden state per row
        ``(rows, hidden)``, and the audio heads' logits of it where the decode graph computed them (the running rows'
        step, prompts prefilled beside it or not: see the module's docstring)."""
        if self._graph is None or parts[0] != (self._rows, 1):
            return [(hidden, None) for hidden in self._torch_forward(parts)]
        stepped = self._graph_step(parts[0][0])
        prefilled = self._torch_forward(parts[1:]) if len(parts) > 1 else []
        return [stepped, *((hidden, None) for hidden in prefilled)]

    def _graph_step(self, rows: Rows) -> tuple[torch.Tensor, torch.Tensor]:
        """A decode step of the running rows through the decode graph: their new key and value columns go into their
        cache as the torch pass would put them there."""
        assert self._graph is not None
        hidden = rows.inputs[:, 0].to(torch.float32)
        cos, sin = self._backbone.rotary_emb(hidden.unsqueeze(1), rows.positions)  # each (rows, 1, head_dim)
        cache, bias = _graph_cache(rows)
        outputs = self._graph.step(hidden, cos[:, 0], sin[:, 0], bias, cache)
        for index, (keys, values) in enumerate(outputs.columns):
            rows.cache.update(keys, values, index)
        return outputs.hidden, outputs.logits

    def _torch_forward(self, parts: list[tuple[Rows, int]]) -> list[torch.Tensor]:
        """The backbone over the next input columns of each part, packed into one batch of tokens for the weight
        products; returns each part's last hidden state per row ``(rows, hidden)``."""
        backbone = self._backbone
        sizes = [len(rows) * columns for rows, columns in parts]
        hidden = torch.cat([rows.inputs[:, :columns].flatten(0, 1) for rows, columns in parts])
        hidden = hidden.to(self._chat.device_gpt, dtype=backbone.dtype)
        positions = torch.cat([rows.positions[:, :columns].flatten() for rows, columns in parts]).unsqueeze(0)
        packed = _Packed(
            parts, sizes, [rows.attention_mask(columns).to(hidden.device) for rows, columns in parts],
            backbone.rotary_emb(hidden.unsqueeze(0), positions.to(hidden.device)),
        )  # fmt: skip
        for index, layer in enumerate(backbone.layers):
            hidden = _decoder_layer(layer, index, hidden, packed)
        hidden = backbone.norm(hidden)
        return [
            part.view(len(rows), columns, -1)[:, -1]
            for (rows, columns), part in zip(parts, hidden.split(sizes), strict=True)
        ]

    def _sample(self, hidden: torch.Tensor, rows: Rows, logits: torch.Tensor | None = None) -> torch.Tensor:
        num_vq = self._num_vq
        if logits is None:
            logits = F.linear(hidden, self._heads)
        logits = logits.view(len(hidden), num_vq, -1)  # (B, vq, V)
        logits = self._penalise_repetition(logits.reshape(-1, logits.size(-1)).float() / self._temperature, rows)
        if self._filter is not None and logits.device.type == "cpu":
            logits = self._filter(logits)
        else:
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

    def _penalise_repetition(self, logits: torch.Tensor, rows: Rows) -> torch.Tensor:
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

    def _events(self, rows: Rows, hidden: torch.Tensor, tokens: torch.Tensor) -> tuple[list[StepEvent], list[int]]:
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


def _graph_cache(rows: Rows) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor]:
    """The cache a graph step reads, and its additive attention bias ``(rows, columns + 1)``: the cache's whole
    buffers where it grows in place (their unused columns masked like padding: attention over keys does not care
    where they lie), so that no step copies it; else its tensors."""
    lowest = torch.finfo(torch.float32).min
    buffers = kv_cache.whole_buffers(rows.cache)
    if buffers is None:
        return cache_tensors(rows.cache), torch.zeros(rows.mask.shape).masked_fill_(rows.mask == 0, lowest)
    cache, used = buffers
    assert used == rows.cached_columns, "the cache holds every column before the new one"
    bias = torch.full((len(rows), cache[0][0].size(2) + 1), lowest)
    bias[:, :used].masked_fill_(rows.mask[:, :used] != 0, 0.0)
    bias[:, -1] = 0.0  # the new token's own column
    return cache, bias


@dataclass(frozen=True, slots=True)
class _Packed:
    """One forward pass's tokens, packed: which rows and how many input columns of each part, in order."""

    parts: list[tuple[Rows, int]]
    sizes: list[int]
    """Tokens of each part (its rows times its columns)."""
    masks: list[torch.Tensor]
    """Each part's attention mask (:meth:`Rows.attention_mask`)."""
    rotary: tuple[torch.Tensor, torch.Tensor]
    """The rotary embedding's ``(cos, sin)`` at every packed token's own position."""


def _decoder_layer(layer: Any, index: int, hidden: torch.Tensor, packed: _Packed) -> torch.Tensor:
    """One decoder layer as transformers' ``LlamaDecoderLayer`` computes it, over packed tokens ``(tokens, hidden)``:
    the projections and the MLP for all of them at once, attention per part over that part's own cache."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    attention = layer.self_attn
    normed = layer.input_layernorm(hidden)
    shape = (1, hidden.size(0), -1, attention.head_dim)
    queries = attention.q_proj(normed).view(shape).transpose(1, 2)  # (1, heads, tokens, head_dim)
    keys = attention.k_proj(normed).view(shape).transpose(1, 2)
    values = attention.v_proj(normed).view(shape).transpose(1, 2)
    queries, keys = apply_rotary_pos_emb(queries, keys, *packed.rotary)
    outputs = [
        _attend(attention, index, part, mask, states)
        for part, mask, *states in zip(
            packed.parts, packed.masks, queries.split(packed.sizes, 2), keys.split(packed.sizes, 2),
            values.split(packed.sizes, 2), strict=True,
        )
    ]  # fmt: skip
    hidden = hidden + attention.o_proj(torch.cat(outputs))
    mlp_output: torch.Tensor = layer.mlp(layer.post_attention_layernorm(hidden))
    return hidden + mlp_output


def _attend(
    attention: Any, index: int, part: tuple[Rows, int], mask: torch.Tensor, states: list[torch.Tensor]
) -> torch.Tensor:
    """One part's attention in layer ``index``: its new keys and values go into its cache, its queries attend over
    that cache; returns ``(rows * columns, heads * head_dim)``."""
    rows, columns = part
    queries, keys, values = (_by_row(packed, len(rows), columns) for packed in states)
    keys, values = rows.cache.update(keys, values, index)
    attended = F.scaled_dot_product_attention(
        queries, keys, values, attn_mask=mask, scale=attention.scaling, enable_gqa=keys.size(1) != queries.size(1)
    )
    return attended.transpose(1, 2).reshape(len(rows) * columns, -1)


@torch.inference_mode()
def stacked_audio_heads(chat: Any) -> torch.Tensor:
    """The ``num_vq`` audio heads' weights stacked ``(num_vq * num_audio_tokens, hidden)``, so that a step computes
    their logits in one product. The heads are weight-normed on every access: computed once, here."""
    with parametrize.cached():
        return torch.cat([head.weight for head in chat.embed.head_code]).to(chat.device, torch.float32)


def generate_codes(chat: Any, requests: Sequence[CodeRequest], sampling: Sampling) -> Iterator[list[StepEvent]]:
    """Run the sequences as one batch, no one joining; yield, per step, each running sequence's new hidden state or
    its end (see :class:`CodeBatch`)."""
    batch = CodeBatch(chat, sampling)
    batch.join(requests)
    while batch.size:
        yield batch.step()
