"""The realtime session registry: which sessions a revocation ends, and how a shutdown drains them."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from auth import Principal, Tenant
from auth.revocations import Revocation
from auth.settings import TenantLimits
from gateway.realtime.registry import SessionRegistry

if TYPE_CHECKING:
    from gateway.http.errors import OpenAIError


@dataclass
class Session:
    """A session that records what the registry asked of it; it ends when its ``ended`` event is set."""

    revoked_with: list[str | None] = field(default_factory=list)
    drains: int = 0
    stopped: bool = False
    finishes_drain: bool = True
    ended: asyncio.Event = field(default_factory=asyncio.Event)

    def revoke(self, error: OpenAIError) -> None:
        self.revoked_with.append(error.code)

    def begin_drain(self) -> None:
        self.drains += 1
        if self.finishes_drain:
            self.ended.set()

    def stop_draining(self) -> None:
        self.stopped = True
        self.ended.set()


def principal(tenant: str, credential: str) -> Principal:
    return Principal(Tenant(tenant, TenantLimits(), None), credential)


def test_a_key_revocation_ends_that_keys_sessions_only() -> None:
    registry = SessionRegistry()
    mine, same_tenant, jwt = Session(), Session(), Session()
    with (
        registry.registered(mine, principal("acme", "key:key_1")),
        registry.registered(same_tenant, principal("acme", "key:key_2")),
        registry.registered(jwt, principal("acme", "jwt")),
    ):
        registry.revoked(Revocation("key", "key_1"))
        registry.revoked(Revocation("key", "jwt"))  # a credential kind is not a key id
    assert mine.revoked_with == ["api_key_revoked"]
    assert same_tenant.revoked_with == jwt.revoked_with == []


def test_a_tenant_deletion_ends_every_session_of_the_tenant() -> None:
    registry = SessionRegistry()
    keyed, jwt, other = Session(), Session(), Session()
    with (
        registry.registered(keyed, principal("acme", "key:key_1")),
        registry.registered(jwt, principal("acme", "jwt")),
        registry.registered(other, principal("globex", "key:key_2")),
    ):
        registry.revoked(Revocation("tenant", "acme"))
    assert keyed.revoked_with == jwt.revoked_with == ["tenant_deleted"]
    assert other.revoked_with == []
    assert len(registry) == 0


async def _serve(registry: SessionRegistry, session: Session) -> None:
    with registry.registered(session, principal("acme", "key:key_1")):
        await session.ended.wait()


async def test_drain_waits_for_sessions_that_finish_and_stops_the_rest_after_the_grace() -> None:
    registry = SessionRegistry()
    quick, stuck = Session(), Session(finishes_drain=False)
    served = [asyncio.create_task(_serve(registry, s)) for s in (quick, stuck)]
    await asyncio.sleep(0)  # both registered
    assert len(registry) == 2
    await registry.drain(grace_s=0.2)
    await asyncio.gather(*served)
    assert (quick.drains, quick.stopped) == (1, False)
    assert (stuck.drains, stuck.stopped) == (1, True)


async def test_a_session_that_opens_during_the_drain_is_drained_too() -> None:
    registry = SessionRegistry()
    await registry.drain(grace_s=0.1)
    late = Session(finishes_drain=False)
    with registry.registered(late, principal("acme", "jwt")):
        assert late.drains == 1
