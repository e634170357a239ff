"""The streaming decode's network through ONNX Runtime (``audio_decoder``, ``audio_weights``), on tiny random-weight
assets: the float32 graph gives torch's audio, the 8-bit one stays near it and keeps each row's audio whatever shares
its decode, graphs are kept per weights, a graph that cannot run leaves the decode to torch, and the engine's
details say which runs."""

from __future__ import annotations

import logging
import shutil
from typing import TYPE_CHECKING

import numpy as np
import pytest

from engines.base import CancelFlag, SynthesisRequest
from engines.chattts import ChatTTSEngine
from engines.chattts.audio_graph import AudioGraph, audio_graph_key, load_audio_graph
from engines.chattts.loader import verify_directory
from engines.chattts.onnx_step import graph_path
from engines.chattts.streaming import decode_windows
from tests.chattts_assets import chattts_engine_options, tiny_assets_dir

if TYPE_CHECKING:
    from pathlib import Path

    import torch

pytestmark = pytest.mark.slow  # runs ChatTTS: left out of `make quick`

LENGTHS = (24, 64, 64, 40)
"""Window lengths (tokens): two of one length share a call."""


@pytest.fixture(scope="module")
def engine() -> ChatTTSEngine:
    loaded = ChatTTSEngine(chattts_engine_options(decoder="torch", max_batch=1))
    loaded.load()
    return loaded


@pytest.fixture(scope="module")
def windows(engine: ChatTTSEngine) -> list[torch.Tensor]:
    import torch

    hidden = int(engine._chat.config.gpt.hidden_size)
    generator = torch.Generator().manual_seed(7)
    return [torch.randn(length, hidden, generator=generator) for length in LENGTHS]


def graph(engine: ChatTTSEngine, directory: Path, *, int8: bool) -> AudioGraph:
    location = verify_directory(tiny_assets_dir())
    built = load_audio_graph(engine._chat, location.hashes, directory, directory, 1, int8=int8)
    assert built is not None
    return built


def peak(audio: list[np.ndarray]) -> float:
    return max(float(np.abs(row).max()) for row in audio)


def test_the_float32_graph_gives_torchs_audio(
    engine: ChatTTSEngine, windows: list[torch.Tensor], tmp_path: Path
) -> None:
    reference = decode_windows(engine._chat, windows)
    ours = decode_windows(engine._chat, windows, graph=graph(engine, tmp_path, int8=False))
    assert [len(row) for row in ours] == [len(row) for row in reference] == [length * 512 - 256 for length in LENGTHS]
    for mine, theirs in zip(ours, reference, strict=True):
        np.testing.assert_allclose(mine, theirs, atol=1e-5 * peak(reference))


def test_the_8_bit_graph_stays_near_float32(engine: ChatTTSEngine, windows: list[torch.Tensor], tmp_path: Path) -> None:
    reference = decode_windows(engine._chat, windows)
    ours = decode_windows(engine._chat, windows, graph=graph(engine, tmp_path, int8=True))
    for mine, theirs in zip(ours, reference, strict=True):
        assert not np.allclose(mine, theirs, atol=1e-5 * peak(reference)), "8-bit products round: not float32's audio"
        assert np.linalg.norm(mine - theirs) < 0.05 * np.linalg.norm(theirs)


def test_a_row_of_the_8_bit_graph_sounds_the_same_alone(
    engine: ChatTTSEngine, windows: list[torch.Tensor], tmp_path: Path
) -> None:
    """Each frame's activations take their own scales: a window decoded beside another of its length (one call)
    gets the audio it gets alone."""
    audio_graph = graph(engine, tmp_path, int8=True)
    together = decode_windows(engine._chat, windows, graph=audio_graph)
    for window, audio in zip(windows, together, strict=True):
        (alone,) = decode_windows(engine._chat, [window], graph=audio_graph)
        np.testing.assert_allclose(audio, alone, atol=1e-5 * peak(together))


def test_the_graph_is_kept_per_weights(engine: ChatTTSEngine, tmp_path: Path) -> None:
    """Other weights get another file; the same weights reuse theirs, float32 and 8-bit, without building again."""
    from engines.chattts.assets import generate_assets

    other = tmp_path / "other"
    generate_assets(other, "tiny", seed=1)
    hashes = [verify_directory(path).hashes for path in (tiny_assets_dir(), other)]
    keys = {audio_graph_key(found, int8=int8) for found in hashes for int8 in (False, True)}
    assert len(keys) == 4
    built = [graph(engine, tmp_path, int8=int8).path for int8 in (False, True)]
    assert {path.name for path in (tmp_path / "onnx").iterdir()} == {path.name for path in built}
    made = [path.stat().st_mtime_ns for path in built]
    assert [graph(engine, tmp_path, int8=int8).path.stat().st_mtime_ns for int8 in (False, True)] == made


def test_a_graph_that_cannot_run_leaves_the_decode_to_torch(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    assets = tmp_path / "assets"
    shutil.copytree(tiny_assets_dir(), assets, ignore=shutil.ignore_patterns("onnx"))
    hashes = verify_directory(assets).hashes
    graph_path(assets, tmp_path, audio_graph_key(hashes, int8=False), "audio-decoder").write_bytes(b"not a graph")
    with caplog.at_level(logging.WARNING, logger="chattts_gateway.chattts"):
        engine = ChatTTSEngine(chattts_engine_options(path=str(assets), audio_weights="float32", max_batch=1))
        info = engine.load()
    assert (info.details["decoder"], info.details["audio_decoder"]) == ("onnxruntime", "torch")
    warnings = [r.getMessage() for r in caplog.records if r.name == "chattts_gateway.chattts"]
    assert len(warnings) == 1
    assert "audio decoded in torch" in warnings[0]
    audio = np.concatenate(list(engine.synthesize(SynthesisRequest("Still speaks.", "alloy"), CancelFlag())))
    assert np.abs(audio.astype(np.int32)).max() > 0


@pytest.mark.parametrize(
    ("options", "shown"),
    [
        ({"decoder": "onnxruntime", "weights": "float32"}, "onnxruntime float32"),
        ({"decoder": "onnxruntime", "weights": "int8"}, "onnxruntime int8"),
        ({"decoder": "onnxruntime", "weights": "int8", "audio_weights": "float32"}, "onnxruntime float32"),
        ({"decoder": "onnxruntime", "audio_decoder": "torch"}, "torch"),
        ({"decoder": "torch"}, "torch"),
        ({"decoder": "torch", "audio_decoder": "onnxruntime", "audio_weights": "int8"}, "onnxruntime int8"),
    ],
    ids=[
        "auto-float32",
        "auto-int8",
        "int8-steps-float32-audio",
        "asked-torch",
        "auto-beside-torch-steps",
        "asked-beside-torch-steps",
    ],
)
def test_the_details_say_what_decodes_the_audio(options: dict[str, str], shown: str) -> None:
    engine = ChatTTSEngine(chattts_engine_options(max_batch=1, **options))
    info = engine.load()
    assert info.details["audio_decoder"] == shown
    audio = np.concatenate(list(engine.synthesize(SynthesisRequest("One sentence.", "alloy", seed=3), CancelFlag())))
    assert np.abs(audio.astype(np.int32)).max() > 0
