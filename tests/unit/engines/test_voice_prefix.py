"""Voice prompts' shared beginnings prefilled once per worker (``engines/chattts/prefix_cache.py``): the bounded LRU
itself, and, on the tiny random-weight assets with fixed seeds, the same tokens and hidden states with the cache as
without it, alone and in a running batch, through both decoders, while a cached prompt prefills only its own part."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from engines.base import CancelFlag, SynthesisRequest
from engines.chattts import ChatTTSEngine
from engines.chattts.generation import CodeBatch, CodeRequest
from engines.chattts.prefix_cache import PrefixCache
from tests.chattts_assets import chattts_engine_options
from tests.unit.engines.test_chattts_samples import RATE, TRANSCRIPT, recording


# ----------------------------------------------------------------- the cache
def states(tokens: int, layers: int = 2) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Layer states of ``tokens`` columns: 2 heads of 4 float32 values, 64 bytes a token per layer."""
    return [(torch.zeros(1, 2, tokens, 4), torch.zeros(1, 2, tokens, 4)) for _ in range(layers)]


def test_the_cache_keeps_entries_within_its_bytes_least_recently_used_out_first() -> None:
    cache = PrefixCache(max_bytes=3 * 640)  # three entries of 5 tokens (2 layers, keys and values: 640 bytes)
    for key in range(3):
        cache.put((key,), states(5))
    assert (len(cache), cache.bytes) == (3, 1920)
    assert cache.get((0,)) is not None  # now the most recently used
    cache.put((3,), states(5))
    assert cache.get((1,)) is None, "the least recently used went"
    assert all(cache.get((key,)) is not None for key in (0, 2, 3))
    assert (len(cache), cache.bytes) == (3, 1920)
    cache.put((4,), states(10))  # two entries' worth: two go
    assert (len(cache), cache.bytes) == (2, 1920)
    assert cache.get((4,)) is not None
    assert (cache.hits, cache.misses) == (5, 1)


def test_an_entry_larger_than_the_bound_is_not_kept() -> None:
    cache = PrefixCache(max_bytes=1000)
    cache.put((1,), states(5))
    cache.put((2,), states(20))
    assert cache.get((2,)) is None
    assert cache.get((1,)) is not None
    assert cache.bytes == 640


# ----------------------------------------------------------------- on the model
slow = pytest.mark.slow  # the tests below run ChatTTS: left out of `make quick`


@pytest.fixture(scope="module")
def engine() -> ChatTTSEngine:
    engine = ChatTTSEngine(chattts_engine_options(max_sample_s=10, max_batch=4, seed=11))
    engine.load()
    assert engine._graph is not None, "decoder auto on CPU in float32: ONNX Runtime (the other decoder of the tests)"
    return engine


@pytest.fixture(scope="module")
def speaker(engine: ChatTTSEngine) -> str:
    return engine.speaker_from_sample(recording(), RATE, TRANSCRIPT)


def code_request(engine: ChatTTSEngine, key: int, text: str, speaker: str | None, seed: int) -> CodeRequest:
    voice = "voice_x" if speaker else "onyx"
    plan = engine._plan(key, SynthesisRequest(text, voice, speaker=speaker, seed=seed), CancelFlag())
    return engine._code_request(plan)


class Recorded(CodeBatch):
    """The real token loop, keeping each sequence's sampled tokens and hidden states."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.tokens: dict[int, list[torch.Tensor]] = {}
        self.hiddens: dict[int, list[torch.Tensor]] = {}

    def _sample(self, hidden: torch.Tensor, rows: Any, logits: torch.Tensor | None = None) -> torch.Tensor:
        tokens = super()._sample(hidden, rows, logits)
        for row, request in enumerate(rows.requests):
            self.tokens.setdefault(request.key, []).append(tokens[row].clone())
            self.hiddens.setdefault(request.key, []).append(hidden[row].clone())
        return tokens


def run(
    engine: ChatTTSEngine,
    requests: list[CodeRequest],
    prefixes: PrefixCache | None,
    graph: Any,
    *,
    joiners: list[CodeRequest] | None = None,
    chunk: int | None = None,
) -> Recorded:
    """``requests`` from the start, ``joiners`` joining after 3 steps; every sequence to its end."""
    batch = Recorded(engine._chat, engine._sampling(), chunk, graph, prefixes)
    batch.join(requests)
    for _ in range(3):
        batch.step()
    batch.join(joiners or [])
    while batch.size:
        batch.step()
    return batch


def same_sequences(ours: Recorded, theirs: Recorded, key: int) -> None:
    assert torch.equal(torch.stack(ours.tokens[key]), torch.stack(theirs.tokens[key]))
    torch.testing.assert_close(torch.stack(ours.hiddens[key]), torch.stack(theirs.hiddens[key]), rtol=1e-5, atol=1e-5)


@slow
@pytest.mark.parametrize("decoder", ["torch", "onnxruntime"])
def test_a_cached_voice_samples_what_it_would_without_the_cache(
    engine: ChatTTSEngine, speaker: str, decoder: str
) -> None:
    graph = engine._graph if decoder == "onnxruntime" else None
    prefixes = PrefixCache(2**26)
    first = code_request(engine, 0, "The first sentence of this voice.", speaker, seed=5)
    later = code_request(engine, 1, "Another sentence, later.", speaker, seed=6)
    assert first.shared_prefix == later.shared_prefix > 10  # the tags and the transcript
    assert first.token_ids[: first.shared_prefix] == later.token_ids[: later.shared_prefix]

    same_sequences(run(engine, [first], prefixes, graph), run(engine, [first], None, graph), 0)
    assert (len(prefixes), prefixes.hits) == (1, 0), "the first prefill kept the voice's prefix"
    same_sequences(run(engine, [later], prefixes, graph), run(engine, [later], None, graph), 1)
    assert prefixes.hits == 1


@slow
@pytest.mark.parametrize(("decoder", "chunk"), [("torch", None), ("onnxruntime", None), ("torch", 7)])
def test_a_cached_voice_joining_a_running_batch_samples_what_it_would_alone(
    engine: ChatTTSEngine, speaker: str, decoder: str, chunk: int | None
) -> None:
    # With ``chunk``, prompts joining a running batch are prefilled 7 tokens a pass: the prefix is kept from a prompt
    # prefilled over several passes, and the cached prompts' rest is spread over several too.
    graph = engine._graph if decoder == "onnxruntime" else None
    prefixes = PrefixCache(2**26)
    warming = code_request(engine, 9, "Warming the cache up.", speaker, seed=1)
    run(engine, [code_request(engine, 8, "Running.", None, seed=1)], prefixes, graph, joiners=[warming], chunk=chunk)
    assert (len(prefixes), prefixes.hits) == (1, 0)
    running = [code_request(engine, 0, "A named voice speaking for a while.", None, seed=2),
               code_request(engine, 1, "The sample voice from the start.", speaker, seed=3)]  # fmt: skip
    joiners = [code_request(engine, 2, "Joins late.", speaker, seed=4),
               code_request(engine, 3, "Joins late as well, with a longer text.", speaker, seed=5)]  # fmt: skip
    together = run(engine, running, prefixes, graph, joiners=joiners, chunk=chunk)
    assert prefixes.hits == 3
    for request in running + joiners:
        same_sequences(together, run(engine, [request], None, graph), request.key)


@slow
def test_a_cached_prompt_prefills_only_what_follows_the_prefix(engine: ChatTTSEngine, speaker: str) -> None:
    prefixes = PrefixCache(2**26)
    request = code_request(engine, 0, "Hello there.", speaker, seed=5)
    batch = CodeBatch(engine._chat, engine._sampling(), None, None, prefixes)
    batch.join([request])
    assert batch._waiting[0].inputs.size(1) == request.length, "nothing kept yet: the whole prompt"
    batch.step()
    batch = CodeBatch(engine._chat, engine._sampling(), None, None, prefixes)
    batch.join([request])
    assert batch._waiting[0].inputs.size(1) == request.length - request.shared_prefix


@slow
def test_the_engine_speaks_the_same_audio_with_and_without_the_cache(engine: ChatTTSEngine, speaker: str) -> None:
    uncached = ChatTTSEngine(chattts_engine_options(max_sample_s=10, max_batch=4, voice_prefix_cache_mb=0, seed=11))
    uncached.load()
    assert uncached._prefixes is None
    assert engine._prefixes is not None
    # Unseeded, the engines' seed for its tokens: a request's own seed runs it in a batch of its own, without the cache.
    request = SynthesisRequest("One sentence. And a second one.", "voice_x", speaker=speaker)
    hits = engine._prefixes.hits
    ours = np.concatenate(list(engine.synthesize(request, CancelFlag())))
    assert engine._prefixes.hits > hits, "the second sentence reused the first one's prefix"
    assert np.array_equal(ours, np.concatenate(list(uncached.synthesize(request, CancelFlag()))))
    kept = len(engine._prefixes)
    faster = SynthesisRequest("Faster.", "voice_x", speaker=speaker, speed=1.5)
    list(engine.synthesize(faster, CancelFlag()))
    assert len(engine._prefixes) == kept + 1, "another [speed_N]: another prefix"
