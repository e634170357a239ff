"""Background tasks that must outlive the call that started them.

asyncio holds only a weak reference to a running task: one started and forgotten can be garbage-collected before it
ends, and its exception, if it raises, is reported only when it is collected ("Task exception was never retrieved").
:class:`BackgroundTasks` keeps each task it starts until it ends, logs a failure when it ends, and cancels the ones
still running when its owner stops.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, TypeVar

from lifecycle import naming

if TYPE_CHECKING:
    from collections.abc import Coroutine

__all__ = ["BackgroundTasks", "cancel_and_wait"]

logger = naming.logger("tasks")

T = TypeVar("T")


class BackgroundTasks:
    """The background tasks of one owner (a pool, a limiter, a registry...).

    Args:
        owner: Named in the log line of a task that fails.
    """

    def __init__(self, owner: str) -> None:
        self._owner = owner
        self._tasks: set[asyncio.Task[Any]] = set()

    def __len__(self) -> int:
        return len(self._tasks)

    def spawn(self, coro: Coroutine[Any, Any, T], *, name: str | None = None) -> asyncio.Task[T]:
        """Run ``coro`` in a task kept until it ends (on the running loop)."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._ended)
        return task

    def spawn_threadsafe(self, loop: asyncio.AbstractEventLoop, coro_factory: _Factory) -> None:
        """Run ``coro_factory()`` in a task on ``loop`` from any thread (a finalizer's, say); nothing if it closed."""
        if not loop.is_closed():
            loop.call_soon_threadsafe(lambda: self.spawn(coro_factory()))

    def cancel(self) -> None:
        """Cancel every task still running (they end at their next await)."""
        for task in list(self._tasks):
            task.cancel()

    async def close(self) -> None:
        """Cancel every task still running and wait until all have ended."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _ended(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            logger.error("a background task of %s failed", self._owner, exc_info=error)


async def cancel_and_wait(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` and wait until it has ended; a failure of its own (not its cancellation) is raised here.

    Not ``task.cancel()`` then ``await task`` under ``suppress(CancelledError)``: a cancellation of the caller that
    arrives while it waits is passed on to ``task``, whose ``CancelledError`` the suppress then swallows, and the
    caller goes on as if it had not been cancelled. ``asyncio.wait`` raises the caller's cancellation in the caller.
    """
    task.cancel()
    await asyncio.wait([task])
    if not task.cancelled() and (error := task.exception()) is not None:
        raise error


if TYPE_CHECKING:
    from collections.abc import Callable

    _Factory = Callable[[], Coroutine[Any, Any, Any]]
