"""Tiny ChatTTS assets with random weights, generated once per test session (process) into a temporary directory."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

__all__ = ["chattts_engine_options", "chattts_tiny_assets", "tiny_assets_dir"]

#: Tokens per sentence segment in tests: random weights rarely emit EOS, so lengths are bounded (and exact).
TEST_TOKENS = 48

_generated: Path | None = None


def tiny_assets_dir() -> Path:
    """The session's tiny asset directory (generated on first use, removed at exit). Treat it as read-only."""
    global _generated  # noqa: PLW0603 - one directory per process, shared by every module that asks
    if _generated is None:
        from engines.chattts.assets import generate_assets

        directory = Path(tempfile.mkdtemp(prefix="chattts-tiny-"))
        atexit.register(shutil.rmtree, directory, ignore_errors=True)
        generate_assets(directory, "tiny", seed=0)
        _generated = directory
    return _generated


def chattts_engine_options(**overrides: object) -> dict[str, object]:
    """Engine options for the tiny assets, with exact segment lengths and float32 decode steps (``weights: auto``
    would take 8 bits on most CPUs: tests that compare the decoders need torch's logits; 8-bit tests ask for it)."""
    options: dict[str, object] = {
        "source": "dir", "path": str(tiny_assets_dir()), "max_new_token": TEST_TOKENS, "min_new_token": TEST_TOKENS,
        "weights": "float32",
    }  # fmt: skip
    return {**options, **overrides}


@pytest.fixture(scope="session")
def chattts_tiny_assets() -> Path:
    return tiny_assets_dir()


def audio_tolerance(engine: Any, reference: np.ndarray) -> float:
    """How far a seeded request's int16 audio may stand from ``reference``, the same request spoken alone: 2 (the
    batched steps' hidden states differ from a lone row's by float rounding, left padding). With 8-bit audio products
    (``audio_weights: int8``) such a difference can tip an activation's 8-bit rounding: within 1 % of the audio's
    peak (measured: 9 of 3,411)."""
    runner = engine._decodes
    if runner is not None and runner.graph is not None and runner.graph.int8:
        return max(2.0, 0.01 * float(np.abs(reference).max()))
    return 2.0
