"""Stopping background tasks: ``cancel_and_wait``, which every ``close`` of a long-lived loop uses."""

from __future__ import annotations

import asyncio

import pytest

from lifecycle import cancel_and_wait


async def test_it_waits_until_the_task_has_ended() -> None:
    cleaned_up = asyncio.Event()

    async def loop_with_cleanup() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            await asyncio.sleep(0.01)  # its cleanup takes a moment, and must be over when the caller goes on
            cleaned_up.set()

    task = asyncio.create_task(loop_with_cleanup())
    await asyncio.sleep(0)
    await cancel_and_wait(task)
    assert task.cancelled()
    assert cleaned_up.is_set()


async def test_a_caller_cancelled_while_it_waits_stays_cancelled() -> None:
    # The shutdown gives up on a close() in the turn it waits for its loop: `suppress(CancelledError)` around
    # `await task` swallowed that cancellation (asyncio passes it on to the task), and close() went on.
    task = asyncio.create_task(asyncio.sleep(3600))
    await asyncio.sleep(0)
    closing = asyncio.create_task(cancel_and_wait(task))
    await asyncio.sleep(0)  # closing now waits for the cancelled task
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closing
    await asyncio.sleep(0)
    assert task.cancelled()


async def test_a_task_that_fails_as_it_stops_raises_its_error() -> None:
    async def failing_cleanup() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            raise RuntimeError("cleanup failed") from None

    task = asyncio.create_task(failing_cleanup())
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="cleanup failed"):
        await cancel_and_wait(task)
