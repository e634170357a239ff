"""Encoding that may wait: a speech job's audio is encoded on a thread of its own at a lower CPU priority, so that the
event loop (and the interactive requests it serves) does not spend its time slice on it.

LAME (``lameenc``) and PyAV release the GIL while they encode, so the thread's work runs beside the event loop's
rather than between its steps; Linux's niceness is per thread (``setpriority`` on the thread's own id), so a busy CPU
goes to the event loop and the interactive workers first.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["encode_in_background"]

_NICENESS = 10


def _lower_priority() -> None:
    with contextlib.suppress(OSError, AttributeError):  # not Linux: the thread keeps the process's priority
        thread = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, thread, min(19, os.getpriority(os.PRIO_PROCESS, thread) + _NICENESS))


_ENCODER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="background-encoding", initializer=_lower_priority)


async def encode_in_background(encode: Callable[[bytes], bytes], pcm: bytes) -> bytes:
    """``encode(pcm)`` on the background thread (one thread: pieces are encoded in the order they are given)."""
    return await asyncio.get_running_loop().run_in_executor(_ENCODER, encode, pcm)
