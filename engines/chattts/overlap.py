"""The streaming decode (the DVAE decoder and Vocos, in torch) beside the token loop, or between its steps.

Between steps, every row's next token waits for each chunk's decode. Beside them (``stream_decode_overlap``), a due
chunk's window goes to one decode thread and the token loop takes its next steps meanwhile: torch's and ONNX
Runtime's kernels let go of the GIL, so the two share the CPU's cores, and the chunk's audio leaves at the first pass
after its decode has ended. The engine keeps each request's chunks in order (one window in flight per request, the
next one taken once its audio is out) and still waits for a first chunk before the next step, so that a new listener
hears it as soon as between the steps. A chunk decoded beside the steps covers the tokens there were when it was
handed over (:meth:`StreamDecoder.window`); those that came meanwhile go with the next one: with chunks of a fixed
size, the audio is the same either way (``tests/unit/engines/test_decode_overlap.py``).

ONNX Runtime's decode-step threads do not spin between steps (``onnx_step.open_session``), so the decode thread gets
a core whenever a step's threads wait; torch's steps leave OpenMP threads spinning on both cores, where a decode
thread beside them mostly took turns with them (``bench/chattts_overlap.py``). On 2 cores both are busy most of a
step: the overlap gains the cores' idle time, which other work on the machine takes as well. ``auto`` is on where
the steps run in ONNX Runtime (BENCHMARKS.md: 1.19-1.21x the audio at concurrency 1 on 2 quiet cores).
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import torch

from engines.chattts import streaming

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from engines.chattts.audio_graph import AudioGraph

__all__ = ["DecodeRunner"]

Audio = list["npt.NDArray[np.float32]"]


class DecodeRunner:
    """Decodes windows (:func:`engines.chattts.streaming.decode_windows`) at once in the calling thread, or, with
    ``overlap``, in one decode thread of its own, first handed first decoded.

    A decode nothing runs beside (``alone``: a first chunk, which the token loop waits for, a last one with no other
    row in the loop, every decode between the steps) goes through the graph's session of ``alone_threads`` threads
    where it has one: ONNX Runtime's threads do not spin, and on 2 quiet cores an 8-bit 102-token window took 68 ms
    on two against 113 on one (``bench/chattts_stream_decode.py``). What runs in torch (the whole decode without a
    graph, the inverse STFT with one) keeps ``threads``: torch's OpenMP threads spin after each op, on the cores the
    next step needs (``stream_decode_threads``)."""

    def __init__(
        self, *, overlap: bool, threads: int | None, graph: AudioGraph | None = None, alone_threads: int | None = None
    ) -> None:
        self.overlap, self.graph = overlap, graph
        # A thread starts with torch's default count, not the loop's: ``None`` (the worker's threads) is the count now.
        self._threads = threads if threads is not None or not overlap else torch.get_num_threads()
        self._alone_graph = graph.on(alone_threads) if graph is not None and alone_threads is not None else graph
        self._pool: ThreadPoolExecutor | None = None
        self._pid = 0

    def submit(
        self, chat: Any, windows: list[torch.Tensor], *, alone: bool = False, repeatable: bool = False
    ) -> Future[Audio]:
        """The windows' audio, in their order: done on return unless ``overlap``; ``alone``: nothing runs beside (as
        nothing does without ``overlap``); ``repeatable``: a seeded request's window, whose audio must not depend on
        what runs beside it, so it goes through one session wherever it runs (the alone one, which every decode takes
        without ``overlap``): a session's threads round an 8-bit product's sums."""
        if not self.overlap:
            future: Future[Audio] = Future()
            future.set_result(streaming.decode_windows(chat, windows, self._threads, self._alone_graph))
            return future
        graph = self._alone_graph if alone or repeatable else self.graph
        return self._thread().submit(_decode, chat, windows, self._threads, graph)

    def _thread(self) -> ThreadPoolExecutor:
        # Started at the first decode, and again in a forked process: a fork copies no thread.
        if self._pool is None or self._pid != os.getpid():
            self._pool, self._pid = ThreadPoolExecutor(1, thread_name_prefix="chattts-decode"), os.getpid()
        return self._pool


def _decode(chat: Any, windows: list[torch.Tensor], threads: int | None, graph: AudioGraph | None) -> Audio:
    # Looked up at each call: the profiler (bench/served_profile.py) and tests wrap the module's function.
    return streaming.decode_windows(chat, windows, threads, graph)
