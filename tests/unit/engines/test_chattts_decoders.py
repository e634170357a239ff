"""The ChatTTS decode step through ONNX Runtime (``decoder``) and ``max_batch: auto``, on tiny random-weight assets:
the graph computes torch's logits, is cached per weights, falls back to torch when it cannot run, and both decoders
speak the same audio."""

from __future__ import annotations

import logging
import shutil
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from engines.base import CancelFlag, EngineInfo, SynthesisRequest
from engines.chattts import ChatTTSEngine
from engines.chattts.batch_size import TOKEN_S, choose_batch
from engines.chattts.loader import verify_directory
from engines.chattts.onnx_step import graph_key, graph_path, load_decode_graph
from tests.chattts_assets import TEST_TOKENS, chattts_engine_options, tiny_assets_dir

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.slow  # runs ChatTTS: left out of `make quick`

SAMPLES_PER_SEGMENT = TEST_TOKENS * 512 - 256  # every segment is exactly TEST_TOKENS tokens long here

REALTIME_MS = TOKEN_S * 1000


@pytest.fixture(scope="module")
def loaded() -> dict[str, tuple[ChatTTSEngine, EngineInfo]]:
    found = {}
    for decoder in ("torch", "onnxruntime"):
        engine = ChatTTSEngine(chattts_engine_options(decoder=decoder, max_batch=4))
        found[decoder] = engine, engine.load()
    return found


@pytest.fixture(scope="module")
def engines(loaded: dict[str, tuple[ChatTTSEngine, EngineInfo]]) -> dict[str, ChatTTSEngine]:
    for decoder, (_, info) in loaded.items():
        assert info.details["decoder"] == decoder
    return {decoder: engine for decoder, (engine, _) in loaded.items()}


def test_the_graph_gives_torchs_logits(engines: dict[str, ChatTTSEngine]) -> None:
    """Every step's logits, for a batch whose rows join late (a merged cache) and leave early (a trimmed one)."""
    import torch

    from engines.chattts.generation import CodeBatch, CodeRequest, Sampling

    engine = engines["onnxruntime"]
    assert engine._graph is not None

    def every_logits(graph: Any) -> list[torch.Tensor]:
        batch = CodeBatch(engine._chat, Sampling(), graph=graph)
        found: list[torch.Tensor] = []
        sample = batch._sample

        def recording(hidden: torch.Tensor, rows: Any, logits: torch.Tensor | None = None) -> torch.Tensor:
            found.append(torch.nn.functional.linear(hidden, batch._heads) if logits is None else logits)
            return sample(hidden, rows, logits)

        batch._sample = recording  # type: ignore[method-assign]
        prompts = [list(range(3, 3 + length)) for length in (9, 4, 14)]
        requests = [CodeRequest(key, prompt, None, key, 6 + 5 * key, 6 + 5 * key, CancelFlag())
                    for key, prompt in enumerate(prompts)]  # fmt: skip
        batch.join(requests[:2])
        for _ in range(3):
            batch.step()
        batch.join(requests[2:])
        while batch.size:
            batch.step()
        return found

    with torch.inference_mode():
        reference, ours = every_logits(None), every_logits(engine._graph)
    assert len(ours) == len(reference) > 10
    for theirs, mine in zip(reference, ours, strict=True):
        assert float((theirs - mine).abs().max()) <= 1e-4
        assert torch.equal(theirs.view(len(theirs), 4, -1).argmax(-1), mine.view(len(mine), 4, -1).argmax(-1))


def test_both_decoders_speak_the_same_audio(engines: dict[str, ChatTTSEngine]) -> None:
    requests = [
        SynthesisRequest("One sentence.", "alloy", seed=1),
        SynthesisRequest("Two sentences. Yes.", "nova", seed=2),
        SynthesisRequest("This one is cancelled. Early.", "onyx", seed=3),
    ]

    def spoken(engine: ChatTTSEngine) -> dict[int, np.ndarray]:
        cancels = [CancelFlag() for _ in requests]
        chunks: dict[int, list[np.ndarray]] = {index: [] for index in range(len(requests))}
        for index, item in engine.synthesize_batch(requests, cancels):
            assert not isinstance(item, Exception)
            if item is not None:
                chunks[index].append(item)
                cancels[2].set()  # at the first chunk of any request: the third leaves the batch mid-segment
        return {index: np.concatenate(found) for index, found in chunks.items() if found}

    torch_audio, graph_audio = spoken(engines["torch"]), spoken(engines["onnxruntime"])
    assert torch_audio.keys() == graph_audio.keys() >= {0, 1}
    for index, audio in torch_audio.items():
        assert len(graph_audio[index]) == len(audio)
        assert np.allclose(graph_audio[index], audio, atol=2)


def test_the_graph_is_kept_per_weights(tmp_path: Path) -> None:
    """Other weights get another graph file; the same weights reuse theirs without exporting again."""
    from engines.chattts.assets import generate_assets
    from engines.chattts.generation import stacked_audio_heads

    engine = ChatTTSEngine(chattts_engine_options(decoder="torch", max_batch=1))
    engine.load()
    other = tmp_path / "other"
    generate_assets(other, "tiny", seed=1)
    import torch

    keys = {graph_key(verify_directory(path).hashes, torch.float32) for path in (tiny_assets_dir(), other)}
    assert len(keys) == 2
    assert graph_key(verify_directory(tiny_assets_dir()).hashes, torch.bfloat16) not in keys
    path = graph_path(tmp_path / "model", tmp_path / "cache", keys.pop())
    assert path.parent == tmp_path / "model" / "onnx"
    heads = stacked_audio_heads(engine._chat)
    assert load_decode_graph(engine._chat, heads, path, 1) is not None
    exported = path.stat().st_mtime_ns
    assert load_decode_graph(engine._chat, heads, path, 1) is not None
    assert path.stat().st_mtime_ns == exported


def test_a_model_directory_that_cannot_hold_the_graph_sends_it_to_the_cache_dir(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.write_text("a file where the model directory should be: nothing can be made inside it")
    assert graph_path(model, tmp_path / "cache", "key") == tmp_path / "cache" / "onnx" / "decode-step-key.onnx"


def test_a_graph_that_cannot_run_falls_back_to_torch(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    assets = tmp_path / "assets"
    shutil.copytree(tiny_assets_dir(), assets, ignore=shutil.ignore_patterns("onnx"))
    import torch

    path = graph_path(assets, tmp_path, graph_key(verify_directory(assets).hashes, torch.float32))
    path.write_bytes(b"not an onnx graph")
    with caplog.at_level(logging.WARNING, logger="chattts_gateway.chattts"):
        engine = ChatTTSEngine(chattts_engine_options(path=str(assets), decoder="onnxruntime", max_batch=1))
        info = engine.load()
    assert info.details["decoder"] == "torch"
    warnings = [r.getMessage() for r in caplog.records if r.name == "chattts_gateway.chattts"]
    assert len(warnings) == 1
    assert "decode steps stay in torch" in warnings[0]
    audio = np.concatenate(list(engine.synthesize(SynthesisRequest("Still speaks.", "alloy"), CancelFlag())))
    assert np.abs(audio.astype(np.int32)).max() > 0


def test_auto_steps_in_torch_where_the_backbone_is_not_float32() -> None:
    info = ChatTTSEngine(chattts_engine_options(dtype="bfloat16", max_batch=1)).load()
    assert info.details["decoder"] == "torch"


def test_int8_weights_run_a_quantized_graph_beside_the_float32_one(tmp_path: Path) -> None:
    import onnx

    assets = tmp_path / "assets"
    shutil.copytree(tiny_assets_dir(), assets, ignore=shutil.ignore_patterns("onnx"))
    engine = ChatTTSEngine(chattts_engine_options(path=str(assets), decoder="onnxruntime", weights="int8", max_batch=1))
    info = engine.load()
    assert (info.details["decoder"], info.details["decode_weights"]) == ("onnxruntime", "int8")
    assert engine._graph is not None
    graphs = {path.name: path for path in (assets / "onnx").glob("decode-step-*.onnx")}
    assert len(graphs) == 2, "the float32 graph, and the 8-bit one made from it"
    operators = {node.op_type for node in onnx.load(str(engine._graph.path)).graph.node}
    assert "MatMulNBits" in operators
    audio = np.concatenate(list(engine.synthesize(SynthesisRequest("Eight bits.", "alloy"), CancelFlag())))
    assert len(audio) == SAMPLES_PER_SEGMENT
    assert np.abs(audio.astype(np.int32)).max() > 0


# ----------------------------------------------------------------- max_batch: auto
@pytest.mark.parametrize(
    ("step_ms", "memory_rows", "chosen"),
    [
        ({1: 45.0, 2: 50.0, 4: 70.0, 8: 88.0, 16: 140.0}, 64, 8),  # a 2-core CPU: slower than playback at any size
        ({1: 45.0, 2: 50.0, 4: 70.0, 8: 88.0, 16: 140.0}, 5, 4),  # memory for 5 rows
        ({1: 8.0, 2: 8.5, 4: 9.0, 8: 12.0, 16: 20.0}, 64, 16),  # a GPU: every size keeps up with playback
        ({1: 45.0, 2: 100.0}, 64, 1),
    ],
)
def test_auto_takes_the_largest_batch_within_the_limits(step_ms: dict[int, float], memory_rows: int,
                                                        chosen: int) -> None:  # fmt: skip
    assert choose_batch(step_ms, memory_rows, realtime_share=1.0, max_slowdown=2.0) == chosen


def test_a_batch_that_keeps_up_with_playback_qualifies_however_slow_for_its_size() -> None:
    steps = {1: 2.0, 2: 2.5, 4: 10.0, 8: REALTIME_MS * 0.9, 16: REALTIME_MS * 1.2}
    assert choose_batch(steps, 64, realtime_share=1.0, max_slowdown=2.0) == 8


def test_auto_batch_is_measured_at_load_and_shown() -> None:
    engine = ChatTTSEngine(chattts_engine_options())
    info = engine.load()
    assert info.details["decoder"] == "onnxruntime"
    assert info.details["max_batch"].startswith(f"{info.max_batch} (auto; step at 1: ")
    assert info.max_batch in (1, 2, 4, 8, 16)


def test_a_number_overrides_auto(loaded: dict[str, tuple[ChatTTSEngine, EngineInfo]]) -> None:
    _, info = loaded["onnxruntime"]
    assert (info.max_batch, info.details["max_batch"]) == (4, "4")
