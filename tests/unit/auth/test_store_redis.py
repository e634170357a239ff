"""What only the Redis store does, beyond the contract (``test_store_contract.py``): replicas that see each other's
changes at once, either kind of client, and a Redis that is unreachable or holds records this code cannot read."""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING

import fakeredis
import pytest
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from auth import AuthBackendError, RedisAuthStore, Tenant, hash_api_key
from auth.settings import TenantLimits
from tests.auth_backends import Backend, make_backend

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable


ACME = Tenant("acme", TenantLimits(requests_per_minute=60, concurrent_streams=2), frozenset({"tts-1", "espeak"}))


@pytest.fixture(params=["fakeredis", "redis"])
async def redis_backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    made = make_backend(request.param, request)
    yield made
    await made.close()


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
