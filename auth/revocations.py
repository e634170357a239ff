"""Revocations as events: a key revoked or a tenant deleted is announced to every replica as it happens.

Every replica remembers the keys and tenants it looked up (:class:`~auth.cached.CachedAuthStore`), so that a known
caller costs no Redis round trip; these events are what keeps that memory true: a key revoked, a tenant deleted or
changed, announced by the replica that did it. They also reach what a lookup cannot: realtime sessions that
authenticated before the revocation and are still open.

Two buses share one interface: :class:`LocalRevocationBus` (one process: no Redis) and :class:`RedisRevocationBus`
(Redis pub/sub on the process's one client, so every replica hears every revocation). Pub/sub delivers at most
once: a replica whose subscription is down at that moment misses the event. So when a subscription comes back after
being lost, the bus tells its :meth:`~RevocationBus.after_gap` listeners, which look up in the store what they hold
(the open sessions' keys and tenants): what was revoked meanwhile is found there.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

from auth.store import ForwardingAuthStore
from lifecycle import cancel_and_wait, naming
from storage import STORAGE_ERRORS, OutageLatch

if TYPE_CHECKING:
    from collections.abc import Callable

    from auth.store import AuthStore
    from auth.tenants import Tenant
    from storage import RedisClient

__all__ = [
    "AnnouncingStore",
    "LocalRevocationBus",
    "RedisRevocationBus",
    "Revocation",
    "RevocationBus",
]

logger = naming.logger("auth")

_RESUBSCRIBE_S = 0.5
"""After losing the subscription: wait this long before trying again (Redis is likely down)."""
_SUBSCRIBE_WAIT_S = 1.0
"""How long start-up waits for the first subscription: long enough for a reachable Redis, short for a dead one."""


RevocationKind = Literal["key", "tenant", "tenant-updated"]
_KINDS: tuple[RevocationKind, ...] = ("key", "tenant", "tenant-updated")


@dataclass(frozen=True, slots=True)
class Revocation:
    """A key that authenticates nobody any more, a tenant that no longer exists, or a tenant whose record changed.

    Attributes:
        kind: ``key`` (``subject`` is the key id), ``tenant`` (deleted; ``subject`` is its name) or ``tenant-updated``
            (created or replaced: its limits, models or scheduling may differ; nothing it holds is revoked).
        subject: A key id or a tenant name; never a secret.
    """

    kind: RevocationKind
    subject: str

    def to_json(self, origin: str = "") -> str:
        """The message: ``origin`` names the replica that announced it (so that it can skip its own)."""
        return json.dumps({"kind": self.kind, "subject": self.subject, "origin": origin})

    @classmethod
    def from_json(cls, raw: bytes | str) -> Revocation:
        """Raises ``ValueError`` (or ``KeyError``/``TypeError``) for a message this code did not write."""
        return cls.with_origin(raw)[0]

    @classmethod
    def with_origin(cls, raw: bytes | str) -> tuple[Revocation, str]:
        """The revocation in a message and the replica that announced it (one parse of the message)."""
        data = json.loads(raw)
        if data["kind"] not in _KINDS or not isinstance(data["subject"], str):
            raise ValueError("not a revocation")
        return cls(data["kind"], data["subject"]), str(data.get("origin", ""))


class RevocationBus(Protocol):
    """Announces revocations to every listener of every replica (this one's included)."""

    def listening(self) -> bool:
        """Whether every announcement is being heard right now (a Redis bus: its subscription is up)."""

    def listen(self, listener: Callable[[Revocation], None]) -> None:
        """Call ``listener`` (synchronously, on the event loop) for every revocation from now on."""

    def after_gap(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` (on the event loop) each time announcements are heard again after a time in which some
        may have gone unheard (a lost subscription): what was revoked meanwhile must be looked up in the store."""

    async def announce(self, revocation: Revocation) -> None:
        """Tell every replica; this replica's listeners have been called when it returns."""

    async def start(self) -> None:
        """Begin receiving other replicas' announcements."""

    async def close(self) -> None:
        """Stop receiving."""


class LocalRevocationBus:
    """Revocations within one process (no shared store: there is no other replica to tell)."""

    def __init__(self) -> None:
        self._listeners: list[Callable[[Revocation], None]] = []
        self._gap_listeners: list[Callable[[], None]] = []

    def listen(self, listener: Callable[[Revocation], None]) -> None:
        self._listeners.append(listener)

    def listening(self) -> bool:
        return True  # one process hears every announcement

    def after_gap(self, listener: Callable[[], None]) -> None:
        self._gap_listeners.append(listener)  # one process hears every announcement: only a Redis bus has gaps

    def heard_again(self) -> None:
        """Call every gap listener; one that fails is logged and does not stop the others."""
        for listener in self._gap_listeners:
            try:
                listener()
            except Exception:
                logger.exception("a revocation gap listener failed")

    async def announce(self, revocation: Revocation) -> None:
        self.deliver(revocation)

    def deliver(self, revocation: Revocation) -> None:
        """Call every listener; one that fails is logged and does not stop the others."""
        for listener in self._listeners:
            try:
                listener(revocation)
            except Exception:
                logger.exception("a revocation listener failed on %s %s", revocation.kind, revocation.subject)

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None


class RedisRevocationBus(LocalRevocationBus):
    """Revocations through Redis pub/sub, so that every replica hears them.

    The announcing replica calls its own listeners directly as well (it must not depend on its subscription being
    up), and skips its own message when it comes back through the channel. Listeners are idempotent all the same.
    """

    def __init__(self, client: RedisClient, channel: str = "tts:auth:revocations") -> None:
        super().__init__()
        self._redis = client
        self._channel = channel
        self._origin = secrets.token_hex(8)
        self._subscribed = asyncio.Event()
        self._heard = False
        """Subscribed and confirmed, with no failure since: every announcement reaches this replica."""
        self._confirmed_before = False
        self._task: asyncio.Task[None] | None = None
        self._outage = OutageLatch(
            logger,
            "revocation channel unreachable: other replicas' revocations are not heard until it returns",
            "revocation channel subscribed again",
        )

    async def announce(self, revocation: Revocation) -> None:
        self.deliver(revocation)
        try:
            await self._redis.publish(self._channel, revocation.to_json(self._origin))
        except STORAGE_ERRORS as exc:  # the store itself is in the same Redis: the revocation rarely gets this far
            logger.warning("could not announce the revocation of %s %s: %r", revocation.kind, revocation.subject, exc)

    def listening(self) -> bool:
        return self._heard

    async def start(self) -> None:
        self._task = asyncio.create_task(self._subscription(), name="revocation-subscriber")
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_SUBSCRIBE_WAIT_S):
                await self._subscribed.wait()

    async def close(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)

    async def _subscription(self) -> None:
        while True:
            try:
                await self._receive()
            except STORAGE_ERRORS as exc:
                self._heard = False
                self._outage.failed(exc)
            await asyncio.sleep(_RESUBSCRIBE_S)

    async def _receive(self) -> None:
        async with self._redis.pubsub() as pubsub:  # subscribe confirmations are wanted: see _confirmed
            await pubsub.subscribe(self._channel)
            self._subscribed.set()
            self._outage.worked()
            while True:
                # A bounded wait rather than listen(): the client's socket timeout applies to every read.
                message = await pubsub.get_message(timeout=1.0)
                kind = message.get("type") if message is not None else None
                if kind == "message":
                    self._deliver_raw(message["data"])
                elif kind == "subscribe":
                    self._confirmed()

    def _confirmed(self) -> None:
        # Each (re)subscription is confirmed, including the client's own silent reconnection after a lost connection:
        # every confirmation after the first ends a time in which announcements may have gone unheard.
        if self._confirmed_before:
            self.heard_again()
        self._confirmed_before = True
        self._heard = True

    def _deliver_raw(self, raw: bytes | str) -> None:
        try:
            revocation, origin = Revocation.with_origin(raw)
        except (ValueError, KeyError, TypeError, AttributeError):
            logger.warning("ignored a malformed message on the revocation channel")
            return
        if origin != self._origin:  # this replica's listeners heard it when it was announced
            self.deliver(revocation)


class AnnouncingStore(ForwardingAuthStore):
    """An :class:`~auth.store.AuthStore` that announces each key revocation, tenant deletion and tenant change it
    makes."""

    def __init__(self, inner: AuthStore, bus: RevocationBus) -> None:
        super().__init__(inner)
        self._bus = bus

    async def revoke_key(self, key_id: str) -> bool:
        revoked = await self._inner.revoke_key(key_id)
        if revoked:
            await self._bus.announce(Revocation("key", key_id))
        return revoked

    async def delete_tenant(self, name: str) -> bool:
        deleted = await self._inner.delete_tenant(name)
        if deleted:
            await self._bus.announce(Revocation("tenant", name))
        return deleted

    async def put_tenant(self, tenant: Tenant) -> Tenant:
        stored = await self._inner.put_tenant(tenant)
        await self._bus.announce(Revocation("tenant-updated", tenant.name))
        return stored
