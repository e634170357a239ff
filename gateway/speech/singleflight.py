"""Single-flight: identical syntheses in flight on one replica share one producer (of any kind of chunk: the speech
service's are encoded audio with the words' times)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from lifecycle import naming

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence

__all__ = ["ProductionCancelledError", "SingleFlight"]

logger = naming.logger("cache")

T = TypeVar("T")

STORE_BEFORE_END_S = 0.5
"""How long a finished production's readers wait, at most, for its store before their streams end. A client that
repeats a request on another replica the moment its audio ended finds the entry there (this replica's own repeats
join the flight meanwhile); a slow or unreachable store never holds a reply longer than this."""


class ProductionCancelledError(Exception):
    """A shared synthesis was cancelled from outside (e.g. shutdown) while waiters were still reading it."""


class _Flight(Generic[T]):
    """One production and the chunks it has made so far."""

    def __init__(self) -> None:
        self.chunks: list[T] = []
        self.done = False
        self.error: BaseException | None = None
        self.waiters = 0
        self.task: asyncio.Task[None] | None = None
        self._news = asyncio.Event()

    def publish(self) -> None:
        """Wake every waiter; the next wait needs newer news."""
        self._news.set()
        self._news = asyncio.Event()

    def next_news(self) -> Awaitable[bool]:
        return self._news.wait()


class SingleFlight:
    """Identical requests in flight on one replica share one producer.

    The first caller of :meth:`stream` for a key starts ``produce()`` in a background task; every caller reads the
    chunks from the beginning and then follows new ones as they come. A caller that stops reading leaves the others
    undisturbed; when the last one leaves, the production is cancelled.
    """

    def __init__(self) -> None:
        self._flights: dict[str, _Flight[Any]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def stream(
        self,
        key: str,
        produce: Callable[[], AsyncIterator[T]],
        on_complete: Callable[[Sequence[T]], Awaitable[None]] | None = None,
    ) -> AsyncGenerator[T, None]:
        """The chunks of the production for ``key``, started by the first caller.

        Args:
            key: requests with equal keys share one production (see :func:`cache_key`).
            produce: makes the chunks; called once per production.
            on_complete: awaited with every chunk once the production finished successfully (never for a failed or
                cancelled one), e.g. to store the audio in the :class:`AudioCache`. The first caller's is used. The
                streams end once it returned, or after ``STORE_BEFORE_END_S`` while it goes on.

        Raises:
            Exception: whatever ``produce()`` raised, re-raised to every caller.
            ProductionCancelledError: the production was cancelled from outside while this caller was reading.
        """
        return self._follow(key, produce, on_complete)

    @property
    def in_flight(self) -> int:
        """Productions running now."""
        return len(self._flights)

    async def _follow(
        self,
        key: str,
        produce: Callable[[], AsyncIterator[T]],
        on_complete: Callable[[Sequence[T]], Awaitable[None]] | None,
    ) -> AsyncGenerator[T, None]:
        # Joined on the first ``anext``, not at the call: a stream never iterated starts and holds nothing.
        flight: _Flight[T] = self._flights.get(key) or self._start(key, produce, on_complete)
        flight.waiters += 1
        try:
            sent = 0
            while True:
                while sent < len(flight.chunks):
                    yield flight.chunks[sent]
                    sent += 1
                if flight.error is not None:
                    raise flight.error
                if flight.done:
                    return
                await flight.next_news()
        finally:
            flight.waiters -= 1
            if flight.waiters == 0 and not flight.done and flight.task is not None:
                flight.task.cancel()
                if self._flights.get(key) is flight:  # a new caller must start afresh, not join a cancelled one
                    del self._flights[key]
            if flight.waiters == 0:
                # A failed flight has left the table, so the last caller has raised its error. Raised, the error's
                # traceback holds the callers' frames and they hold the flight: dropping it breaks that cycle, which
                # would keep the frames of ``produce()`` (an encoder) until a full garbage collection.
                flight.error = None

    def _start(
        self,
        key: str,
        produce: Callable[[], AsyncIterator[T]],
        on_complete: Callable[[Sequence[T]], Awaitable[None]] | None,
    ) -> _Flight[T]:
        flight: _Flight[T] = _Flight()
        self._flights[key] = flight
        flight.task = asyncio.get_running_loop().create_task(self._produce(key, flight, produce, on_complete))
        self._tasks.add(flight.task)
        flight.task.add_done_callback(self._ended)
        return flight

    def _ended(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            # A cancelled task keeps the CancelledError it ended with until someone awaits it, which nobody does;
            # its traceback holds this task's frame (the flight, and so the task again) and the frames of
            # ``produce()`` (an encoder, the engine's stream). Taking it here frees them now instead of at the
            # next full garbage collection.
            with contextlib.suppress(asyncio.CancelledError):
                task.exception()

    async def _produce(
        self,
        key: str,
        flight: _Flight[T],
        produce: Callable[[], AsyncIterator[T]],
        on_complete: Callable[[Sequence[T]], Awaitable[None]] | None,
    ) -> None:
        try:
            try:
                async for chunk in produce():
                    flight.chunks.append(chunk)
                    flight.publish()
            except asyncio.CancelledError:
                flight.error = ProductionCancelledError(f"production of {key} cancelled")
                raise
            except Exception as exc:  # every waiter gets it; nobody awaits this task
                flight.error = exc
                return
            # Still in the table meanwhile: an identical request arriving now joins the finished flight.
            storing = asyncio.get_running_loop().create_task(_complete(on_complete, flight.chunks))
            self._tasks.add(storing)  # kept to its end even if this task is cancelled while waiting for it
            storing.add_done_callback(self._tasks.discard)
            await asyncio.wait({storing}, timeout=STORE_BEFORE_END_S)
            flight.done = True
            flight.publish()
            await storing
        finally:
            if self._flights.get(key) is flight:
                del self._flights[key]
            flight.publish()


async def _complete(on_complete: Callable[[Sequence[T]], Awaitable[None]] | None, chunks: Sequence[T]) -> None:
    if on_complete is None:
        return
    try:
        await on_complete(chunks)
    except Exception:  # the audio was delivered; a failed store must not surface anywhere
        logger.exception("storing completed audio failed")
