"""``max_batch: auto``'s timing at load: workers of one machine time their decode steps one at a time (they load
together, and each would time the others' steps with its own). ChatTTS on tiny random-weight assets."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from engines.chattts import ChatTTSEngine
from engines.chattts.batch_size import _CONTEXT, BATCH_SIZES, measure_batch, time_steps
from tests.chattts_assets import chattts_engine_options

pytestmark = pytest.mark.slow  # runs ChatTTS: left out of `make quick`


@pytest.fixture(scope="module")
def engine() -> ChatTTSEngine:
    loaded = ChatTTSEngine(chattts_engine_options(decoder="onnxruntime"))
    info = loaded.load()
    assert info.details["max_batch"].startswith(f"{info.max_batch} (auto; step at 1: ")
    return loaded


def test_every_size_that_fits_is_timed_whatever_one_of_them_measured(engine: ChatTTSEngine) -> None:
    # Nothing beyond one row qualifies here: a noisy timing of one size no longer ends the timing there.
    strict = engine.options.model_copy(update={"auto_batch_realtime_share": 1e-9, "auto_batch_max_slowdown": 1.0})
    choice = measure_batch(engine._chat, engine._graph, strict)
    assert sorted(choice.step_ms) == list(BATCH_SIZES)
    assert choice.size == 1 or choice.step_ms[choice.size] <= choice.step_ms[1]


def test_workers_of_one_machine_time_their_steps_one_at_a_time(engine: ChatTTSEngine) -> None:
    lock = Path(tempfile.gettempdir()) / "chattts-gateway-batch-timing.lock"
    with subprocess.Popen(  # another worker, timing its own steps for a second
        [sys.executable, "-c", "import fcntl, sys, time\n"
         f"f = open({str(lock)!r}, 'a'); fcntl.flock(f, fcntl.LOCK_EX); print('timing', flush=True); time.sleep(1.0)"],
        stdout=subprocess.PIPE, text=True,
    ) as holder:  # fmt: skip
        assert holder.stdout is not None and holder.stdout.readline() == "timing\n"
        started = time.monotonic()
        steps = time_steps(engine._chat, engine._graph, [1, 2])
        waited = time.monotonic() - started
    assert sorted(steps) == [1, 2]
    assert waited >= 0.8, "timed while another worker was timing"


def test_steps_are_timed_over_a_served_segments_context(engine: ChatTTSEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    # A step reads every row's keys and values: timed over a near-empty cache, big batches looked cheaper than served.
    assert engine._graph is not None
    attended: list[tuple[int, int]] = []
    step = engine._graph.step

    def recording(hidden: Any, cos: Any, sin: Any, bias: Any, cache: Any) -> Any:
        attended.append(tuple(bias.shape))  # (rows, positions attended over)
        return step(hidden, cos, sin, bias, cache)

    monkeypatch.setattr(engine._graph, "step", recording)
    time_steps(engine._chat, engine._graph, [1, 4])
    assert {rows for rows, _ in attended} == {1, 4}
    assert min(positions for _, positions in attended) > _CONTEXT
