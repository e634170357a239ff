"""A deadline on every write of an HTTP response, so that a client that stops reading cannot hold a stream forever.

uvicorn applies flow control: once a client's socket buffers are full, ``send`` waits for them to drain, with no
limit. A speech response waiting there holds its concurrent-stream lease, its share of the synthesis and the audio
kept for it until the client closes the connection, which a stalled or hostile client never does.

Here a write that has not completed after ``server.send_timeout_s`` makes the client count as gone, exactly as
uvicorn treats a closed connection: later writes return at once and ``receive`` reports ``http.disconnect``. A
streaming response then runs its body iterator to its end or is cancelled inside it, so the iterator's ``finally``
(lease, synthesis, usage) runs now. Raising from ``send`` instead would leave the iterator suspended at its
``yield``, kept alive by the exception's traceback until a garbage collection. uvicorn closes the connection of a
response that ends unfinished (and logs that it did); the socket itself lingers, holding only what its buffers hold,
until the client goes away, for a transport's close waits to flush them and ASGI offers no abort.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from litestar.enums import ScopeType

from lifecycle import naming

if TYPE_CHECKING:
    from collections.abc import Callable

    from litestar.types import ASGIApp, Message, Receive, ReceiveMessage, Scope, Send

__all__ = ["send_timeout_middleware"]

logger = naming.logger("backpressure")

_DISCONNECT: ReceiveMessage = {"type": "http.disconnect"}


def send_timeout_middleware(timeout_s: float) -> Callable[[ASGIApp], ASGIApp]:
    """Litestar middleware: a client that leaves one ``send`` of its HTTP response unread for ``timeout_s`` is
    treated as disconnected."""

    def wrap(app: ASGIApp) -> ASGIApp:
        async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != ScopeType.HTTP:
                await app(scope, receive, send)
                return
            guard = _SendGuard(receive, send, timeout_s, scope["path"])
            try:
                await app(scope, guard.receive, guard.send)
            finally:
                guard.close()

        return middleware

    return wrap


class _SendGuard:
    """One response's ``send`` with a deadline, and its ``receive``, which reports a stall as a disconnect.

    One alarm per response rather than a timeout per ``send`` (``asyncio.timeout`` sets and cancels a timer each
    time, several times per response): the alarm is set for the write in progress; when it rings, that write, if
    still waiting, is cancelled, and a later write in progress gets the alarm set again for its own deadline.
    """

    def __init__(self, receive: Receive, send: Send, timeout_s: float, path: str) -> None:
        self._receive = receive
        self._send = send
        self._timeout_s = timeout_s
        self._path = path
        self._started = False
        self._stalled = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._writer: asyncio.Task[object] | None = None
        """The task inside ``send`` now, if one is."""
        self._writes = 0
        self._writing_since = 0.0
        self._alarm: asyncio.TimerHandle | None = None
        self._alarm_write = 0
        """The write the alarm is set for."""
        self._expired = False

    async def send(self, message: Message) -> None:
        if self._stalled.is_set():
            return  # as uvicorn's send does for a client that is gone
        writer = self._writer = asyncio.current_task()
        assert writer is not None  # ASGI servers call send from a task
        cancelling = writer.cancelling()
        self._writes += 1
        self._writing_since = self._loop.time()
        if self._alarm is None:
            self._set_alarm()
        try:
            await self._send(message)
        except asyncio.CancelledError:
            if not self._expired or writer.uncancel() > cancelling:  # cancelled from elsewhere (too)
                raise
            self._abandon()
        finally:
            self._writer = None
        self._started = True

    def close(self) -> None:
        """The response is over: no alarm must ring for it (nor keep it in memory until then)."""
        if self._alarm is not None:
            self._alarm.cancel()

    def _set_alarm(self) -> None:
        self._alarm_write = self._writes
        self._alarm = self._loop.call_at(self._writing_since + self._timeout_s, self._ring)

    def _ring(self) -> None:
        self._alarm = None
        if self._writer is None:
            return  # between writes: the next one sets the alarm again
        if self._writes != self._alarm_write:  # a later write than the one it was set for: set it for this one
            self._set_alarm()
            return
        self._expired = True
        self._writer.cancel()

    def _abandon(self) -> None:
        logger.warning("client read nothing for %g s; abandoning its response to %s", self._timeout_s, self._path)
        self._stalled.set()

    async def receive(self) -> ReceiveMessage:
        if not self._started:  # the request body is read before the response starts: no stall possible yet
            return await self._receive()
        if self._stalled.is_set():
            return _DISCONNECT
        return await _receive_unless(self._receive, self._stalled)


async def _receive_unless(receive: Receive, stalled: asyncio.Event) -> ReceiveMessage:
    """The next message from ``receive``, or a disconnect as soon as ``stalled`` is set."""
    receiving = asyncio.ensure_future(receive())
    stalling = asyncio.ensure_future(stalled.wait())
    try:
        await asyncio.wait({receiving, stalling}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stalling.cancel()
        if not receiving.done():
            receiving.cancel()
    return receiving.result() if receiving.done() else _DISCONNECT
