# ruff: noqa: PLC0415 - torch is imported lazily: the server process never loads it
"""``max_batch: auto``: the batch size a worker takes, measured on its own machine at load.

A decode step reads every weight once whatever the rows, so more rows cost little until the products stop being bound
by memory; where that happens depends on the machine (2 cores: about 1.1x at 2 rows, 1.8x at 8; a GPU: nearly flat).
A fixed ``max_batch`` leaves either throughput or latency on the table. At load, the step (the decode graph or torch,
whichever the engine steps with) is timed at :data:`BATCH_SIZES` rows, and the largest size is taken whose step

- keeps up with playback: it takes at most ``auto_batch_realtime_share`` of the audio one token makes (21.3 ms),
  so that a streamed segment never waits for its tokens; or
- costs at most ``auto_batch_max_slowdown`` times a one-row step: each sequence of a full batch then generates at
  least that share as fast as alone (what decides on a CPU that keeps up with playback at no batch size),

and whose rows' KV caches fit in half the memory available at load (each row at its longest: the longest prompt and
``max_new_token`` tokens, with the cache's spare room). Every size that fits is timed, each row over a served
sentence's context (:data:`_CONTEXT`), the sizes stepping in turns, and one worker of the machine times at a time (a
file lock in the temporary directory): timings taken while other work ran on the machine chose 1 or 4 rows where 8
qualify. On the tiny test weights this takes milliseconds, on the full model about a second.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lifecycle import naming

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping
    from typing import IO

    import torch

    from engines.chattts.onnx_step import DecodeGraph

__all__ = [
    "BATCH_SIZES", "TOKEN_S", "BatchChoice", "choose_batch", "describe_first_chunks", "first_chunk_tokens",
    "kv_bytes_per_row", "measure_batch", "time_steps", "time_steps_up_to",
]  # fmt: skip

logger = naming.logger("chattts")

BATCH_SIZES = (1, 2, 4, 8, 16)
TOKEN_S = 512 / 24000
"""The audio one token makes: 512 samples at 24 kHz."""
_MEMORY_SHARE = 0.5
"""Of the memory available at load, what the rows' KV caches may take (the rest: other workers, audio, buffers)."""
_SAMPLE_TOKENS_PER_S = 47
"""Prompt positions per second of a voice sample (its audio codes)."""
_SPARE_ROOM = 1.5
"""The KV cache's buffers hold up to half again what they use (``engines/chattts/kv_cache.py``)."""
_CONTEXT = 96
"""Prompt positions of every timed row: with the cache's spare room its steps attend over 160 columns, about what a
served sentence's steps do (a 128-token segment from a 20-token prompt: 115 on average; longer ones more). A step
reads every column of every row: timed over 72 (an 8-token prompt), 8 rows looked 1.05-1.12x and 16 rows 1.15-1.2x
cheaper than over 160 (2 cores, alternating), and ``auto`` took 16 rows whose steps over 160 columns took 2.6x one
row's, past its bound of 2.5."""
_TIMED_STEPS = 4
_TURN_FILE = "chattts-gateway-batch-timing.lock"
_TURN_WAIT_S = 120.0


@dataclass(frozen=True, slots=True)
class BatchChoice:
    size: int
    step_ms: dict[int, float]
    """The measured step per batch size."""
    memory_rows: int
    """The most rows whose KV caches fit."""

    def describe(self) -> str:
        steps = ", ".join(f"{rows}: {ms:.1f} ms" for rows, ms in self.step_ms.items())
        return f"{self.size} (auto; step at {steps}; memory for {self.memory_rows} rows)"


def qualifies(step_ms: float, one_row_ms: float, realtime_share: float, max_slowdown: float) -> bool:
    """Whether a batch whose step takes ``step_ms`` is admitted (see the module's docstring)."""
    return step_ms <= realtime_share * TOKEN_S * 1000 or step_ms <= max_slowdown * one_row_ms


def choose_batch(step_ms: dict[int, float], memory_rows: int, realtime_share: float, max_slowdown: float) -> int:
    """The largest measured size that qualifies and fits in memory (at least 1)."""
    one_row = step_ms[min(step_ms)]
    fitting = [
        rows for rows, ms in step_ms.items()
        if rows <= memory_rows and qualifies(ms, one_row, realtime_share, max_slowdown)
    ]  # fmt: skip
    return max(fitting, default=1)


def first_chunk_tokens(step_ms: Mapping[int, float], rows: int, tokens: int, least: int) -> int:
    """Tokens before a first chunk in a batch of ``rows``: as many as take the time ``tokens`` one-row steps take
    (``step_ms`` as measured, between measured sizes the straight line, above the largest its step), at least
    ``least``, at most ``tokens``."""
    sizes = sorted(step_ms)
    below = max((size for size in sizes if size <= rows), default=sizes[0])
    above = min((size for size in sizes if size >= rows), default=sizes[-1])
    step = step_ms[below]
    if above != below:
        step += (step_ms[above] - step_ms[below]) * (rows - below) / (above - below)
    paced = round(tokens * step_ms[sizes[0]] / step)
    return max(min(least, tokens), min(tokens, paced))


def describe_first_chunks(step_ms: Mapping[int, float], tokens: int, least: int) -> str:
    """The first chunk's tokens per measured batch size, for the engine's details."""
    if not step_ms:
        return f"{tokens} tokens"
    sizes = ", ".join(f"{first_chunk_tokens(step_ms, rows, tokens, least)} at {rows}" for rows in sorted(step_ms))
    return f"tokens per batch size: {sizes}"


def measure_batch(chat: Any, graph: DecodeGraph | None, options: Any) -> BatchChoice:
    """Time the decode step at each of :data:`BATCH_SIZES` that fits in memory and choose."""
    memory_rows = rows_in_memory(chat, options)
    step_ms = time_steps(chat, graph, [rows for rows in BATCH_SIZES if rows == 1 or rows <= memory_rows])
    size = choose_batch(step_ms, memory_rows, options.auto_batch_realtime_share, options.auto_batch_max_slowdown)
    return BatchChoice(size, step_ms, memory_rows)


def time_steps_up_to(chat: Any, graph: DecodeGraph | None, max_batch: int) -> dict[int, float]:
    """The step timed at each of :data:`BATCH_SIZES` below a fixed ``max_batch`` and at ``max_batch`` itself."""
    return time_steps(chat, graph, [rows for rows in BATCH_SIZES if rows < max_batch] + [max_batch])


def time_steps(chat: Any, graph: DecodeGraph | None, sizes: list[int]) -> dict[int, float]:
    """The best of a few decode steps per batch size in ms, one worker of the machine at a time."""
    with _timing_turn():
        return _steps_ms(chat, graph, sizes)


def _steps_ms(chat: Any, graph: DecodeGraph | None, sizes: list[int]) -> dict[int, float]:
    """The sizes step in turns (after their prefill and one step to warm up): a moment of other work on the machine
    slows one turn, which the best of the turns leaves out, rather than every step of one size. Every row attends
    over :data:`_CONTEXT` positions, one prompt's: prefilled once, then copied into the other rows' caches (as a
    voice prompt's shared beginning is, ``engines/chattts/prefix_cache.py``)."""
    from engines.base import CancelFlag
    from engines.chattts.generation import CodeBatch, CodeRequest, Sampling
    from engines.chattts.prefix_cache import PrefixCache

    tokens = _TIMED_STEPS + 2
    prompt = list(range(1, _CONTEXT + 1))
    prefixes = PrefixCache(max_bytes=1 << 62)  # one entry, dropped with the batches
    batches = {rows: CodeBatch(chat, Sampling(), graph=graph, prefixes=prefixes) for rows in sizes}
    for rows, batch in batches.items():
        batch.join([
            CodeRequest(row, prompt, None, row, tokens, tokens, CancelFlag(), shared_prefix=_CONTEXT - 1)
            for row in range(rows)
        ])  # fmt: skip
        batch.step()  # the prefill and each row's first token
        batch.step()
    timed = [{rows: _timed(batch.step) for rows, batch in batches.items()} for _ in range(_TIMED_STEPS)]
    return {rows: 1000 * min(turn[rows] for turn in timed) for rows in sizes}


@contextmanager
def _timing_turn() -> Iterator[None]:
    """One worker of this machine times its steps at a time: workers (of one gateway or several) load together, and
    each would time the others' steps with its own. Waits at most :data:`_TURN_WAIT_S`, then times anyway."""
    try:
        turn = (Path(tempfile.gettempdir()) / _TURN_FILE).open("a")
    except OSError as exc:  # another user's lock file, a read-only /tmp: time without taking turns
        logger.warning("max_batch: timing without taking turns with other workers (%s)", exc.strerror)
        yield
        return
    with turn:
        if _take_turn(turn):
            try:
                yield
            finally:
                fcntl.flock(turn, fcntl.LOCK_UN)
            return
        logger.warning("max_batch: another worker is still timing its steps; timing beside it")
        yield


def _take_turn(turn: IO[str]) -> bool:
    deadline = time.monotonic() + _TURN_WAIT_S
    while True:
        try:
            fcntl.flock(turn, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        else:
            return True


def _timed(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def kv_bytes_per_row(chat: Any, options: Any) -> int:
    """A row's KV cache at its longest: every layer's keys and values over the longest prompt (a segment's text and
    tags, and a voice sample's codes) and ``max_new_token`` tokens, with the cache's spare room."""
    config = chat.gpt.gpt.config
    head_dim = config.hidden_size // config.num_attention_heads
    per_column = 2 * config.num_hidden_layers * config.num_key_value_heads * head_dim * chat.gpt.gpt.dtype.itemsize
    columns = options.max_new_token + options.max_segment_chars + 16 + options.max_sample_s * _SAMPLE_TOKENS_PER_S
    return int(per_column * columns * _SPARE_ROOM)


def rows_in_memory(chat: Any, options: Any) -> int:
    """How many rows' KV caches fit in the memory share (:data:`_MEMORY_SHARE`) available now on the model's device."""
    return max(1, int(_MEMORY_SHARE * _available_bytes(chat.device_gpt) // kv_bytes_per_row(chat, options)))


def _available_bytes(device: torch.device) -> int:
    import torch

    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        # Linux: MemAvailable counts the page cache the kernel may reclaim.
        fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
        return int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
