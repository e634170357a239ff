"""A session's WebSocket, as every realtime session uses it: one frame sent at a time within the send timeout, and
the client's next message while the session is not idle, paid for in the socket's budget before anyone parses it."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from litestar.exceptions import WebSocketDisconnect

from gateway.sessions.session_errors import SessionIdleError, SlowClientError

if TYPE_CHECKING:
    from collections.abc import Callable

    from litestar import WebSocket
    from litestar.types import ReceiveMessage

    from gateway.sessions.budget import SocketBudget

__all__ = ["SessionChannel"]


class SessionChannel:
    """Sends and receives for one session.

    Idle means no client message and nothing the session is doing (``busy``) for ``idle_timeout_s``; the session
    marks what it does with :meth:`active`.
    """

    def __init__(
        self,
        socket: WebSocket[Any, Any, Any],
        *,
        send_timeout_s: float,
        idle_timeout_s: float,
        busy: Callable[[], bool],
        budget: SocketBudget | None = None,
    ) -> None:
        self.socket = socket
        self._send_timeout_s = send_timeout_s
        self._idle_timeout_s = idle_timeout_s
        self._busy = busy
        self.budget = budget
        """What the client may send a second (``gateway/sessions/budget.py``); ``None``: unbounded."""
        self._send_lock = asyncio.Lock()
        self._last_activity = asyncio.get_running_loop().time()

    def active(self) -> None:
        """The session did something (a segment or response ended): the idle timeout counts from now."""
        self._last_activity = asyncio.get_running_loop().time()

    async def receive(self) -> ReceiveMessage:
        """The client's next message (which counts as activity), paid for in the socket's budget.

        Raises:
            SessionIdleError: no message came, and the session was not busy, for ``idle_timeout_s``.
            SocketBudgetExceededError: the message is over the socket's budget (it was not parsed).
        """
        loop = asyncio.get_running_loop()
        while True:
            try:
                async with asyncio.timeout_at(self._last_activity + self._idle_timeout_s):
                    message = await self.socket.receive()
            except TimeoutError:
                if self._busy():
                    self._last_activity = loop.time()  # a client listening to long speech is not idle
                elif loop.time() >= self._last_activity + self._idle_timeout_s:
                    raise SessionIdleError from None
                continue
            self._last_activity = loop.time()
            if self.budget is not None:
                self.budget.charge(message)
            return message

    async def send(self, frame: str | bytes) -> None:
        """Send one frame; a client that does not take it within ``send_timeout_s`` is too slow to serve.

        Raises:
            SlowClientError: the send waited ``send_timeout_s``.
            WebSocketDisconnect: the client is gone.
        """
        async with self._send_lock:
            try:
                # Not asyncio.wait_for: on Python 3.11 it can swallow a cancellation (barge-in) that arrives as the
                # send completes.
                async with asyncio.timeout(self._send_timeout_s):
                    if isinstance(frame, bytes):
                        await self.socket.send_bytes(frame)
                    else:
                        await self.socket.send_text(frame)
            except TimeoutError:
                raise SlowClientError from None
            except OSError:  # uvicorn's ClientDisconnected: the transport is gone
                raise WebSocketDisconnect(detail="client disconnected") from None
