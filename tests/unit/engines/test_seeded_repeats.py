"""A request's own seed repeats its audio byte for byte, whatever else the engine is doing (README, "Seeds and sample
rates"): the same seeded request served alone and while another request (other words) runs in the same worker's
batch, starting with it, joining it or joined by it, gives the same PCM; with the engine's default chunk options (an
unseeded request's chunks follow the clock and the batch), the decode beside the steps and between them, over both
decoders and both weight types (8-bit prefills in bfloat16 where the CPU has it, as ``auto`` takes them, and in
int8), on tiny random-weight assets (through a worker process: ``test_chattts.py``).

Before, a seeded request's tokens repeated but not its bytes: its chunks were cut where its timing and its batch put
them, and its steps shared passes with other rows, whose products round a row by how many share them.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from engines.base import CancelFlag, SynthesisRequest
from engines.chattts import ChatTTSEngine, streaming
from tests.chattts_assets import chattts_engine_options
from tests.unit.engines.arrivals import JoinAt

if TYPE_CHECKING:
    import torch

    from engines.base import BatchItem

pytestmark = pytest.mark.slow  # runs ChatTTS: left out of `make quick`

TOKENS = 96
"""Four of the default first chunk's 24 tokens: room for later chunks to be cut where timing puts them."""
SEEDED = SynthesisRequest("The same words with the same seed, every time.", "nova", seed=41)
OTHER = SynthesisRequest("Something else entirely, said meanwhile.", "onyx")
OTHER_SEEDED = SynthesisRequest("Something else again, with a seed of its own.", "echo", seed=7)
CONFIGURATIONS = {
    "torch": {"decoder": "torch", "weights": "float32"},
    "torch-overlap-on": {"decoder": "torch", "weights": "float32", "stream_decode_overlap": "on"},
    "onnxruntime": {"decoder": "onnxruntime", "weights": "float32"},
    "onnxruntime-overlap-off": {"decoder": "onnxruntime", "weights": "float32", "stream_decode_overlap": "off"},
    "onnxruntime-int8": {"decoder": "onnxruntime", "weights": "int8"},
    "onnxruntime-int8-prefill-int8": {"decoder": "onnxruntime", "weights": "int8", "prefill_weights": "int8"},
}
"""Both decoders and both weight types, each with its ``auto`` streaming decode (beside the steps with ONNX Runtime,
between them with torch) and with the other."""


@pytest.fixture(scope="module", params=list(CONFIGURATIONS))
def engine(request: pytest.FixtureRequest) -> ChatTTSEngine:
    options = CONFIGURATIONS[request.param]
    loaded = ChatTTSEngine(chattts_engine_options(**options, max_batch=4, max_new_token=TOKENS, min_new_token=TOKENS))
    details = loaded.load().details
    assert (details["decoder"], details["decode_weights"].split()[0]) == (options["decoder"], options["weights"])
    return loaded


def served(engine: ChatTTSEngine, first: list[SynthesisRequest], joiner: JoinAt | None = None) -> list[BatchItem]:
    return list(engine.synthesize_batch(first, [CancelFlag() for _ in first], joiner))


def pcm(items: list[BatchItem], index: int) -> bytes:
    chunks = [item for at, item in items if at == index]
    assert chunks and chunks[-1] is None, "the request ended"
    assert all(isinstance(chunk, np.ndarray) for chunk in chunks[:-1])
    return b"".join(chunk.tobytes() for chunk in chunks[:-1] if isinstance(chunk, np.ndarray))


def assert_beside(items: list[BatchItem], seeded: int, other: int) -> None:
    """The other request's audio came while the seeded one's was coming: they ran in one batch."""
    order = [index for index, item in items if item is not None]
    first, last = order.index(seeded), len(order) - 1 - order[::-1].index(seeded)
    assert other in order[first:last], "the other request ran beside the seeded one"


def alone(engine: ChatTTSEngine) -> bytes:
    return pcm(served(engine, [SEEDED]), 0)


@pytest.mark.parametrize("how", ["together", "joins", "joined"])
def test_a_seeded_request_repeats_its_bytes_beside_another(engine: ChatTTSEngine, how: str) -> None:
    """``together``: both start in one batch; ``joins``: the seeded request joins the other's running batch at its 5th
    pass; ``joined``: the other joins the seeded one's at its 30th (after the seeded one's first chunk)."""
    reference = alone(engine)
    if how == "together":
        items, seeded = served(engine, [SEEDED, OTHER]), 0
    elif how == "joins":
        items, seeded = served(engine, [OTHER], JoinAt(SEEDED, 5)), 1
    else:
        items, seeded = served(engine, [SEEDED], JoinAt(OTHER, 30)), 0
    assert_beside(items, seeded, 1 - seeded)
    assert len(pcm(items, seeded)) == len(reference)
    assert pcm(items, seeded) == reference, "the same seeded request, other bytes beside another request"


def test_two_seeded_requests_in_one_batch_each_repeat_their_bytes(engine: ChatTTSEngine) -> None:
    items = served(engine, [OTHER_SEEDED], JoinAt(SEEDED, 5))
    assert_beside(items, 1, 0)
    assert pcm(items, 1) == alone(engine)
    assert pcm(items, 0) == pcm(served(engine, [OTHER_SEEDED]), 0)


def test_a_seeded_requests_chunks_do_not_follow_how_long_decodes_take(
    engine: ChatTTSEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each decode lasts 30 ms longer: beside the steps, tokens pile up while a chunk is decoded, and a schedule that
    took them would cut the next chunk elsewhere; the seeded request's bytes stay."""
    reference = alone(engine)
    decode = streaming.decode_windows

    def slow(chat: object, windows: list[torch.Tensor], *args: Any, **kwargs: Any) -> list[np.ndarray]:
        time.sleep(0.03)
        return decode(chat, windows, *args, **kwargs)

    monkeypatch.setattr(streaming, "decode_windows", slow)
    items = served(engine, [OTHER], JoinAt(SEEDED, 5))
    assert pcm(items, 1) == reference
