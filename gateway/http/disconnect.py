"""Noticing a client that hangs up before its response starts.

Once a request's body has been read, nothing reads its ASGI ``receive`` until a streaming response starts listening
for the disconnect (Litestar's ``ASGIStreamingResponse`` does). A handler that awaits something long before it
responds (a speech request waiting for an engine slot, or for the engine's first audio) would not notice its client
hanging up, and would hold what it holds (a place in the queue, an engine job, a concurrent-stream lease) until the
wait ended by itself: with a hung engine, until the pool's watchdog kills the worker.

After the body, the next ``receive`` returns only when the client disconnects: uvicorn reports nothing else, the
send guard (``gateway/http/backpressure.py``) passes it through until the response starts, and the connection limits
(``gateway/http/connection_limits.py``) report a refused request as a disconnect. A ``receive`` cancelled before it
returns consumes nothing (uvicorn's waits on an event it clears only after the wait), so the streaming response that
follows still hears the disconnect, which uvicorn reports on every later call. A ``receive`` that raises instead
(another ASGI server's way of saying the connection is gone) counts as a disconnect too: nothing more can be heard
from that client, and what its request holds is freed.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, TypeVar

from gateway.http.refusals import ClientClosedError
from lifecycle import naming

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from litestar.types import Receive

__all__ = ["unless_client_leaves"]

_T = TypeVar("_T")

logger = naming.logger("connections")

#: Work that ends sooner goes unwatched: a cache hit, answered within a millisecond, then costs a timer rather than a
#: watching task and its cancellation, and a client gone is noticed at most this much later.
_WATCH_AFTER_S = 0.05


async def unless_client_leaves(receive: Receive, work: Awaitable[_T]) -> _T:
    """``await work``, cancelled as soon as the client disconnects; call it only once the body has been read.

    ``work`` runs in the calling task, so what it enters it also leaves there (the cancellation reaches its
    ``except``/``finally`` blocks as a ``CancelledError``, like any other).

    Raises:
        ClientClosedError: (499 ``client_closed_request``, never sent: nobody listens) the client disconnected first;
            ``work`` has been cancelled and has finished its cleanup.
    """
    # asyncio's timeout does the cancelling, moved to "now" when the client leaves: it tells its own cancellation
    # apart from any other (a server shutdown cancels this task too, and must stay a cancellation).
    leaving = asyncio.timeout(None)
    try:
        async with leaving:
            watch = _DisconnectWatch(receive, leaving)
            try:
                return await work
            finally:
                watch.stop()  # before the block is left: the watch cannot reschedule an exited timeout
    except TimeoutError:
        if not leaving.expired():
            raise  # the work's own timeout
        raise ClientClosedError("The client closed the connection before the response started.") from None


class _DisconnectWatch:
    """Waits for the client's disconnect (after :data:`_WATCH_AFTER_S`) and then expires ``leaving``.

    It runs only while the calling task is suspended in the work, so :meth:`stop`, called as soon as the work ends,
    leaves it no chance to act afterwards.
    """

    def __init__(self, receive: Receive, leaving: asyncio.Timeout) -> None:
        self._receive = receive
        self._leaving = leaving
        self._watcher: asyncio.Task[None] | None = None
        self._timer = asyncio.get_running_loop().call_later(_WATCH_AFTER_S, self._start)

    def stop(self) -> None:
        self._timer.cancel()
        if self._watcher is not None:
            self._watcher.cancel()  # its pending receive is cancelled too, having consumed nothing

    def _start(self) -> None:
        self._watcher = asyncio.ensure_future(self._watch())

    async def _watch(self) -> None:
        try:
            while (await self._receive())["type"] != "http.disconnect":
                pass  # as Litestar's streaming response does: only a disconnect ends the wait
        except Exception as exc:  # whatever it is, this client can no longer be heard
            logger.debug("receive failed before the response (%s): taken as a disconnect", type(exc).__name__)
        self._leaving.reschedule(asyncio.get_running_loop().time())
