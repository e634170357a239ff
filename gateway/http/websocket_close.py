"""A WebSocket closed for a policy reason stops being read at once.

uvicorn's ``websockets-sansio`` protocol, after the application's close frame, keeps the connection open for up to
10 s (its ``close_timeout``) waiting for the client's close reply, and receives (unmasks, then discards) every frame
that arrives meanwhile. That is right for a client that answers the close; a client closed for sending too much
(``rate_limit_exceeded``), for not reading its audio, or whose key was revoked is the one that will not. A flooder that
ignored the close sent 835 MB in those 10 s (issue #47: ``bench/socket_flood.py``), costing the event loop every other
tenant shares.

So a close with a policy code (1008, which the realtime endpoints send for exactly those reasons:
``gateway/sessions/serving.py``) waits ``CLOSE_AFTER_S`` for the reply, not 10 s, and reads at most
``READ_AFTER_CLOSE_BYTES`` meanwhile: a client that answers the close is closed on its answer as before, and one
still sending past that is read no more (TCP's flow control holds it back, at no cost to the loop) and closed when the
wait is over; what the server sent (the error event, the close frame) has had that long to reach it. Closing at once
instead would lose those frames: a socket closed with unread bytes is reset, and the reset drops what the kernel had
not sent yet (a flooding client's window is often full). A connection that cannot flush even then (a client that
reads nothing either) is aborted ``ABORT_AFTER_S`` later.

Every other way a connection is closed (a close without a policy code, after ``close_timeout``; the application
ending without a close, as a session does whose client stopped reading: its close frame could not even be written)
closes the transport, which then waits to flush what it holds for as long as that takes: for ever, for a client that
reads nothing, holding its place under ``server.max_connections_per_address``. So a transport closed here is aborted
``FLUSH_AFTER_CLOSE_S`` later if it has not gone by then.

ASGI has no way to ask for any of this, hence the subclass: it relies on ``send`` arming ``close_timer`` for the close
it writes, and on ``handle_close`` closing the transport on the reply (pinned in
``tests/unit/gateway/test_uvicorn_internals.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

if TYPE_CHECKING:
    import asyncio

    from uvicorn._types import ASGISendEvent

__all__ = [
    "ABORT_AFTER_S",
    "CLOSE_AFTER_S",
    "FLUSH_AFTER_CLOSE_S",
    "POLICY_CLOSE_CODES",
    "READ_AFTER_CLOSE_BYTES",
    "PolicyClosingWebSocketProtocol",
]

POLICY_CLOSE_CODES = frozenset({1008})
"""Closes after which the client's frames are not read (RFC 6455's policy violation)."""

CLOSE_AFTER_S = 1.0
"""How long the client gets to answer the close (and the error event and the close frame to reach it) before the
connection closes: uvicorn waits its ``close_timeout``, 10 s, reading all the while."""

READ_AFTER_CLOSE_BYTES = 64 * 1024
"""What is read after the close, for the client's reply: what a client sent before it saw the close is in flight
ahead of the reply."""

ABORT_AFTER_S = 1.0
"""How long the closing connection gets to flush what is left before it is dropped unsent."""

FLUSH_AFTER_CLOSE_S = 10.0
"""How long any closed connection gets to flush what is left: a client that has not taken it by then never will."""


class PolicyClosingWebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's ``websockets-sansio`` protocol that stops reading a socket it closes for a policy reason (the module
    docstring). Give it to ``uvicorn.run(ws=...)``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._readable_after_close: int | None = None
        """Bytes still read after a policy close; ``None``: no such close."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        # A stand-in for the transport everywhere uvicorn closes it: every attribute but ``close`` is the transport's.
        self.transport = cast("asyncio.Transport", _DroppedIfStuck(cast("asyncio.Transport", transport), self.loop))

    def data_received(self, data: bytes) -> None:
        if self._readable_after_close is not None:
            self._readable_after_close -= len(data)
            if self._readable_after_close < 0:  # not a reply: a client sending on, regardless
                self.transport.pause_reading()  # for good: uvicorn resumes only a read it paused, none after a close
                return
        super().data_received(data)

    async def send(self, message: ASGISendEvent) -> None:
        await super().send(message)
        policy_close = message["type"] == "websocket.close" and message.get("code", 1000) in POLICY_CLOSE_CODES
        if policy_close and self.close_timer is not None:  # armed: the close frame was written just now
            self.close_timer.cancel()
            self._readable_after_close = READ_AFTER_CLOSE_BYTES
            self.close_timer = self.loop.call_later(CLOSE_AFTER_S, self._close_transport)  # cancelled on the reply

    def _close_transport(self) -> None:
        self.transport.close()
        self.close_timer = self.loop.call_later(ABORT_AFTER_S, self.transport.abort)  # connection_lost cancels it


class _DroppedIfStuck:
    """A connection's transport whose ``close`` is followed by an abort ``FLUSH_AFTER_CLOSE_S`` later (a no-op for a
    transport gone by then): closing waits for the client to take what is buffered, and one that reads nothing
    never does."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._abort: asyncio.TimerHandle | None = None

    def close(self) -> None:
        self._transport.close()
        if self._abort is None:
            self._abort = self._loop.call_later(FLUSH_AFTER_CLOSE_S, self._transport.abort)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)
