"""The open realtime sessions of this process, by tenant and key: what a revocation or a shutdown must reach.

An HTTP request authenticates once and ends; a realtime session authenticates once and may speak for hours. So when
a key is revoked or its tenant deleted (on any replica: :mod:`auth.revocations`), the sessions it opened are ended
here, and when the server shuts down they are drained here before uvicorn closes their sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Protocol

from auth import AuthBackendError
from auth.revocations import Revocation
from gateway.sessions.budget import SocketSends, TenantSocketBudgets
from gateway.sessions.session_errors import SessionError
from gateway.state import gateway_state
from lifecycle import BackgroundTasks, naming

if TYPE_CHECKING:
    from collections.abc import Iterator

    from litestar import Litestar

    from auth import ApiKeyRecord, AuthStore, Principal, Tenant

__all__ = ["LiveSession", "SessionRegistry", "drain_realtime_sessions"]

logger = naming.logger("realtime")

_AFTER_GRACE_S = 1.0
"""After the grace period: how long sessions stopped by force get to send their close frame."""


class LiveSession(Protocol):
    """What the registry asks of a session (every session is an :class:`~gateway.sessions.ending.EndedByServer`)."""

    def revoke(self, error: SessionError) -> None:
        """End the session now: its credentials no longer hold."""

    def begin_drain(self) -> None:
        """Take no more text, finish the segment being spoken, then end."""

    def stop_draining(self) -> None:
        """The grace period is over: end now."""


class _Entry:
    __slots__ = ("generation", "key_id", "session", "tenant")

    def __init__(self, session: LiveSession, principal: Principal) -> None:
        self.session = session
        self.tenant = principal.tenant.name
        self.generation = principal.tenant.generation
        self.key_id = _key_id(principal)


def _key_id(principal: Principal) -> str | None:
    kind, _, key_id = principal.credential.partition(":")
    return key_id if kind == "key" else None


class SessionRegistry:
    """Open sessions, ended when their key is revoked or their tenant deleted, drained on shutdown."""

    def __init__(self, shared_sends: SocketSends | None = None) -> None:
        """``shared_sends``: what each tenant's sockets sent on every replica (``auth/limits/sockets.py``), with
        Redis; without, each replica's tenant socket budgets are its own."""
        self._entries: set[_Entry] = set()
        self._rechecks = BackgroundTasks("the realtime sessions")
        self._all_gone = asyncio.Event()
        self._all_gone.set()
        self.draining = False
        self.socket_budgets = TenantSocketBudgets(shared=shared_sends)
        """What each tenant's sockets on this replica may send together (``gateway/sessions/budget.py``)."""

    def __len__(self) -> int:
        return len(self._entries)

    @contextlib.contextmanager
    def registered(self, session: LiveSession, principal: Principal) -> Iterator[None]:
        """Keep ``session`` in the registry while the block runs."""
        entry = _Entry(session, principal)
        self._entries.add(entry)
        self._all_gone.clear()
        if self.draining:  # it slipped in as the server began to shut down
            session.begin_drain()
        try:
            yield
        finally:
            self._entries.discard(entry)
            if not self._entries:
                self._all_gone.set()

    def revoked(self, revocation: Revocation) -> None:
        """End the sessions a key revocation or tenant deletion concerns (a listener of the revocation bus); a tenant
        whose record changed keeps its sessions."""
        if revocation.kind == "tenant-updated":
            return
        field = "key_id" if revocation.kind == "key" else "tenant"
        ended = [entry for entry in self._entries if getattr(entry, field) == revocation.subject]
        for entry in ended:
            entry.session.revoke(_revoked_error(revocation))
        if ended:
            logger.info("ended %d realtime session(s): %s %s revoked", len(ended), revocation.kind, revocation.subject)

    def recheck_soon(self, store: AuthStore) -> None:
        """:meth:`recheck` in the background (a listener of the revocation bus's gaps, called on the event loop)."""
        self._rechecks.spawn(self.recheck(store), name="realtime-recheck")

    async def close(self) -> None:
        """Stop the re-checks and the budgets' sharing under way (the app stops)."""
        await self._rechecks.close()
        await self.socket_budgets.close()

    async def recheck(self, store: AuthStore) -> None:
        """End the sessions whose key ``store`` no longer holds valid, or whose tenant it no longer holds (deleted, or
        deleted and created again): after a gap in the revocation announcements, what was revoked meanwhile."""
        looked_up: dict[str, tuple[Tenant | None, list[ApiKeyRecord]]] = {}  # per tenant, not per session
        for entry in [entry for entry in self._entries if entry.key_id is not None]:  # JWT, open: no key to miss
            name = entry.tenant
            if name not in looked_up:
                try:
                    looked_up[name] = (await store.get_tenant(name), await store.list_keys(name))
                except AuthBackendError as exc:  # the store is unreachable too: the next gap looks again
                    logger.warning("could not re-check the realtime sessions' keys: %s", exc)
                    return
            revocation = _gone(entry, *looked_up[name])
            if revocation is not None and entry in self._entries:  # this session only: a tenant of the same name
                entry.session.revoke(_revoked_error(revocation))  # created since is another tenant
                logger.info("ended a realtime session: %s %s revoked unheard", revocation.kind, revocation.subject)

    async def drain(self, grace_s: float) -> None:
        """Drain every session: each finishes the segment it is speaking within ``grace_s``, then closes."""
        self.draining = True
        for entry in list(self._entries):
            entry.session.begin_drain()
        if await self._wait_all_gone(grace_s):
            return
        for entry in list(self._entries):
            entry.session.stop_draining()
        await self._wait_all_gone(_AFTER_GRACE_S)

    async def _wait_all_gone(self, timeout_s: float) -> bool:
        try:
            async with asyncio.timeout(timeout_s):
                await self._all_gone.wait()
        except TimeoutError:
            return False
        return True


def _gone(entry: _Entry, tenant: Tenant | None, keys: list[ApiKeyRecord]) -> Revocation | None:
    """What revoked an API-key session's credentials, by its tenant and keys as the store has them; ``None`` while
    they hold."""
    if tenant is None or (entry.generation and tenant.generation != entry.generation):
        return Revocation("tenant", entry.tenant)
    if not any(record.id == entry.key_id and not record.revoked for record in keys):
        return Revocation("key", entry.key_id or "")
    return None


def _revoked_error(revocation: Revocation) -> SessionError:
    if revocation.kind == "key":
        return SessionError(401, "The API key of this session has been revoked.", code="api_key_revoked")
    return SessionError(401, "The tenant of this session has been deleted.", code="tenant_deleted")


async def drain_realtime_sessions(app: Litestar) -> None:
    """Drain the app's realtime sessions within ``server.shutdown_grace_s`` (the server's shutdown hook)."""
    try:
        state = gateway_state(app)
    except LookupError:  # the lifespan never started (or has ended): no sessions
        return
    if len(state.sessions):
        logger.info("draining %d realtime session(s)", len(state.sessions))
    await state.sessions.drain(state.settings.server.shutdown_grace_s)
