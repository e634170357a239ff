"""Waiting in tests for something another process or task will do: poll a condition, within a bound.

The bounds are generous, for the machine may be busy: a test fails on a bound only when what it waits for never
happens, and the failure says what that was.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["wait_for", "wait_until"]

_INTERVAL_S = 0.02


def wait_until(condition: Callable[[], bool], timeout_s: float = 15.0, what: str = "the condition") -> None:
    """Block until ``condition()`` holds; fail the test after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout_s:g} s")
        time.sleep(_INTERVAL_S)


async def wait_for(condition: Callable[[], bool], timeout_s: float = 15.0, what: str = "the condition") -> None:
    """Wait, without blocking the event loop, until ``condition()`` holds; fail the test after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout_s:g} s")
        await asyncio.sleep(_INTERVAL_S)
