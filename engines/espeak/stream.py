"""Turns espeak's blocking, callback-driven synthesis into a generator of PCM chunks and word starts.

``espeak_Synth`` in synchronous mode only returns once the whole text is spoken, calling back with each buffer (and
the words that start in it) on the way. To hand buffers out as they come, it runs in a helper thread that feeds a
bounded queue; the generator drains the queue, and tells the helper to abort (the callback returns 1) when it is
cancelled or closed.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from engines.timing import WordStarts

if TYPE_CHECKING:
    from collections.abc import Callable, Generator

    import numpy as np
    import numpy.typing as npt

    from engines.base import CancelToken
    from engines.espeak.library import PcmSink, WordEvent

__all__ = ["ThreadedSynthesis"]

_POLL_S: Final = 0.02
"""How often a waiting side looks at the cancel token or the stop flag."""
_STOP_TIMEOUT_S: Final = 10.0
"""espeak stops within one buffer once asked; waiting longer than this means it hangs."""


@dataclass(frozen=True, slots=True)
class _Finished:
    error: BaseException | None = None


class ThreadedSynthesis:
    """One synthesis, run in a helper thread and consumed once through :meth:`chunks`.

    Args:
        speak: Runs the synthesis, handing each buffer to the sink it is given until the sink returns True.
        chunk_samples: Chunks longer than this are split.
        max_queued: How many chunks may wait for the consumer before the helper pauses.
    """

    def __init__(self, speak: Callable[[PcmSink], None], chunk_samples: int, max_queued: int) -> None:
        self._speak = speak
        self._chunk_samples = chunk_samples
        self._queue: queue.Queue[npt.NDArray[np.int16] | WordStarts | _Finished] = queue.Queue(maxsize=max_queued)
        self._stop = threading.Event()
        # A daemon, so that a hung native call cannot keep the worker process alive on exit.
        self._thread = threading.Thread(target=self._run, name="espeak-synthesis", daemon=True)

    def chunks(self, cancel: CancelToken) -> Generator[npt.NDArray[np.int16] | WordStarts, None, None]:
        """Yield the chunks as espeak produces them, each buffer's word starts before its chunks; stop early once
        ``cancel`` is set or the generator is closed.

        Raises:
            RuntimeError: espeak failed, or did not stop when asked.
        """
        self._thread.start()
        try:
            while not cancel.is_set():
                item = self._next_item()
                if isinstance(item, _Finished):
                    if item.error is not None:
                        raise item.error
                    return
                if item is not None:
                    yield item
        finally:
            self._halt()

    def _next_item(self) -> npt.NDArray[np.int16] | WordStarts | _Finished | None:
        try:
            return self._queue.get(timeout=_POLL_S)
        except queue.Empty:
            return None

    def _halt(self) -> None:
        self._stop.set()
        self._thread.join(timeout=_STOP_TIMEOUT_S)
        if self._thread.is_alive():
            raise RuntimeError(f"espeak-ng did not stop within {_STOP_TIMEOUT_S:.0f} s")

    def _run(self) -> None:
        try:
            self._speak(self._offer)
        except BaseException as exc:  # handed to the consumer, which re-raises it in its own thread
            self._put(_Finished(exc))
        else:
            self._put(_Finished())

    def _offer(self, pcm: npt.NDArray[np.int16], words: tuple[WordEvent, ...]) -> bool:
        if words and not self._put(WordStarts(words)):
            return True
        for start in range(0, pcm.size, self._chunk_samples):
            if not self._put(pcm[start : start + self._chunk_samples]):
                break
        return self._stop.is_set()

    def _put(self, item: npt.NDArray[np.int16] | WordStarts | _Finished) -> bool:
        # Bounded waits, so that a consumer that went away cannot leave the helper blocked forever.
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=_POLL_S)
            except queue.Full:
                continue
            return True
        return False
