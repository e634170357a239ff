"""The KV of voice prompts' shared beginnings, computed once per worker and reused: a bounded LRU by bytes.

A voice from a sample prompts every sentence with ``[Stts][empty_spk]`` + transcript + ``[speed_N]`` before the
sentence's own text (ChatTTS's ``decorate_code_prompts``). Those first positions are the same for every sentence the
voice speaks at that speed, and attention is causal, so their keys and values are too: the token loop
(``engines/chattts/generation.py``) keeps them here after the first prefill and copies them into the cache of every
later prompt that starts with them, which then prefills only the rest.

What cannot be kept is the sample's audio codes: ChatTTS puts them after the text (``Tokenizer.encode(prompt=...)``
appends them; the model goes on from the recording, saying the new text), so their keys and values depend on every
sentence's text. Keeping them would need another prompt layout than the one ChatTTS was trained with.

The key is the prefix's token ids: they alone decide its keys and values (a sample voice's prefix has no speaker
embedding), so two voices with the same transcript share an entry, exactly.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["LayerStates", "PrefixCache"]

#: Every layer's ``(keys, values)``, each ``(1, kv_heads, prefix_tokens, head_dim)``.
LayerStates = list[tuple["torch.Tensor", "torch.Tensor"]]


class PrefixCache:
    """Prompt prefixes' layer states by their token ids, least recently used first out beyond ``max_bytes``.

    One per worker (the engine's): the token loop runs on one thread, so no lock.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[tuple[int, ...], tuple[LayerStates, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: tuple[int, ...]) -> LayerStates | None:
        """The states kept for ``key`` (never to be written to: copy them), or ``None``."""
        entry = self._entries.get(key)
        if entry is None:
            self.misses += 1
            return None
        self.hits += 1
        self._entries.move_to_end(key)
        return entry[0]

    def put(self, key: tuple[int, ...], states: LayerStates) -> None:
        """Keep ``states`` (owned by the cache from now on) for ``key``; drop the least recently used entries until
        they fit. An entry larger than the whole bound is not kept."""
        size = sum(keys.nbytes + values.nbytes for keys, values in states)
        if size > self.max_bytes or key in self._entries:
            return
        self._entries[key] = (states, size)
        self.bytes += size
        while self.bytes > self.max_bytes:
            _, (_, dropped) = self._entries.popitem(last=False)
            self.bytes -= dropped
