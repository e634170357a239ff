"""A machine with no CPU to spare, made small: processes pinned to one core beside a process that computes
without end, at the normal priority, as engines busy with synthesis would be."""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import contextmanager
from typing import TYPE_CHECKING

import psutil

from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["children_running", "starved_of_cpu"]

_HOG = "import os, sys\nos.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True:\n    pass\n"


def children_running(module: str) -> list[int]:
    """This process's children started as ``python -m module``."""
    return [child.pid for child in psutil.Process().children() if module in " ".join(_cmdline(child))]


@contextmanager
def starved_of_cpu(pids: list[int]) -> Iterator[None]:
    """``pids`` confined to one core that a process of the normal priority keeps busy while the block runs."""
    core = min(os.sched_getaffinity(0))
    for pid in pids:
        os.sched_setaffinity(pid, {core})
    hog = psutil.Popen([sys.executable, "-c", _HOG, str(core)], stdin=subprocess.DEVNULL)
    try:
        wait_until(lambda: hog.cpu_times().user > 0.05, what="the core taken")
        yield
    finally:
        hog.kill()
        hog.wait()


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:  # ended meanwhile
        return []
