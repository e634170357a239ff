"""What a client may send on one realtime socket, the same on every protocol (the gateway's own and vLLM-Omni's on
``/v1/audio/speech/stream``, OpenAI's ``/v1/realtime``, ElevenLabs' text-to-speech sockets): every message is paid
for as it arrives, before it is parsed.

Two token buckets per socket, filled at ``realtime.max_socket_messages_per_s`` messages and
``realtime.max_socket_bytes_per_s`` bytes a second and holding ``realtime.socket_burst_s`` seconds of each (the bytes'
bucket at least one message of the largest size the server takes, ``server.max_body_bytes``). A message the buckets
cannot pay for is never parsed: :class:`~gateway.realtime.session_errors.SocketBudgetExceededError` ends the session,
which ``gateway/realtime/serving.py`` answers with the protocol's own error and close code 1008. So the JSON a socket
makes the event loop parse, and the events it makes the session handle, are bounded per second whatever it sends
(issue #47: one ``/v1/realtime`` socket sending 60 KB items in a loop froze every other tenant's speech).

What the server sends back because of a message (OpenAI's ``conversation.item.added``/``.done`` repeat the item) is
charged to the same bytes' bucket (:meth:`SocketBudget.echoed`): the echo's cost is the client's, and its bytes in and
echoed together stay within the rate.

A hand-written bucket, not ``limits``: the budget is one connection's, held in memory for its lifetime and checked on
every message, where a storage round trip per message would cost more than the parse it guards.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gateway.http.errors import OpenAIError
from gateway.realtime.session_errors import SocketBudgetExceededError

if TYPE_CHECKING:
    from collections.abc import Callable

    from litestar.types import ReceiveMessage

    from gateway.settings import RealtimeSettings

__all__ = ["SOCKET_BUDGET_CLOSE_CODE", "SocketBudget", "TokenBucket"]

SOCKET_BUDGET_CLOSE_CODE = 1008
"""Policy violation: the client broke the socket's rules (as a client too slow to read its audio does). Not 1013
(try again later): reconnecting at once to send the same way would be refused the same way."""


@dataclass
class TokenBucket:
    """``rate`` a second, at most ``capacity`` saved up; starts full."""

    rate: float
    capacity: float
    clock: Callable[[], float] = time.monotonic
    level: float = field(init=False)
    _stamp: float = field(init=False)

    def __post_init__(self) -> None:
        self.level = self.capacity
        self._stamp = self.clock()

    def take(self, amount: float) -> bool:
        """Take ``amount`` if the bucket holds it; whether it did."""
        self._refill()
        if amount > self.level:
            return False
        self.level -= amount
        return True

    def owe(self, amount: float) -> None:
        """Take ``amount`` whether or not the bucket holds it: what is owed is paid before the next ``take``."""
        self._refill()
        self.level -= amount

    def _refill(self) -> None:
        now = self.clock()
        self.level = min(self.capacity, self.level + (now - self._stamp) * self.rate)
        self._stamp = now


class SocketBudget:
    """One socket's messages and bytes per second (the module's docstring)."""

    def __init__(
        self, settings: RealtimeSettings, *, max_message_bytes: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        burst_s = settings.socket_burst_s
        messages_per_s = settings.max_socket_messages_per_s
        bytes_per_s = settings.max_socket_bytes_per_s
        self._messages = TokenBucket(messages_per_s, max(1.0, messages_per_s * burst_s), clock)
        self._bytes = TokenBucket(bytes_per_s, max(float(max_message_bytes), bytes_per_s * burst_s), clock)
        self.messages = 0
        """Messages paid for, for the session's log line."""
        self.bytes = 0

    def charge(self, message: ReceiveMessage) -> None:
        """Pay for one received message (a disconnect costs nothing).

        Raises:
            SocketBudgetExceededError: over the socket's messages or bytes a second.
        """
        if message["type"] != "websocket.receive":
            return
        text, data = message.get("text"), message.get("bytes")
        # A character counts as a byte: the size of the text as UTF-8 would cost an encode of all of it per message.
        size = len(text) if isinstance(text, str) else len(data) if isinstance(data, bytes) else 0
        if not self._messages.take(1):
            raise SocketBudgetExceededError(_over("messages", self._messages.rate))
        if not self._bytes.take(size):
            raise SocketBudgetExceededError(_over("bytes", self._bytes.rate))
        self.messages += 1
        self.bytes += size

    def echoed(self, size: int) -> None:
        """The server sent ``size`` bytes back because of the client's message (an echo of what it sent): the next
        messages pay for them."""
        self._bytes.owe(size)


def _over(what: str, rate: float) -> OpenAIError:
    message = (
        f"Rate limit reached for socket {what}: at most {rate:g} {what} a second on one connection (the server's "
        f"echoes of your messages count among its bytes). The socket is closed ({SOCKET_BUDGET_CLOSE_CODE}); "
        "reconnect and send more slowly."
    )
    return OpenAIError(429, message, type="requests", code="rate_limit_exceeded")
