"""The AuthStore contract: every rule asserted once, run against memory, Redis on fakeredis and a real redis-server.

What only the Redis store does (replicas, outages, records it cannot read) is ``test_store_redis.py``.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import TYPE_CHECKING, TypeAlias

import pytest
import redis.asyncio as aioredis

from auth import (
    AuthStore,
    MemoryAuthStore,
    RedisAuthStore,
    Tenant,
    TenantNotFoundError,
    hash_api_key,
    key_hint,
    looks_like_api_key,
    seed_tenants,
)
from auth.settings import TenantLimits, TenantSettings
from tests.auth_backends import Backend, make_backend

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable


ACME = Tenant("acme", TenantLimits(requests_per_minute=60, concurrent_streams=2), frozenset({"tts-1", "espeak"}))
GLOBEX = Tenant(
    "globex", TenantLimits(), None, control_tokens=True, voice_aliases=(("narrator", "sage"),)
)  # each setting round-trips


@pytest.fixture(params=["memory", "fakeredis", "redis"])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    made = make_backend(request.param, request)
    yield made
    await made.close()


StoreFactory: TypeAlias = "Callable[..., Awaitable[AuthStore]]"


@pytest.fixture(params=["memory", "redis"])
async def store_factory(request: pytest.FixtureRequest) -> AsyncIterator[StoreFactory]:
    """Stores with options of the test's choosing, in memory and on the real redis-server."""
    made: list[AuthStore] = []

    async def make(**options: int) -> AuthStore:
        if request.param == "memory":
            store: AuthStore = MemoryAuthStore(**options)
        else:
            client = aioredis.Redis.from_url(request.getfixturevalue("redis_url"))
            store = RedisAuthStore(client, f"test:{{{uuid.uuid4().hex}}}:", owns_client=True, **options)
        made.append(store)
        return store

    yield make
    for store in made:
        await store.close()


@pytest.fixture
async def store(backend: Backend) -> AuthStore:
    await backend.store.put_tenant(ACME)
    await backend.store.put_tenant(GLOBEX)
    return backend.store


# --- tenants ---------------------------------------------------------------------------------------------------------


async def test_tenants_round_trip(store: AuthStore) -> None:
    assert await store.get_tenant("acme") == ACME
    assert await store.get_tenant("globex") == GLOBEX
    assert await store.get_tenant("nobody") is None
    page = await store.page_tenants(after=None, limit=10)
    assert ([t.name for t in page.data], page.has_more) == (["acme", "globex"], False)


async def test_put_tenant_replaces_and_keeps_keys(store: AuthStore) -> None:
    key, record = await store.create_key("acme")
    updated = Tenant("acme", TenantLimits(characters_per_minute=1000), frozenset())
    await store.put_tenant(updated)
    assert await store.get_tenant("acme") == updated
    assert not updated.allows_model("tts-1")
    assert await store.find_key(hash_api_key(key)) == record


async def test_delete_tenant_takes_its_keys_for_good(store: AuthStore) -> None:
    key, _ = await store.create_key("acme")
    await store.add_key_hash("acme", hash_api_key("sk-tts-configured"))
    other_key, other = await store.create_key("globex")
    assert await store.delete_tenant("acme") is True
    assert await store.delete_tenant("acme") is False
    assert await store.get_tenant("acme") is None
    assert await store.find_key(hash_api_key(key)) is None
    # Creating the tenant again must not bring its old keys back, nor list them.
    await store.put_tenant(ACME)
    assert await store.find_key(hash_api_key(key)) is None
    assert await store.list_keys("acme") == []
    assert await store.find_key(hash_api_key(other_key)) == other


async def test_tenants_come_in_pages_by_name(store: AuthStore) -> None:
    names = sorted(f"t{i:03d}" for i in range(25))
    for name in reversed(names):
        await store.put_tenant(Tenant(name, TenantLimits(), None))
    seen: list[str] = []
    after: str | None = None
    while True:
        page = await store.page_tenants(after=after, limit=7)
        assert len(page.data) <= 7
        seen.extend(t.name for t in page.data)
        if not page.has_more:
            break
        after = page.data[-1].name
    assert seen == sorted([*names, "acme", "globex"])
    # A cursor that names a tenant deleted meanwhile still continues where it stood.
    await store.delete_tenant("t010")
    assert [t.name for t in (await store.page_tenants(after="t010", limit=2)).data] == ["t011", "t012"]
    assert (await store.page_tenants(after="zzz", limit=5)).data == []


async def test_keys_come_in_pages_oldest_first(store: AuthStore) -> None:
    created = [(await store.create_key("acme"))[1] for _ in range(5)]
    first = await store.page_keys("acme", after=None, limit=2)
    assert ([r.id for r in first.data], first.has_more) == ([r.id for r in created[:2]], True)
    rest = await store.page_keys("acme", after=first.data[-1].id, limit=10)
    assert ([r.id for r in rest.data], rest.has_more) == ([r.id for r in created[2:]], False)


async def test_a_revoked_key_is_listed_only_for_its_retention(store_factory: StoreFactory) -> None:
    store = await store_factory(revoked_retention_s=1)
    await store.put_tenant(ACME)
    _, issued = await store.create_key("acme")
    configured = await store.add_key_hash("acme", hash_api_key("sk-tts-configured"))
    _, kept = await store.create_key("acme")
    assert await store.revoke_key(issued.id)
    assert await store.revoke_key(configured.id)
    assert {r.id: r.revoked for r in await store.list_keys("acme")} == {issued.id: True, configured.id: True,
                                                                        kept.id: False}  # fmt: skip
    await asyncio.sleep(1.2)
    # The issued key's record is gone; the configured one stays revoked, so re-seeding cannot bring it back.
    assert {r.id: r.revoked for r in await store.list_keys("acme")} == {configured.id: True, kept.id: False}
    assert await store.revoke_key(issued.id) is False
    assert (await store.add_key_hash("acme", configured.key_hash)).revoked


# --- keys ------------------------------------------------------------------------------------------------------------


async def test_create_key_returns_the_plaintext_once_and_a_record(store: AuthStore) -> None:
    before = time.time()
    key, record = await store.create_key("acme")
    assert looks_like_api_key(key)
    assert record.tenant == "acme"
    assert record.key_hash == hash_api_key(key)
    assert record.hint == key_hint(key)
    assert record.id.startswith("key_")
    assert not record.revoked
    assert before - 1 <= record.created_at <= time.time() + 1
    assert await store.find_key(record.key_hash) == record


async def test_create_key_for_unknown_tenant_fails(store: AuthStore) -> None:
    with pytest.raises(TenantNotFoundError):
        await store.create_key("nobody")
    with pytest.raises(TenantNotFoundError):
        await store.add_key_hash("nobody", hash_api_key("whatever"))


async def test_only_hashes_are_stored(backend: Backend) -> None:
    await backend.store.put_tenant(ACME)
    keys = [(await backend.store.create_key("acme"))[0] for _ in range(3)]
    stored = await backend.dump()
    for key in keys:
        assert hash_api_key(key).encode() in stored  # the dump does see the records ...
        assert key.encode() not in stored  # ... and never the key
        assert key.removeprefix("sk-tts-")[:-4].encode() not in stored


async def test_unknown_hash_is_not_found(store: AuthStore) -> None:
    assert await store.find_key(hash_api_key("sk-tts-unknown")) is None


async def test_revoke_key(store: AuthStore) -> None:
    key, record = await store.create_key("acme")
    kept_key, kept = await store.create_key("acme")
    assert await store.revoke_key(record.id) is True
    assert await store.find_key(hash_api_key(key)) is None
    assert await store.find_key(hash_api_key(kept_key)) == kept
    assert await store.revoke_key(record.id) is True  # idempotent
    assert await store.revoke_key("key_doesnotexist00") is False
    listed = {r.id: r.revoked for r in await store.list_keys("acme")}
    assert listed == {record.id: True, kept.id: False}


async def test_list_keys_is_per_tenant_oldest_first(store: AuthStore) -> None:
    first = (await store.create_key("acme"))[1]
    await store.create_key("globex")
    second = (await store.create_key("acme"))[1]
    third = await store.add_key_hash("acme", hash_api_key("out-of-band"))
    assert [r.id for r in await store.list_keys("acme")] == [first.id, second.id, third.id]
    assert await store.list_keys("nobody") == []


async def test_add_key_hash_is_idempotent(store: AuthStore) -> None:
    key_hash = hash_api_key("sk-tts-issued-elsewhere")
    record = await store.add_key_hash("acme", key_hash)
    assert (record.tenant, record.key_hash, record.hint, record.revoked) == ("acme", key_hash, "", False)
    assert await store.add_key_hash("acme", key_hash) == record
    assert await store.find_key(key_hash) == record
    assert len(await store.list_keys("acme")) == 1
    # Seeding again after an admin revoked the key must not bring it back.
    await store.revoke_key(record.id)
    assert (await store.add_key_hash("acme", key_hash)).revoked
    assert await store.find_key(key_hash) is None


async def test_add_key_hash_rejects_bad_hashes_and_other_tenants(store: AuthStore) -> None:
    key_hash = hash_api_key("sk-tts-shared")
    await store.add_key_hash("acme", key_hash)
    with pytest.raises(ValueError, match="belongs to tenant"):
        await store.add_key_hash("globex", key_hash)
    for bad in (key_hash.upper(), key_hash[:-1], key_hash + "0", "z" * 64, ""):
        with pytest.raises(ValueError, match="SHA-256"):
            await store.add_key_hash("acme", bad)


async def test_concurrent_seeding_makes_one_record_per_hash(backend: Backend) -> None:
    config = [
        TenantSettings(name="acme", api_key_sha256=[hash_api_key("a"), hash_api_key("b").upper()]),
        TenantSettings(name="globex", models=["tts-1"], limits=TenantLimits(requests_per_minute=5)),
    ]
    replicas = [backend.store, backend.replica(), backend.replica()]
    await asyncio.gather(*(seed_tenants(replica, config) for replica in replicas))
    await seed_tenants(backend.store, config)
    keys = await backend.store.list_keys("acme")
    assert sorted(r.key_hash for r in keys) == sorted([hash_api_key("a"), hash_api_key("b")])
    assert await backend.store.get_tenant("globex") == Tenant("globex", TenantLimits(requests_per_minute=5),
                                                              frozenset({"tts-1"}))  # fmt: skip
    assert await backend.store.find_key(hash_api_key("b")) is not None
