"""First audio that stays flat as the batch grows (issue #51, part 3): a first chunk in a batch whose step is slower
than one row's comes after fewer tokens (``stream_first_tokens_min``), from the steps timed at load. ChatTTS on tiny
random-weight assets."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from engines.base import CancelFlag, SynthesisRequest
from engines.chattts import ChatTTSEngine, streaming
from engines.chattts.batch_size import describe_first_chunks, first_chunk_tokens
from tests.chattts_assets import audio_tolerance, chattts_engine_options

if TYPE_CHECKING:
    import torch

pytestmark = pytest.mark.slow  # runs ChatTTS: left out of `make quick`

STEPS = {1: 10.0, 2: 11.0, 4: 15.0, 8: 20.0}
"""A 2-core CPU's shape: 8 rows step at twice one row's time."""
TOKENS = 48
REQUESTS = [SynthesisRequest(f"Sentence number {n} of the batch.", "nova") for n in range(4)]
"""Unseeded, the engine's seed for their tokens: a request's own seed would take it out of the batch, its first chunk
fixed (``test_seeded_repeats.py``)."""


@pytest.mark.parametrize(
    ("rows", "tokens", "least", "expected"),
    [
        (1, 24, 12, 24),  # one row: stream_first_tokens
        (2, 24, 12, 22),  # 24 * 10 / 11 = 21.8
        (8, 24, 12, 12),  # twice one row's step: half the tokens
        (6, 24, 12, 14),  # between 4 and 8: 17.5 ms, 13.7 tokens
        (16, 24, 12, 12),  # above the largest timed size: its step, and never under the least
        (8, 24, 8, 12),
        (8, 8, 12, 8),  # a first chunk asked shorter than the least stays as asked
    ],
)
def test_a_first_chunk_takes_the_time_of_its_one_row_tokens(rows: int, tokens: int, least: int,
                                                            expected: int) -> None:  # fmt: skip
    assert first_chunk_tokens(STEPS, rows, tokens, least) == expected


def test_the_first_chunks_are_shown_per_batch_size() -> None:
    assert describe_first_chunks(STEPS, 24, 12) == "tokens per batch size: 24 at 1, 22 at 2, 16 at 4, 12 at 8"
    assert describe_first_chunks({}, 24, 12) == "24 tokens"


@pytest.fixture(scope="module")
def engine() -> ChatTTSEngine:
    loaded = ChatTTSEngine(chattts_engine_options(
        decoder="onnxruntime", max_batch=4, max_new_token=TOKENS, min_new_token=TOKENS, stream_first_tokens=24, seed=1,
    ))  # fmt: skip
    info = loaded.load()
    assert sorted(loaded._step_ms) == [1, 2, 4], "a fixed max_batch is timed up to its size"
    assert info.details["first_chunk"].startswith("tokens per batch size: 24 at 1, ")
    return loaded


def first_windows(engine: ChatTTSEngine, requests: list[SynthesisRequest],
                  monkeypatch: pytest.MonkeyPatch) -> tuple[list[int], dict[int, np.ndarray]]:  # fmt: skip
    """The tokens of each decode's first window, in order, and each request's whole audio."""
    lengths: list[int] = []
    decode = streaming.decode_windows

    def logged(chat: object, windows: list[torch.Tensor], *args: Any, **kwargs: Any) -> list[np.ndarray]:
        lengths.extend(len(window) for window in windows)
        return decode(chat, windows, *args, **kwargs)

    monkeypatch.setattr(streaming, "decode_windows", logged)
    audio: dict[int, list[np.ndarray]] = {}
    for index, item in engine.synthesize_batch(requests, [CancelFlag() for _ in requests]):
        assert not isinstance(item, Exception)
        if item is not None:
            audio.setdefault(index, []).append(item)
    return lengths, {index: np.concatenate(chunks) for index, chunks in audio.items()}


def test_a_batch_slower_than_one_row_hears_its_first_audio_after_fewer_tokens(
    engine: ChatTTSEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine, "_step_ms", {1: 10.0, 2: 11.0, 4: 20.0})  # as a 2-core CPU would time them
    lengths, audio = first_windows(engine, REQUESTS, monkeypatch)
    assert lengths[:4] == [12] * 4, "four rows step at twice one row's time: first chunks of half the tokens"
    alone, _ = first_windows(engine, REQUESTS[:1], monkeypatch)
    assert alone[0] == 24
    for index, request in enumerate(REQUESTS):  # a shorter first chunk, the same audio
        reference = np.concatenate(list(engine.synthesize(request, CancelFlag())))
        assert len(audio[index]) == len(reference)
        assert np.allclose(audio[index], reference, atol=audio_tolerance(engine, reference))


def test_first_chunks_keep_their_length_where_asked(engine: ChatTTSEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine, "_step_ms", {1: 10.0, 2: 11.0, 4: 20.0})
    monkeypatch.setattr(engine, "options", engine.options.model_copy(update={"stream_first_tokens_min": 24}))
    lengths, _ = first_windows(engine, REQUESTS, monkeypatch)
    assert lengths[:4] == [24] * 4
