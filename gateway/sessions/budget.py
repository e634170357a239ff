"""What a client may send on one realtime socket, the same on every protocol (the gateway's own and vLLM-Omni's on
``/v1/audio/speech/stream``, OpenAI's ``/v1/realtime``, ElevenLabs' text-to-speech sockets): every message is paid
for as it arrives, before it is parsed.

Two token buckets per socket, filled at ``realtime.max_socket_messages_per_s`` messages and
``realtime.max_socket_bytes_per_s`` bytes a second and holding ``realtime.socket_burst_s`` seconds of each (the bytes'
bucket at least one message of the largest size the server takes, ``server.max_body_bytes``). A message the buckets
cannot pay for is never parsed: :class:`~gateway.sessions.session_errors.SocketBudgetExceededError` ends the session,
which ``gateway/sessions/serving.py`` answers with the protocol's own error and close code 1008. So the JSON a socket
makes the event loop parse, and the events it makes the session handle, are bounded per second whatever it sends
(issue #47: one ``/v1/realtime`` socket sending 60 KB items in a loop froze every other tenant's speech).

A tenant's sockets on one replica also pay, together, into the tenant's own two buckets
(``realtime.max_tenant_socket_messages_per_s`` and ``realtime.max_tenant_socket_bytes_per_s``, the same burst), held
by :class:`TenantSocketBudgets` for the replica: without them, what a tenant may send is the socket's budget times its
open sessions, and opening more sockets would multiply it. A message a socket could pay for but its tenant's sockets
together cannot ends that session the same way.

With Redis (``redis_url``), the replicas share the tenant's part: each replica adds what its sockets of a tenant sent
to the tenant's counters in the limits' Redis (``auth/limits/sockets.py``) at most every :data:`SHARE_EVERY_S`, in the
background, and its tenant's buckets owe what the other replicas' sockets sent meanwhile. So a tenant's sockets spread
over N replicas send at the tenant's rate together (give or take what they send in one sharing interval), not N times
it, and no message waits for Redis. With Redis unreachable, each replica keeps to its own buckets (one warning per
outage).

What the server sends back because of a message (OpenAI's ``conversation.item.added``/``.done`` repeat the item) is
charged to the same bytes' bucket (:meth:`SocketBudget.echoed`): the echo's cost is the client's, and its bytes in and
echoed together stay within the rate.

A hand-written bucket, not ``limits``: the budget is one connection's (or one replica's, for a tenant), held in memory
and checked on every message, where a storage round trip per message would cost more than the parse it guards (the
replicas share the tenant's in the background, above).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from gateway.sessions.session_errors import SessionError, SocketBudgetExceededError
from lifecycle import BackgroundTasks, naming
from storage import STORAGE_ERRORS, OutageLatch

if TYPE_CHECKING:
    from collections.abc import Callable

    from litestar.types import ReceiveMessage

    from gateway.settings import RealtimeSettings

    Clock = Callable[[], float]

__all__ = [
    "SHARE_EVERY_S",
    "SOCKET_BUDGET_CLOSE_CODE",
    "SocketBudget",
    "SocketSends",
    "TenantShare",
    "TenantSocketBudgets",
    "TokenBucket",
]

logger = naming.logger("realtime")

SHARE_EVERY_S = 0.1
"""How often, at most, a replica adds what its sockets of a tenant sent to the shared counters (while they send)."""

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

    def full(self) -> bool:
        """Whether the bucket is back at its capacity (as good as a new one)."""
        self._refill()
        return self.level >= self.capacity

    def _refill(self) -> None:
        now = self.clock()
        self.level = min(self.capacity, self.level + (now - self._stamp) * self.rate)
        self._stamp = now


@dataclass(frozen=True)
class _Buckets:
    """Messages and bytes a second, as two buckets."""

    messages: TokenBucket
    bytes: TokenBucket

    @classmethod
    def filled(
        cls, messages_per_s: float, bytes_per_s: float, *, burst_s: float, max_message_bytes: int, clock: Clock
    ) -> _Buckets:
        """Both full: ``burst_s`` of each rate, and the bytes at least one message of the largest size taken."""
        messages = TokenBucket(messages_per_s, max(1.0, messages_per_s * burst_s), clock)
        return cls(messages, TokenBucket(bytes_per_s, max(float(max_message_bytes), bytes_per_s * burst_s), clock))

    def pay(self, size: int) -> str | None:
        """Take one message of ``size`` bytes; ``None`` if paid, else what ran out (``messages`` or ``bytes``)."""
        if not self.messages.take(1):
            return "messages"
        if not self.bytes.take(size):
            return "bytes"
        return None

    def full(self) -> bool:
        return self.messages.full() and self.bytes.full()


class SocketSends(Protocol):
    """Counters of what each tenant's sockets sent, shared by the replicas (``auth/limits/sockets.py``)."""

    async def add(self, tenant: str, messages: int, sent_bytes: int) -> tuple[int, int]:
        """Add this replica's sends; the totals of every replica's, this included."""
        ...


@dataclass
class _Unshared:
    """A tenant's sends on this replica not yet added to the shared counters, and the totals last seen there."""

    share: TenantShare
    messages: int = 0
    bytes: int = 0
    seen: tuple[int, int] | None = None
    """The shared totals after this replica's last addition; ``None`` before the first (or after a failed one)."""
    sharing: bool = False


class TenantSocketBudgets:
    """What each tenant's sockets on this replica may send together, a second (the module's docstring); with
    ``shared``, less what its sockets on the other replicas sent.

    A tenant's buckets are kept while they are below capacity, whether or not its sockets are open: a client that
    reconnects finds them as it left them. Full ones are forgotten (a new one is the same), so the table holds only
    the tenants that sent something in the last ``socket_burst_s`` or so.
    """

    def __init__(
        self, clock: Clock = time.monotonic, *, shared: SocketSends | None = None, share_every_s: float = SHARE_EVERY_S
    ) -> None:
        self._clock = clock
        self._tenants: dict[str, _Buckets] = {}
        self._shared = shared
        self._share_every_s = share_every_s
        self._unshared: dict[str, _Unshared] = {}
        self._sharing = BackgroundTasks("the tenants' socket budgets")
        self._outage = OutageLatch(
            logger,
            "socket budgets' storage unreachable: each replica keeps to its own tenant socket budgets until it returns",
            "socket budgets' storage reachable again: tenant socket budgets shared by the replicas",
        )

    def __len__(self) -> int:
        return len(self._tenants)

    def buckets(self, share: TenantShare) -> _Buckets:
        """The buckets of ``share``'s tenant, made full when it has none."""
        if (buckets := self._tenants.get(share.tenant)) is None:
            self._forget_full()  # only as a tenant is added, so the sweep costs once per tenant that comes back
            settings = share.settings
            buckets = _Buckets.filled(
                settings.max_tenant_socket_messages_per_s,
                settings.max_tenant_socket_bytes_per_s,
                burst_s=settings.socket_burst_s,
                max_message_bytes=share.max_message_bytes,
                clock=self._clock,
            )
            self._tenants[share.tenant] = buckets
        return buckets

    def sent(self, share: TenantShare, messages: int, sent_bytes: int) -> None:
        """``share``'s tenant's sockets here paid for ``messages`` and ``sent_bytes``: added to the shared counters
        within :data:`SHARE_EVERY_S` (nothing without them)."""
        if self._shared is None:
            return
        unshared = self._unshared.get(share.tenant)
        if unshared is None:
            unshared = self._unshared[share.tenant] = _Unshared(share)
        unshared.messages += messages
        unshared.bytes += sent_bytes
        if not unshared.sharing:
            unshared.sharing = True
            self._sharing.spawn(self._share_soon(self._shared, unshared), name="socket-budget-share")

    async def close(self) -> None:
        """Stop sharing (the app stops)."""
        await self._sharing.close()

    @property
    def where(self) -> str:
        """Whose sockets a tenant's buckets hold, for a refusal's message."""
        return "on all of your sockets together" + ("" if self._shared is not None else " on one server")

    async def _share_soon(self, shared: SocketSends, unshared: _Unshared) -> None:
        """After :data:`SHARE_EVERY_S` (sends meanwhile join these), add the tenant's sends here to the shared
        counters, and owe what the other replicas' sockets sent since the last time."""
        await asyncio.sleep(self._share_every_s)
        messages, sent_bytes = unshared.messages, unshared.bytes
        unshared.messages = unshared.bytes = 0
        try:
            totals = await shared.add(unshared.share.tenant, messages, sent_bytes)
        except STORAGE_ERRORS as exc:
            self._outage.failed(exc)
            unshared.seen = None
        else:
            self._outage.worked()
            self._owe_others(unshared, totals, messages, sent_bytes)
        unshared.sharing = False
        if unshared.messages or unshared.bytes:  # sent while this addition was under way
            self.sent(unshared.share, 0, 0)

    def _owe_others(self, unshared: _Unshared, totals: tuple[int, int], messages: int, sent_bytes: int) -> None:
        seen, unshared.seen = unshared.seen, totals
        if seen is None or totals[0] < seen[0] + messages or totals[1] < seen[1] + sent_bytes:
            return  # the first addition, or the counters expired meanwhile: the totals are where to count from
        buckets = self.buckets(unshared.share)
        buckets.messages.owe(totals[0] - seen[0] - messages)
        buckets.bytes.owe(totals[1] - seen[1] - sent_bytes)

    def _forget_full(self) -> None:
        for tenant in [tenant for tenant, buckets in self._tenants.items() if buckets.full()]:
            del self._tenants[tenant]
            if (unshared := self._unshared.get(tenant)) is not None and not unshared.sharing:
                del self._unshared[tenant]


@dataclass(frozen=True)
class TenantShare:
    """Where one socket pays its tenant's part: the replica's :class:`TenantSocketBudgets`, under the tenant's name
    (looked up on every message: the tenant's buckets may have been forgotten full meanwhile)."""

    budgets: TenantSocketBudgets
    tenant: str
    settings: RealtimeSettings
    max_message_bytes: int

    def buckets(self) -> _Buckets:
        return self.budgets.buckets(self)

    def sent(self, messages: int, sent_bytes: int) -> None:
        self.budgets.sent(self, messages, sent_bytes)


class SocketBudget:
    """One socket's messages and bytes per second, and its tenant's on the replica (the module's docstring)."""

    def __init__(
        self,
        settings: RealtimeSettings,
        *,
        max_message_bytes: int,
        tenant: TenantShare | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        self._socket = _Buckets.filled(
            settings.max_socket_messages_per_s,
            settings.max_socket_bytes_per_s,
            burst_s=settings.socket_burst_s,
            max_message_bytes=max_message_bytes,
            clock=clock,
        )
        self._tenant = tenant
        """``None``: the socket pays only its own budget."""
        self.messages = 0
        """Messages paid for, for the session's log line."""
        self.bytes = 0

    def charge(self, message: ReceiveMessage) -> None:
        """Pay for one received message (a disconnect costs nothing), on the socket's budget, then its tenant's.

        Raises:
            SocketBudgetExceededError: over the socket's messages or bytes a second, or its tenant's sockets'.
        """
        if message["type"] != "websocket.receive":
            return
        text, data = message.get("text"), message.get("bytes")
        # A character counts as a byte: the size of the text as UTF-8 would cost an encode of all of it per message.
        size = len(text) if isinstance(text, str) else len(data) if isinstance(data, bytes) else 0
        if (spent := self._socket.pay(size)) is not None:
            raise SocketBudgetExceededError(_over(spent, self._socket, "on one connection"))
        if self._tenant is not None:
            if (spent := (tenant := self._tenant.buckets()).pay(size)) is not None:
                raise SocketBudgetExceededError(_over(spent, tenant, self._tenant.budgets.where))
            self._tenant.sent(1, size)
        self.messages += 1
        self.bytes += size

    def echoed(self, size: int) -> None:
        """The server sent ``size`` bytes back because of the client's message (an echo of what it sent): the next
        messages pay for them, on the socket's budget and its tenant's."""
        self._socket.bytes.owe(size)
        if self._tenant is not None:
            self._tenant.buckets().bytes.owe(size)
            self._tenant.sent(0, size)


def _over(what: str, buckets: _Buckets, where: str) -> SessionError:
    rate = buckets.messages.rate if what == "messages" else buckets.bytes.rate
    message = (
        f"Rate limit reached for socket {what}: at most {rate:g} {what} a second {where} (the server's "
        f"echoes of your messages count among its bytes). The socket is closed ({SOCKET_BUDGET_CLOSE_CODE}); "
        "reconnect and send more slowly."
    )
    return SessionError(429, message, code="rate_limit_exceeded")
