"""Decodes nothing runs beside (``stream_decode_threads_alone``), on tiny random-weight assets: a first chunk, which
the token loop waits for, and a last chunk with no other row left to step go through the audio graph's session of
more threads; chunks decoded beside the steps keep ``stream_decode_threads``; the audio is the same either way, within
rounding (ONNX Runtime may share a product's sums out otherwise over more threads)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from engines.base import CancelFlag, SynthesisRequest
from engines.chattts import ChatTTSEngine, streaming
from tests.chattts_assets import chattts_engine_options
from tests.unit.engines.arrivals import JoinAt

if TYPE_CHECKING:
    import torch

    from engines.chattts.audio_graph import AudioGraph

pytestmark = pytest.mark.slow  # runs ChatTTS: left out of `make quick`

ALONE_THREADS = 3
"""Not the machine's count, nor 1: the sessions can only be told apart by it."""
TOKENS = 96
ROUNDING = 2
"""int16 steps between the same chunk decoded on one thread and on several (1 measured on the tiny assets; none at
full size on 2 threads)."""
# Unseeded, the engine's seed for their tokens: a request's own seed takes it out of the batch, every chunk of it
# through the alone session (``test_seeded_repeats.py``).
FIRST = SynthesisRequest("The first sentence is a long one.", "nova")
SECOND = SynthesisRequest("Another voice, a little later.", "onyx")


def _options(alone_threads: int) -> dict[str, object]:
    return chattts_engine_options(
        decoder="onnxruntime", weights="int8", audio_decoder="onnxruntime", max_batch=4, max_new_token=TOKENS,
        min_new_token=TOKENS, stream_first_tokens=24, stream_first_tokens_min=24, stream_chunk_tokens=24,
        stream_max_chunk_tokens=24, stream_decode_overlap="on", stream_decode_threads=1,
        stream_decode_threads_alone=alone_threads, seed=41,
    )  # fmt: skip


@pytest.fixture(scope="module")
def engines() -> dict[int, ChatTTSEngine]:
    """The same weights and options, alone decodes on ``ALONE_THREADS`` threads and on one."""
    loaded = {}
    for threads in (ALONE_THREADS, 1):
        engine = ChatTTSEngine(_options(threads))
        assert engine.load().details["audio_decoder"] == "onnxruntime int8"
        loaded[threads] = engine
    return loaded


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The threads of the audio graph's session each stream decode goes through, in the order they start."""
    log: list[int] = []
    decode = streaming.decode_windows

    def logged(chat: object, windows: list[torch.Tensor], threads: int | None, graph: AudioGraph) -> Any:
        assert threads == 1, "torch's part (the inverse STFT) keeps stream_decode_threads"
        log.append(graph.threads)
        return decode(chat, windows, threads, graph)

    monkeypatch.setattr(streaming, "decode_windows", logged)
    return log


def _audio(engine: ChatTTSEngine, arrivals: JoinAt | None = None) -> dict[int, np.ndarray]:
    chunks: dict[int, list[np.ndarray]] = {}
    for index, item in engine.synthesize_batch([FIRST], [CancelFlag()], arrivals):
        assert not isinstance(item, Exception)
        if item is not None:
            chunks.setdefault(index, []).append(item)
    return {index: np.concatenate(parts) for index, parts in chunks.items()}


def _assert_same(audio: np.ndarray, reference: np.ndarray) -> None:
    assert audio.shape == reference.shape
    assert int(np.abs(audio.astype(np.int32) - reference).max()) <= ROUNDING


def test_the_graph_keeps_a_session_of_each_count(engines: dict[int, ChatTTSEngine]) -> None:
    wide, narrow = (engines[threads]._decodes for threads in (ALONE_THREADS, 1))
    assert wide is not None and wide.graph is not None and wide.graph.thread_counts == (1, ALONE_THREADS)
    assert narrow is not None and narrow.graph is not None and narrow.graph.thread_counts == (1,)


def test_a_lone_streams_first_and_last_chunks_take_the_alone_threads(
    engines: dict[int, ChatTTSEngine], decodes: list[int]
) -> None:
    audio = _audio(engines[ALONE_THREADS])
    assert len(decodes) >= 3, decodes
    assert decodes[0] == decodes[-1] == ALONE_THREADS, decodes  # the loop waits on the first; nothing steps at the last
    assert set(decodes[1:-1]) == {1}, decodes  # beside the steps
    decodes.clear()
    _assert_same(audio[0], _audio(engines[1])[0])
    assert set(decodes) == {1}


def test_a_last_chunk_beside_another_rows_steps_keeps_one_thread(
    engines: dict[int, ChatTTSEngine], decodes: list[int]
) -> None:
    """SECOND joins at the 10th pass: FIRST's last chunk is decoded while SECOND still steps, SECOND's with nothing
    left to step. Alone: the two first chunks and SECOND's last."""
    audio = _audio(engines[ALONE_THREADS], JoinAt(SECOND, 10))
    assert decodes.count(ALONE_THREADS) == 3, decodes
    assert decodes[0] == decodes[-1] == ALONE_THREADS, decodes
    decodes.clear()
    reference = _audio(engines[1], JoinAt(SECOND, 10))
    assert set(decodes) == {1}
    for index in (0, 1):
        _assert_same(audio[index], reference[index])
