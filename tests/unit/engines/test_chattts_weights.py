"""``weights: auto``: 8-bit decode steps where ONNX Runtime runs them on a CPU with the instructions its 8-bit
products use, float32 elsewhere; the choice is in the engine's details (``/readyz``)."""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING

import numpy as np
import pytest

from engines.base import CancelFlag, SynthesisRequest
from engines.chattts import ChatTTSEngine
from engines.chattts.options import ChatTTSOptions
from engines.chattts.weights import choose_weights, int8_instructions
from tests.chattts_assets import chattts_engine_options, tiny_assets_dir

if TYPE_CHECKING:
    from pathlib import Path

ZEN3 = "processor\t: 0\nflags\t\t: fpu sse2 avx fma avx2 bmi2\n"
SAPPHIRE_RAPIDS = "flags\t\t: fpu sse2 avx fma avx2 avx512f avx512bw avx512_vnni avx_vnni amx_int8\n"
SANDY_BRIDGE = "flags\t\t: fpu sse2 avx\n"
GRAVITON3 = "processor\t: 0\nFeatures\t: fp asimd asimddp sve i8mm\n"
CORTEX_A72 = "Features\t: fp asimd crc32\n"


def test_the_default_is_auto() -> None:
    assert ChatTTSOptions().weights == "auto"


@pytest.mark.parametrize(
    ("cpuinfo", "machine", "found"),
    [
        (ZEN3, "x86_64", "avx2, fma"),
        (SAPPHIRE_RAPIDS, "x86_64", "avx2, fma, avx512_vnni, avx_vnni"),
        (SANDY_BRIDGE, "x86_64", None),
        (GRAVITON3, "aarch64", "asimddp"),
        (CORTEX_A72, "aarch64", None),
        ("", "x86_64", None),
    ],
)
def test_the_instructions_onnxruntimes_8_bit_products_need(cpuinfo: str, machine: str, found: str | None) -> None:
    assert int8_instructions(cpuinfo, machine) == found


def test_auto_takes_8_bits_only_for_onnxruntime_on_a_cpu_that_has_them() -> None:
    assert choose_weights("auto", onnxruntime_on_cpu=True, instructions="avx2, fma").describe() == (
        "int8 (auto; onnxruntime on a CPU with avx2, fma)"
    )
    assert choose_weights("auto", onnxruntime_on_cpu=True, instructions="").weights == "float32"
    assert choose_weights("auto", onnxruntime_on_cpu=False, instructions="avx2, fma").describe() == (
        "float32 (auto; the decode steps run in torch)"
    )
    # Asked for outright: as asked, where there is a graph to quantize; float32 torch steps otherwise.
    assert choose_weights("int8", onnxruntime_on_cpu=True, instructions="").describe() == "int8"
    assert choose_weights("int8", onnxruntime_on_cpu=False).describe() == "float32"
    assert choose_weights("float32", onnxruntime_on_cpu=True, instructions="avx2, fma").describe() == "float32"


@pytest.mark.slow
def test_auto_runs_the_8_bit_graph_on_this_cpu_with_onnxruntime(tmp_path: Path) -> None:
    import onnx

    assets = tmp_path / "assets"
    shutil.copytree(tiny_assets_dir(), assets, ignore=shutil.ignore_patterns("onnx"))
    engine = ChatTTSEngine(chattts_engine_options(path=str(assets), weights="auto", device="cpu", max_batch=1))
    info = engine.load()
    assert info.details["decoder"] == "onnxruntime"
    assert engine._graph is not None
    operators = {node.op_type for node in onnx.load(str(engine._graph.path)).graph.node}
    found = int8_instructions()
    if found:  # this CPU has them (every x86-64 CPU since 2013 does, and ARM64 servers)
        assert info.details["decode_weights"] == f"int8 (auto; onnxruntime on a CPU with {found})"
        assert "MatMulNBits" in operators
    else:
        assert info.details["decode_weights"].startswith("float32 (auto; this CPU lacks")
        assert "MatMulNBits" not in operators
    audio = np.concatenate(list(engine.synthesize(SynthesisRequest("Auto.", "alloy"), CancelFlag())))
    assert np.abs(audio.astype(np.int32)).max() > 0


@pytest.mark.slow
def test_auto_keeps_float32_with_the_torch_decoder() -> None:
    engine = ChatTTSEngine(chattts_engine_options(weights="auto", decoder="torch", max_batch=1))
    info = engine.load()
    assert engine._graph is None
    assert (info.details["decoder"], info.details["decode_weights"]) == (
        "torch", "float32 (auto; the decode steps run in torch)"
    )  # fmt: skip
