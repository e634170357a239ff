"""Revocations that hold: a replica's memory of lookups answers without the store only while nothing can have changed,
keeps what was revoked through an outage, stays bounded, and hears every replica's news.

The shared store is a real :class:`MemoryAuthStore` behind a switch that makes it unreachable (the outage); the
Redis bus runs on a real redis-server.
"""

from __future__ import annotations

import asyncio
import secrets
import tracemalloc
from typing import TYPE_CHECKING

import fakeredis
import pytest

from auth import AuthBackendError, AuthStore, MemoryAuthStore, RedisAuthStore, Tenant, hash_api_key
from auth.cached import DEFAULT_MAX_ENTRIES, CachedAuthStore
from auth.revocations import AnnouncingStore, LocalRevocationBus, RedisRevocationBus, Revocation
from auth.settings import TenantLimits
from storage import connect_redis

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from auth.keys import ApiKeyRecord

ACME = Tenant("acme", TenantLimits(), None)


class SwitchableStore(MemoryAuthStore):
    """The shared store, which an outage makes unreachable for lookups; it counts the lookups that reach it."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False
        self.lookups = 0

    async def find_key(self, key_hash: str) -> ApiKeyRecord | None:
        self.lookups += 1
        if self.down:
            raise AuthBackendError("down")
        return await super().find_key(key_hash)

    async def get_tenant(self, name: str) -> Tenant | None:
        self.lookups += 1
        if self.down:
            raise AuthBackendError("down")
        return await super().get_tenant(name)


def OutageTolerantStore(  # noqa: N802 - the role it plays here
    shared: AuthStore, *, max_entries: int = DEFAULT_MAX_ENTRIES
) -> CachedAuthStore:
    """A replica's memory that never trusts an answer without asking (``fresh_s=0``): what an outage leaves."""
    return CachedAuthStore(shared, listening=lambda: True, fresh_s=0, max_entries=max_entries)


@pytest.fixture
async def shared() -> SwitchableStore:
    store = SwitchableStore()
    await store.put_tenant(ACME)
    return store


async def test_a_key_revoked_elsewhere_before_an_outage_is_not_served_during_it(shared: SwitchableStore) -> None:
    replica = OutageTolerantStore(shared)
    key, record = await shared.create_key("acme")
    assert await replica.find_key(hash_api_key(key)) == record  # served, so remembered
    await shared.revoke_key(record.id)  # on another replica: only the announcement reaches this one
    replica.revoked(Revocation("key", record.id))
    shared.down = True
    assert await replica.find_key(hash_api_key(key)) is None


async def test_a_key_found_revoked_by_a_lookup_stays_revoked_during_an_outage(shared: SwitchableStore) -> None:
    replica = OutageTolerantStore(shared)
    key, record = await shared.create_key("acme")
    await replica.find_key(hash_api_key(key))
    await shared.revoke_key(record.id)
    assert await replica.find_key(hash_api_key(key)) is None
    shared.down = True
    assert await replica.find_key(hash_api_key(key)) is None


async def test_a_deleted_tenant_is_not_served_during_an_outage(shared: SwitchableStore) -> None:
    replica = OutageTolerantStore(shared)
    key, _ = await shared.create_key("acme")
    assert await replica.find_key(hash_api_key(key)) is not None
    assert await replica.get_tenant("acme") == ACME
    replica.revoked(Revocation("tenant", "acme"))
    shared.down = True
    assert await replica.find_key(hash_api_key(key)) is None
    assert await replica.get_tenant("acme") is None


async def test_a_valid_key_is_still_served_during_an_outage(shared: SwitchableStore) -> None:
    replica = OutageTolerantStore(shared)
    key, record = await shared.create_key("acme")
    other, other_record = await shared.create_key("acme")
    await replica.find_key(hash_api_key(key))
    await replica.find_key(hash_api_key(other))
    replica.revoked(Revocation("key", other_record.id))  # another key's revocation leaves this one alone
    shared.down = True
    assert await replica.find_key(hash_api_key(key)) == record
    with pytest.raises(AuthBackendError):  # never seen: cannot be checked
        await replica.find_key(hash_api_key("sk-tts-never-seen"))


async def test_the_memory_is_least_recently_used_and_bounded(shared: SwitchableStore) -> None:
    replica = OutageTolerantStore(shared, max_entries=3)
    keys = [(await shared.create_key("acme"))[0] for _ in range(5)]
    for key in keys:
        await replica.find_key(hash_api_key(key))
    await replica.find_key(hash_api_key(keys[2]))  # used again: kept over keys[3]
    await replica.find_key(hash_api_key(keys[0]))  # comes back in, pushing keys[3] out
    shared.down = True
    for key in (keys[0], keys[2], keys[4]):
        assert await replica.find_key(hash_api_key(key)) is not None
    for key in (keys[1], keys[3]):
        with pytest.raises(AuthBackendError):
            await replica.find_key(hash_api_key(key))


async def test_unknown_keys_cost_no_memory(shared: SwitchableStore) -> None:
    replica = OutageTolerantStore(shared)
    hashes = [hash_api_key(f"sk-tts-{secrets.token_urlsafe(32)}") for _ in range(20_000)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for key_hash in hashes:
            assert await replica.find_key(key_hash) is None
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # Remembering them cost about 150 bytes each (3 MB here); not remembering them costs nothing that stays.
    assert grown < 100_000
    assert replica.remembered() == 0


async def test_announcing_store_tells_this_replica_only_of_what_it_did(shared: SwitchableStore) -> None:
    bus = LocalRevocationBus()
    heard: list[Revocation] = []
    bus.listen(heard.append)
    store = AnnouncingStore(shared, bus)
    _, record = await store.create_key("acme")
    assert not await store.revoke_key("key_unknown")
    assert await store.revoke_key(record.id)
    await store.put_tenant(ACME)
    assert not await store.delete_tenant("nobody")
    assert await store.delete_tenant("acme")
    assert heard == [
        Revocation("key", record.id),
        Revocation("tenant-updated", "acme"),
        Revocation("tenant", "acme"),
    ]


# --- the memory answers without a round trip while nothing can have changed -------------------------------------------


class Channel:
    """Whether the replica hears the revocation channel (a test switches it)."""

    def __init__(self) -> None:
        self.up = True

    def __call__(self) -> bool:
        return self.up


def remembering(shared: AuthStore, channel: Channel, fresh_s: float = 60.0) -> CachedAuthStore:
    return CachedAuthStore(shared, listening=channel, fresh_s=fresh_s)


async def test_a_known_caller_costs_no_lookup_while_fresh(shared: SwitchableStore) -> None:
    replica = remembering(shared, Channel())
    key, record = await shared.create_key("acme")
    assert await replica.find_key(hash_api_key(key)) == record
    assert await replica.get_tenant("acme") == ACME
    asked = shared.lookups
    for _ in range(5):
        assert await replica.find_key(hash_api_key(key)) == record
        assert await replica.get_tenant("acme") == ACME
    assert shared.lookups == asked


async def test_announcements_end_what_the_memory_answers(shared: SwitchableStore) -> None:
    replica = remembering(shared, Channel())
    key, record = await shared.create_key("acme")
    other, _ = await shared.create_key("acme")
    await replica.find_key(hash_api_key(key))
    await replica.find_key(hash_api_key(other))
    await replica.get_tenant("acme")
    replica.revoked(Revocation("key", record.id))
    assert await replica.find_key(hash_api_key(key)) is None  # without asking: the announcement is the news
    assert await replica.find_key(hash_api_key(other)) is not None
    changed = Tenant("acme", TenantLimits(requests_per_minute=1), None)
    await shared.put_tenant(changed)
    replica.revoked(Revocation("tenant-updated", "acme"))
    assert (await replica.get_tenant("acme")) == changed  # asked again
    replica.revoked(Revocation("tenant", "acme"))
    assert await replica.get_tenant("acme") is None
    assert await replica.find_key(hash_api_key(other)) is None


async def test_nothing_is_fresh_without_the_channel_or_after_a_gap_or_too_long(shared: SwitchableStore) -> None:
    channel = Channel()
    replica = remembering(shared, channel, fresh_s=0.2)
    key, record = await shared.create_key("acme")
    await replica.find_key(hash_api_key(key))
    await shared.revoke_key(record.id)  # elsewhere, its announcement lost

    channel.up = False  # the subscription is down: what was missed cannot be known
    assert await replica.find_key(hash_api_key(key)) is None
    key, record = await shared.create_key("acme")
    channel.up = True
    await replica.find_key(hash_api_key(key))
    await shared.revoke_key(record.id)
    replica.forget_freshness()  # the subscription came back after a gap
    assert await replica.find_key(hash_api_key(key)) is None

    key, record = await shared.create_key("acme")
    await replica.find_key(hash_api_key(key))
    await shared.revoke_key(record.id)
    assert await replica.find_key(hash_api_key(key)) == record  # fresh: the memory answers (announcement lost)
    await asyncio.sleep(0.25)
    assert await replica.find_key(hash_api_key(key)) is None  # fresh_s bounds what a lost announcement costs


@pytest.mark.parametrize("backend", ["memory", "redis"])
async def test_a_new_tenant_of_a_deleted_name_gets_a_new_generation(backend: str) -> None:
    store: AuthStore = (
        MemoryAuthStore() if backend == "memory" else RedisAuthStore(fakeredis.FakeAsyncRedis(), owns_client=True)
    )
    await store.put_tenant(ACME)
    first = await store.get_tenant("acme")
    await store.put_tenant(ACME)  # replaced (as every replica's seeding does): the same generation
    replaced = await store.get_tenant("acme")
    await store.delete_tenant("acme")
    await store.put_tenant(ACME)
    second = await store.get_tenant("acme")
    await store.close()
    assert first is not None and replaced is not None and second is not None
    assert first.generation and replaced.generation == first.generation
    assert second.generation and second.generation != first.generation


@pytest.fixture
async def buses(redis_url: str) -> AsyncIterator[tuple[RedisRevocationBus, RedisRevocationBus]]:
    clients = [connect_redis(redis_url), connect_redis(redis_url)]
    pair = (RedisRevocationBus(clients[0]), RedisRevocationBus(clients[1]))
    for bus in pair:
        await bus.start()
    yield pair
    for bus, client in zip(pair, clients, strict=True):
        await bus.close()
        await client.aclose()


async def test_redis_bus_reaches_every_replica(buses: tuple[RedisRevocationBus, RedisRevocationBus]) -> None:
    here, there = buses
    heard_here: asyncio.Queue[Revocation] = asyncio.Queue()
    heard_there: asyncio.Queue[Revocation] = asyncio.Queue()
    here.listen(heard_here.put_nowait)
    there.listen(heard_there.put_nowait)
    await here.announce(Revocation("tenant", "acme"))
    assert heard_here.get_nowait() == Revocation("tenant", "acme")  # at once, before the round trip
    async with asyncio.timeout(1.0):
        assert await heard_there.get() == Revocation("tenant", "acme")
        # The channel keeps order: once the other replica's answer is back, our own message has come back too,
        # and was not heard a second time.
        await there.announce(Revocation("key", "key_1"))
        assert await heard_here.get() == Revocation("key", "key_1")


def test_revocation_messages_round_trip_and_strangers_are_refused() -> None:
    revocation = Revocation("key", "key_0123")
    assert Revocation.from_json(revocation.to_json()) == revocation
    for bad in ('{"kind": "user", "subject": "x"}', '{"kind": "key", "subject": 3}', "[]", "{}"):
        with pytest.raises((ValueError, KeyError, TypeError)):
            Revocation.from_json(bad)
