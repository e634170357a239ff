"""Pipecat's own test runner (``pipecat.tests.utils.run_test``), with time for its pipeline to start.

The runner gives a pipeline 1 s to start by default; on a loaded 2-core CI machine one took 2.4 s, so the test
failed before the gateway was asked anything. What the tests measure is the gateway's speech, not Pipecat's start.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["PIPELINE_START_S", "run_pipeline"]

PIPELINE_START_S = 30.0


async def run_pipeline(processor: Any, frames_to_send: list[Any]) -> list[Any]:
    """The frames ``processor`` sent downstream, ``frames_to_send`` pushed through it (Pipecat's ``run_test``)."""
    utils = importlib.import_module("pipecat.tests.utils")
    down, _ = await utils.run_test(processor, frames_to_send=frames_to_send, start_timeout=PIPELINE_START_S)
    return list(down)
