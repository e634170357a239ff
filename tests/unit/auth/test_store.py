"""The AuthStore contract: one suite, run against memory, Redis on fakeredis and a real redis-server."""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeAlias

import fakeredis
import pytest
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from auth import (
    ApiKeyRecord,
    AuthBackendError,
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

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable


ACME = Tenant("acme", TenantLimits(requests_per_minute=60, concurrent_streams=2), frozenset({"tts-1", "espeak"}))
GLOBEX = Tenant("globex", TenantLimits(), None)


@dataclass
class Backend:
    """A store under test, plus what the contract needs to look behind it."""

    store: AuthStore
    dump: Callable[[], Awaitable[bytes]]
    """Everything the backend holds, as bytes: to search for secrets."""
    replica: Callable[[], AuthStore]
    """Another store on the same data, as another gateway replica would have."""
    closers: list[AuthStore] = field(default_factory=list)


async def _dump_redis(client: aioredis.Redis) -> bytes:
    parts: list[bytes] = []
    async for key in client.scan_iter():
        parts.append(key + b"=" + repr(await _redis_value(client, key)).encode())
    return b"\n".join(parts)


async def _redis_value(client: aioredis.Redis, key: bytes) -> object:
    kind = await client.type(key)
    match kind.decode() if isinstance(kind, bytes) else kind:
        case "string":
            return await client.get(key)
        case "hash":
            return await client.hgetall(key)
        case "set":
            return await client.smembers(key)
        case "zset":
            return await client.zrange(key, 0, -1)
        case other:
            raise AssertionError(f"no dump for a Redis {other}")


def _memory_backend() -> Backend:
    store = MemoryAuthStore()

    async def dump() -> bytes:
        return repr(vars(store)).encode()

    return Backend(store=store, dump=dump, replica=lambda: store)


def _redis_backend(new_client: Callable[[], aioredis.Redis]) -> Backend:
    prefix = f"test:{uuid.uuid4().hex}:"
    inspector = new_client()

    def replica() -> AuthStore:
        store = RedisAuthStore(new_client(), prefix, owns_client=True)
        made.closers.append(store)
        return store

    made = Backend(store=RedisAuthStore(new_client(), prefix, owns_client=True), dump=lambda: _dump_redis(inspector),
                      replica=replica)  # fmt: skip
    made.closers.extend([made.store, RedisAuthStore(inspector, owns_client=True)])
    return made


def _make_backend(kind: str, request: pytest.FixtureRequest) -> Backend:
    if kind == "memory":
        return _memory_backend()
    if kind == "fakeredis":
        server = fakeredis.FakeServer()
        return _redis_backend(lambda: fakeredis.FakeAsyncRedis(server=server))
    url: str = request.getfixturevalue("redis_url")  # the session's real redis-server, emptied
    return _redis_backend(lambda: aioredis.Redis.from_url(url))


@pytest.fixture(params=["memory", "fakeredis", "redis"])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    made = _make_backend(request.param, request)
    yield made
    for store in made.closers:
        await store.close()


@pytest.fixture(params=["fakeredis", "redis"])
async def redis_backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    made = _make_backend(request.param, request)
    yield made
    for store in made.closers:
        await store.close()


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


# --- Redis only: replicas and failures -------------------------------------------------------------------------------


async def test_revocation_is_seen_by_another_replica_at_once(redis_backend: Backend) -> None:
    first, second = redis_backend.store, redis_backend.replica()
    await first.put_tenant(ACME)
    key, record = await first.create_key("acme")
    assert await second.find_key(hash_api_key(key)) == record
    assert await second.revoke_key(record.id)
    assert await first.find_key(hash_api_key(key)) is None
    assert await second.find_key(hash_api_key(key)) is None


async def test_works_with_decoded_responses() -> None:
    store = RedisAuthStore(fakeredis.FakeAsyncRedis(decode_responses=True), owns_client=True)
    await store.put_tenant(ACME)
    key, record = await store.create_key("acme")
    assert await store.find_key(hash_api_key(key)) == record
    assert await store.list_keys("acme") == [record]
    assert (await store.page_tenants(after=None, limit=5)).data == [ACME]
    await store.close()


async def test_unreachable_redis_raises_backend_error() -> None:
    server = fakeredis.FakeServer()
    store = RedisAuthStore(fakeredis.FakeAsyncRedis(server=server), owns_client=True)
    await store.put_tenant(ACME)
    server.connected = False
    calls: list[Callable[[], Awaitable[object]]] = [
        lambda: store.find_key(hash_api_key("x")),
        lambda: store.get_tenant("acme"),
        lambda: store.create_key("acme"),
        lambda: store.delete_tenant("acme"),
        lambda: store.revoke_key("key_0"),
    ]
    for call in calls:
        with pytest.raises(AuthBackendError):
            await call()
    await store.close()


async def test_refused_connection_raises_backend_error() -> None:
    # A port nobody listens on: the real client's ConnectionError (not fakeredis's simulation). No retries: fast.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dead = aioredis.Redis(port=port, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0))
    store = RedisAuthStore(dead, owns_client=True)
    with pytest.raises(AuthBackendError) as caught:
        await store.find_key(hash_api_key("x"))
    assert caught.value.__cause__ is not None
    await store.close()


async def test_corrupt_tenant_record_raises_backend_error() -> None:
    client = fakeredis.FakeAsyncRedis()
    store = RedisAuthStore(client, "p:", owns_client=True)
    await client.hset("p:tenants", "acme", "{not json")
    await client.hset("p:tenants", "globex", '{"limits": {"unknown_limit": 1}, "models": null}')
    for name in ("acme", "globex"):
        with pytest.raises(AuthBackendError, match="corrupt"):
            await store.get_tenant(name)
    await store.close()


async def test_record_under_another_hash_is_not_a_match() -> None:
    # The record's own hash is compared after the lookup: a record filed under the wrong name matches nothing.
    client = fakeredis.FakeAsyncRedis()
    store = RedisAuthStore(client, "p:", owns_client=True)
    await store.put_tenant(ACME)
    key, record = await store.create_key("acme")
    other = hash_api_key("sk-tts-other")
    await client.copy(f"p:key:{record.key_hash}", f"p:key:{other}")
    assert await store.find_key(hash_api_key(key)) == record
    assert await store.find_key(other) is None
    await store.close()


def test_records_are_immutable() -> None:
    record = ApiKeyRecord(id="key_1", tenant="acme", key_hash="0" * 64, created_at=0.0)
    with pytest.raises(AttributeError):
        record.revoked = True  # type: ignore[misc]
