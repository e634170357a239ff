"""The streaming decode beside the token loop (``stream_decode_overlap: on``), on tiny random-weight assets: the steps
go on while a chunk is decoded, every request hears exactly the audio it hears with the decode between the steps, in
order, and a request cancelled while its chunk is decoded ends without that chunk; over both decoders and both weight
types.

Chunks are fixed at 24 tokens (``stream_max_chunk_tokens`` = ``stream_chunk_tokens``, first chunks too whatever the
batch): a chunk then falls due at the same token with the decode beside the steps as between them, so that the two cut
the audio at the same places. Every decode is on one thread (``stream_decode_threads_alone``: 1): more threads may
round an 8-bit audio product otherwise (``test_alone_decodes.py``).
"""

from __future__ import annotations

import time
from concurrent.futures import Future, wait
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from engines.base import CancelFlag, SynthesisRequest
from engines.chattts import ChatTTSEngine, streaming
from engines.chattts.generation import CodeBatch
from engines.chattts.overlap import DecodeRunner
from tests.chattts_assets import chattts_engine_options
from tests.unit.engines.arrivals import JoinAt

if TYPE_CHECKING:
    import torch

    from engines.base import BatchItem

pytestmark = pytest.mark.slow  # runs ChatTTS: left out of `make quick`

TOKENS = 96
CHUNK = 24
FIRST = SynthesisRequest("The first sentence is a long one.", "nova", seed=41)
SECOND = SynthesisRequest("Another voice, a little later.", "onyx", seed=42)
JOINS_AT = 10
"""The pass at which SECOND joins FIRST's batch."""
TOLERANCE = 2
"""int16 steps: a chunk decoded in one call with another row's may differ by rounding from one decoded alone."""


def _options(decoder: str, weights: str, overlap: str) -> dict[str, object]:
    return chattts_engine_options(
        decoder=decoder, weights=weights, max_batch=4, max_new_token=TOKENS, min_new_token=TOKENS,
        stream_first_tokens=CHUNK, stream_first_tokens_min=CHUNK, stream_chunk_tokens=CHUNK,
        stream_max_chunk_tokens=CHUNK, stream_decode_overlap=overlap, stream_decode_threads_alone=1,
    )  # fmt: skip


@pytest.fixture(scope="module", params=[("torch", "float32"), ("onnxruntime", "float32"), ("onnxruntime", "int8")],
                ids=["torch", "onnxruntime", "onnxruntime-int8"])  # fmt: skip
def engines(request: pytest.FixtureRequest) -> dict[str, ChatTTSEngine]:
    """The same weights and options, the decode beside the steps (``on``) and between them (``off``)."""
    decoder, weights = request.param
    loaded = {}
    for overlap in ("on", "off"):
        engine = ChatTTSEngine(_options(decoder, weights, overlap))
        info = engine.load()
        assert info.details["stream_decode"] == ("beside the steps" if overlap == "on" else "between the steps")
        loaded[overlap] = engine
    return loaded


@pytest.fixture
def in_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each step waits until the chunks handed over before it are decoded (they are still decoded in the decode thread
    and leave at a later pass): the chunks then fall due at the same tokens however slowly that thread is scheduled
    on a busy machine, so that the audio can be compared with the decode between the steps."""
    handed: list[Future[object]] = []
    submit, step = DecodeRunner.submit, CodeBatch.step

    def recorded(self: DecodeRunner, chat: object, windows: list[torch.Tensor], **how: bool) -> Future[object]:
        future = submit(self, chat, windows, **how)
        handed.append(future)  # type: ignore[arg-type]
        return future  # type: ignore[return-value]

    def waiting(self: CodeBatch) -> object:
        wait(handed, timeout=30.0)
        return step(self)

    monkeypatch.setattr(DecodeRunner, "submit", recorded)
    monkeypatch.setattr(CodeBatch, "step", waiting)


def _collect(items: list[BatchItem]) -> dict[int, list[np.ndarray | None]]:
    """Each request's items in order (chunks, then ``None`` at its end)."""
    per_request: dict[int, list[np.ndarray | None]] = {}
    for index, item in items:
        assert not isinstance(item, Exception)
        per_request.setdefault(index, []).append(item)
    return per_request


def _audio(items: list[np.ndarray | None]) -> np.ndarray:
    assert items[-1] is None, "a request ends after its last audio"
    assert all(item is not None for item in items[:-1]), "a request ends once"
    return np.concatenate([item for item in items if item is not None])


@pytest.mark.usefixtures("in_step")
def test_one_request_hears_the_same_audio_beside_the_steps(engines: dict[str, ChatTTSEngine]) -> None:
    heard = {overlap: list(engine.synthesize(FIRST, CancelFlag())) for overlap, engine in engines.items()}
    assert [len(chunk) for chunk in heard["on"]] == [len(chunk) for chunk in heard["off"]], "the same chunks"
    assert np.array_equal(np.concatenate(heard["on"]), np.concatenate(heard["off"]))


@pytest.mark.usefixtures("in_step")
def test_a_batch_hears_the_same_audio_beside_the_steps(engines: dict[str, ChatTTSEngine]) -> None:
    heard = {}
    for overlap, engine in engines.items():
        items = list(engine.synthesize_batch([FIRST], [CancelFlag()], JoinAt(SECOND, JOINS_AT)))
        heard[overlap] = _collect(items)
    assert sorted(heard["on"]) == sorted(heard["off"]) == [0, 1]
    for index in (0, 1):
        on, off = _audio(heard["on"][index]), _audio(heard["off"][index])
        assert len(on) == len(off) > (TOKENS - 1) * streaming.SAMPLES_PER_TOKEN
        assert np.allclose(on, off, atol=TOLERANCE), f"request {index}'s audio changed beside the steps"


def test_the_steps_go_on_while_a_later_chunk_is_decoded(
    engines: dict[str, ChatTTSEngine], monkeypatch: pytest.MonkeyPatch
) -> None:
    steps = 0
    step = CodeBatch.step

    def counted(self: CodeBatch) -> object:
        nonlocal steps
        steps += 1
        return step(self)

    decode = streaming.decode_windows
    waited: list[bool] = []
    decodes = 0

    def slow(chat: object, windows: list[torch.Tensor], *args: Any, **kwargs: Any) -> list[np.ndarray]:
        nonlocal decodes
        decodes += 1
        if decodes == 2:  # the second chunk's decode lasts until the token loop has taken 3 more steps (10 s at most)
            start, deadline = steps, time.monotonic() + 10.0
            while steps < start + 3 and time.monotonic() < deadline:
                time.sleep(0.001)
            waited.append(steps >= start + 3)
        return decode(chat, windows, *args, **kwargs)

    monkeypatch.setattr(CodeBatch, "step", counted)
    monkeypatch.setattr(streaming, "decode_windows", slow)
    audio = np.concatenate(list(engines["on"].synthesize(FIRST, CancelFlag())))
    assert waited == [True], "no step was taken while a later chunk was decoded"
    reference = np.concatenate(list(engines["off"].synthesize(FIRST, CancelFlag())))
    assert np.array_equal(audio, reference), "a slow decode changed the audio"


@pytest.mark.usefixtures("in_step")
@pytest.mark.parametrize("chunk", [1, 3], ids=["later-chunk", "last-chunk"])
def test_a_request_cancelled_while_its_chunk_is_decoded_ends_without_it(
    engines: dict[str, ChatTTSEngine], monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    """FIRST is cancelled during the decode of its ``chunk``-th chunk (0-based; the 3rd, at 96 tokens, is its last);
    SECOND, in the same batch, goes on and hears all of its audio. Their chunks fall due in turn (FIRST's at 24, 48,
    72 and 96 tokens, SECOND's 9 passes later each), each decoded alone: FIRST's ``chunk``-th is decode 2 * chunk."""
    first_cancel = CancelFlag()
    decodes = 0
    decode = streaming.decode_windows

    def cancelling(chat: object, windows: list[torch.Tensor], *args: Any, **kwargs: Any) -> list[np.ndarray]:
        nonlocal decodes
        audio = decode(chat, windows, *args, **kwargs)
        if decodes == 2 * chunk:
            first_cancel.set()  # during this decode: its audio is ready, but no one listens any more
        decodes += 1
        return audio

    monkeypatch.setattr(streaming, "decode_windows", cancelling)
    items = list(engines["on"].synthesize_batch([FIRST], [first_cancel], JoinAt(SECOND, JOINS_AT)))
    heard = _collect(items)
    assert first_cancel.is_set(), "the cancellation happened"
    assert heard[0][-1] is None and sum(item is None for item in heard[0]) == 1, "the cancelled request ends once"
    assert len([item for item in heard[0] if item is not None]) == chunk, "no chunk after the cancelled decode"
    alone = np.concatenate(list(engines["off"].synthesize(SECOND, CancelFlag())))
    second = _audio(heard[1])
    assert len(second) == len(alone)
    assert np.allclose(second, alone, atol=TOLERANCE), "the other request's audio changed"
