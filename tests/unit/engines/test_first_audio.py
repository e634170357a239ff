"""A request that joins a running ChatTTS batch hears its first audio within its prefill and ``stream_first_tokens``
steps, with no running request's later chunk decoded meanwhile (each decode stops every row's next step), its first
chunk leaves before a chunk of another row due at the same pass is decoded, and every request still gets exactly its
own audio; over both decoders and both weight types, on tiny random-weight assets.

The streaming decoder's clock is stopped (the listener always has audio enough), and first chunks keep their length
whatever the batch (``stream_first_tokens_min``: ``test_first_chunk_pace.py``), so that which chunks wait depends on
token counts only, not on how fast this machine steps.
"""

from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from engines.base import CancelFlag, SynthesisRequest
from engines.chattts import ChatTTSEngine, streaming
from tests.chattts_assets import audio_tolerance, chattts_engine_options
from tests.unit.engines.arrivals import JoinAt

if TYPE_CHECKING:
    from collections.abc import Iterator

    import torch


pytestmark = pytest.mark.slow  # runs ChatTTS: left out of `make quick`

FIRST_TOKENS = 24
# Unseeded, the engine's seed for their tokens: a request's own seed would take it out of the batch, its chunks
# fixed (``test_seeded_repeats.py``).
RUNNING = SynthesisRequest("The first sentence is a long one.", "nova")
JOINER = SynthesisRequest("Another voice, later.", "onyx")
TOKENS = 64
ARRIVES_AT = 26
"""Two steps after the running request's first chunk (24 tokens): its next one (16 tokens later, 8 doubled) falls due
during the joiner's first 24 tokens, well before its segment (TOKENS) ends."""
ARRIVES_AS_IT_ENDS = TOKENS - FIRST_TOKENS + 1
"""The joiner's first chunk falls due at the pass of the running request's last token: its last chunk, never held."""


@pytest.fixture(scope="module", params=[("torch", "float32"), ("onnxruntime", "float32"), ("onnxruntime", "int8")],
                ids=["torch", "onnxruntime", "onnxruntime-int8"])  # fmt: skip
def engine(request: pytest.FixtureRequest) -> ChatTTSEngine:
    decoder, weights = request.param
    loaded = ChatTTSEngine(chattts_engine_options(
        decoder=decoder, weights=weights, max_batch=4, max_new_token=TOKENS, min_new_token=TOKENS,
        stream_first_tokens=FIRST_TOKENS, stream_first_tokens_min=FIRST_TOKENS, stream_chunk_tokens=8, seed=31,
    ))  # fmt: skip
    info = loaded.load()
    assert (info.details["decoder"], info.details["decode_weights"]) == (decoder, weights)
    return loaded


@pytest.fixture(autouse=True)
def stopped_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(streaming, "time", types.SimpleNamespace(monotonic=lambda: 0.0))


def items(engine: ChatTTSEngine, arrivals: JoinAt) -> Iterator[tuple[int, int, np.ndarray | None]]:
    """``(poll, index, chunk or None)`` for every item the batch yields."""
    for index, item in engine.synthesize_batch([RUNNING], [CancelFlag()], arrivals):
        assert not isinstance(item, Exception)
        yield arrivals.polls, index, item


def alone(engine: ChatTTSEngine, request: SynthesisRequest) -> np.ndarray:
    return np.concatenate(list(engine.synthesize(request, CancelFlag())))


def logged_decodes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """A log to which every stream decode adds ``("decode", windows)`` as it starts; the test adds its own entries."""
    log: list[tuple[str, int]] = []
    decode = streaming.decode_windows

    def logged(chat: object, windows: list[torch.Tensor], *args: Any, **kwargs: Any) -> list[np.ndarray]:
        log.append(("decode", len(windows)))
        return decode(chat, windows, *args, **kwargs)

    monkeypatch.setattr(streaming, "decode_windows", logged)
    return log


def handed_over(engine: ChatTTSEngine, arrivals: JoinAt, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The polls at which the engine hands windows to the streaming decode (in the token loop's thread: when they
    leave depends on how fast a decode thread beside the steps gets a core, not on the engine)."""
    assert engine._decodes is not None
    polls: list[int] = []
    submit = engine._decodes.submit

    def logged(*args: Any, **kwargs: Any) -> Any:
        polls.append(arrivals.polls)
        return submit(*args, **kwargs)

    monkeypatch.setattr(engine._decodes, "submit", logged)
    return polls


def test_a_joiner_hears_its_first_audio_within_its_prefill_and_first_tokens_steps(
    engine: ChatTTSEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    arrivals = JoinAt(JOINER, ARRIVES_AT)
    handed = handed_over(engine, arrivals, monkeypatch)
    seen = list(items(engine, arrivals))
    first = next(poll for poll, index, chunk in seen if index == 1 and chunk is not None)
    # Polled at ARRIVES_AT, prefilled in that pass (its first token), then FIRST_TOKENS - 1 more passes.
    assert first - ARRIVES_AT <= FIRST_TOKENS
    running = [poll for poll, index, chunk in seen if index == 0 and chunk is not None]
    assert running[0] < ARRIVES_AT, "the running request spoke before the joiner came"
    assert not [poll for poll in running if ARRIVES_AT <= poll < first], "a running request's decode held it up"
    assert not [poll for poll in handed if ARRIVES_AT < poll < first], "no decode began before the joiner's audio"
    assert any(first <= poll <= first + 1 for poll in handed[handed.index(first) + 1 :]), "the held chunk went next"
    assert any(poll >= first for poll in running), "and left"


def test_every_request_still_gets_its_own_audio(engine: ChatTTSEngine) -> None:
    audio: dict[int, list[np.ndarray]] = {}
    for _, index, chunk in items(engine, JoinAt(JOINER, ARRIVES_AT)):
        if chunk is not None:
            audio.setdefault(index, []).append(chunk)
    for index, request in ((0, RUNNING), (1, JOINER)):
        joined, reference = np.concatenate(audio[index]), alone(engine, request)
        assert len(joined) == len(reference)
        tolerance = audio_tolerance(engine, reference)  # 2 int16 steps; more where 8-bit audio products round
        assert np.allclose(joined, reference, atol=tolerance), "holding a chunk must not change its audio"


def test_a_first_chunk_leaves_before_another_rows_chunk_due_at_the_same_pass_is_decoded(
    engine: ChatTTSEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = logged_decodes(monkeypatch)  # ("decode", windows) and ("yield", index), in the order they happened
    arrivals = JoinAt(JOINER, ARRIVES_AS_IT_ENDS)
    seen = []
    for poll, index, chunk in items(engine, arrivals):
        seen.append((poll, index, chunk))
        if chunk is not None:
            log.append(("yield", index))
    first = next(poll for poll, index, chunk in seen if index == 1 and chunk is not None)
    at_that_pass = [index for poll, index, chunk in seen if poll == first and chunk is not None]
    assert at_that_pass[0] == 1, "the joiner's first chunk left first"
    beside = engine._decodes is not None and engine._decodes.overlap
    if not beside:  # beside the steps (stream_decode_overlap), the running request's last chunk may leave later
        assert at_that_pass == [1, 0], "the joiner's first chunk and then the running request's last, at one pass"
    joiner = log.index(("yield", 1))
    assert log[joiner - 1] == ("decode", 1), "the decode just before the joiner's first chunk was its own alone"
    assert log[joiner + 1] == ("decode", 1), "the running request's last chunk was decoded after it left"


def test_first_chunks_due_together_leave_one_by_one(engine: ChatTTSEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three requests arriving together: their first chunks fall due at one pass, and each is decoded alone and
    leaves before the next one's decode: the first listener waits for one decode, not three."""
    log = logged_decodes(monkeypatch)
    requests = [RUNNING, JOINER, SynthesisRequest("A third voice.", "echo", seed=33)]
    heard: set[int] = set()
    for index, item in engine.synthesize_batch(requests, [CancelFlag() for _ in requests]):
        if isinstance(item, np.ndarray) and index not in heard:
            heard.add(index)
            log.append(("first", index))
    firsts = [position for position, entry in enumerate(log) if entry[0] == "first"]
    assert len(firsts) == 3
    for position in firsts:
        assert log[position - 1] == ("decode", 1), "each first chunk decoded alone, just before it left"
    assert firsts[1] - firsts[0] == firsts[2] - firsts[1] == 2, "no other decode between the first chunks"
