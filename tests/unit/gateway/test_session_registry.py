"""The realtime session registry: which sessions a revocation ends, and how a shutdown drains them."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import redis.asyncio

from auth import MemoryAuthStore, Principal, Tenant
from auth.revocations import RedisRevocationBus, Revocation
from auth.settings import TenantLimits
from gateway.sessions.registry import SessionRegistry
from storage import connect_redis

if TYPE_CHECKING:
    from gateway.sessions.session_errors import SessionError


@dataclass
class Session:
    """A session that records what the registry asked of it; it ends when its ``ended`` event is set."""

    revoked_with: list[str | None] = field(default_factory=list)
    drains: int = 0
    stopped: bool = False
    finishes_drain: bool = True
    ended: asyncio.Event = field(default_factory=asyncio.Event)

    def revoke(self, error: SessionError) -> None:
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


async def test_after_a_gap_the_store_ends_the_sessions_whose_key_or_tenant_went_meanwhile() -> None:
    # Revoked in the store while this replica heard no announcement: the re-check finds them there.
    store = MemoryAuthStore()
    for name in ("acme", "beta", "gamma"):
        await store.put_tenant(Tenant(name, TenantLimits(), None))
    _, revoked = await store.create_key("acme")
    _, valid = await store.create_key("acme")
    _, of_recreated = await store.create_key("beta")
    _, of_deleted = await store.create_key("gamma")
    acme, beta, gamma = [await store.get_tenant(name) for name in ("acme", "beta", "gamma")]
    assert acme is not None and beta is not None and gamma is not None
    sessions = {name: Session() for name in ("revoked", "valid", "recreated", "deleted", "jwt", "new beta")}
    registry = SessionRegistry()
    with (
        registry.registered(sessions["revoked"], Principal(acme, f"key:{revoked.id}")),
        registry.registered(sessions["valid"], Principal(acme, f"key:{valid.id}")),
        registry.registered(sessions["recreated"], Principal(beta, f"key:{of_recreated.id}")),
        registry.registered(sessions["deleted"], Principal(gamma, f"key:{of_deleted.id}")),
        registry.registered(sessions["jwt"], Principal(acme, "jwt")),
    ):
        await store.revoke_key(revoked.id)
        await store.delete_tenant("beta")
        await store.put_tenant(Tenant("beta", TenantLimits(), None))  # a new tenant of the old name
        new_beta = await store.get_tenant("beta")
        _, new_key = await store.create_key("beta")
        assert new_beta is not None
        await store.delete_tenant("gamma")
        with registry.registered(sessions["new beta"], Principal(new_beta, f"key:{new_key.id}")):
            await registry.recheck(store)
    assert sessions["revoked"].revoked_with == ["api_key_revoked"]
    assert sessions["recreated"].revoked_with == sessions["deleted"].revoked_with == ["tenant_deleted"]
    assert sessions["valid"].revoked_with == sessions["jwt"].revoked_with == sessions["new beta"].revoked_with == []


async def test_a_lost_revocation_subscription_rechecks_the_open_sessions_when_it_is_back(redis_url: str) -> None:
    # A real redis-server: this replica's subscription is killed, a key is revoked in the store meanwhile (no
    # announcement reaches it), and once subscribed again the replica looks the session's key up.
    client, admin = connect_redis(redis_url), redis.asyncio.Redis.from_url(redis_url)
    bus = RedisRevocationBus(client, channel=f"test:revocations:{uuid.uuid4().hex}")
    store, registry, session = MemoryAuthStore(), SessionRegistry(), Session()
    bus.after_gap(lambda: registry.recheck_soon(store))
    await store.put_tenant(Tenant("acme", TenantLimits(), None))
    _, record = await store.create_key("acme")
    acme = await store.get_tenant("acme")
    assert acme is not None
    await bus.start()
    try:
        with registry.registered(session, Principal(acme, f"key:{record.id}")):
            await asyncio.sleep(0.2)
            assert session.revoked_with == []  # the first subscription is no gap
            await store.revoke_key(record.id)
            await admin.client_kill_filter(_type="pubsub")  # the replica's subscription connection is dropped
            async with asyncio.timeout(5):
                while not session.revoked_with:
                    await asyncio.sleep(0.05)
        assert session.revoked_with == ["api_key_revoked"]
    finally:
        await bus.close()
        await client.aclose()
        await admin.aclose()
