"""Consent stores, one contract for both (in memory, and a real redis-server): the per-tenant cap holds under races,
recordings come back byte for byte, pages follow their cursor, and tenants never see each other's consents."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest
from redis.asyncio import Redis

from gateway.speech.consents import ConsentStore, MemoryConsentStore, RedisConsentStore, new_consent

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

EVERY_BYTE = bytes(range(256)) * 64  # audio is binary: nothing may be decoded or re-encoded on the way


@pytest.fixture(params=["memory", "redis"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[ConsentStore]:
    if request.param == "memory":
        yield MemoryConsentStore()
        return
    client = Redis.from_url(request.getfixturevalue("redis_url"))
    yield RedisConsentStore(client)
    await client.aclose()


async def add(store: ConsentStore, tenant: str = "acme", name: str = "consent", limit: int = 20) -> str | None:
    consent = new_consent(tenant, name, "en-US", 3.0)
    return consent.id if await store.add(consent, EVERY_BYTE + name.encode(), max_per_tenant=limit) else None


async def test_a_tenant_gets_no_more_consents_than_its_cap(store: ConsentStore) -> None:
    added = await asyncio.gather(*(add(store, name=f"c{i}", limit=3) for i in range(8)))
    assert sum(item is not None for item in added) == 3
    assert len((await store.page("acme", after=None, limit=100)).data) == 3
    assert await add(store, tenant="globex", limit=3) is not None  # per tenant


async def test_the_recording_comes_back_byte_for_byte_and_goes_with_its_consent(store: ConsentStore) -> None:
    consent_id = await add(store, name="mine")
    assert consent_id is not None
    assert await store.recording("acme", consent_id) == EVERY_BYTE + b"mine"
    assert await store.delete("acme", consent_id)
    assert await store.recording("acme", consent_id) is None
    assert await store.get("acme", consent_id) is None
    assert not await store.delete("acme", consent_id)


async def test_another_tenant_sees_nothing_of_a_consent(store: ConsentStore) -> None:
    consent_id = await add(store)
    assert consent_id is not None
    assert await store.get("globex", consent_id) is None
    assert await store.recording("globex", consent_id) is None
    assert await store.rename("globex", consent_id, "stolen") is None
    assert not await store.delete("globex", consent_id)
    assert (await store.page("globex", after=None, limit=100)).data == []
    record = await store.get("acme", consent_id)
    assert record is not None
    assert record.name == "consent"


async def test_pages_follow_the_cursor_even_past_a_deleted_consent(store: ConsentStore) -> None:
    ids = []
    for index in range(5):
        ids.append(await add(store, name=f"c{index}"))
        await asyncio.sleep(0.002)  # ids sort by their millisecond
    first = await store.page("acme", after=None, limit=2)
    assert [c.id for c in first.data] == ids[:2]
    assert first.has_more
    await store.delete("acme", first.data[-1].id)  # the cursor itself is gone
    rest = await store.page("acme", after=first.data[-1].id, limit=2)
    assert [c.id for c in rest.data] == ids[2:4]
    assert rest.has_more
    last = await store.page("acme", after=ids[3], limit=2)
    assert [c.id for c in last.data] == ids[4:]
    assert not last.has_more


async def test_renaming_keeps_the_recording_and_never_revives_a_deleted_consent(store: ConsentStore) -> None:
    consent_id = await add(store, name="before")
    assert consent_id is not None
    renamed = await store.rename("acme", consent_id, "after")
    assert renamed is not None
    assert renamed.name == "after"
    stored = await store.get("acme", consent_id)
    assert stored is not None
    assert (stored.name, stored.language, stored.created_at) == ("after", "en-US", renamed.created_at)
    assert await store.recording("acme", consent_id) == EVERY_BYTE + b"before"
    await store.delete("acme", consent_id)
    assert await store.rename("acme", consent_id, "again") is None
    assert await store.get("acme", consent_id) is None


async def test_forgetting_a_tenant_deletes_its_consents_only(store: ConsentStore) -> None:
    mine = await add(store, name="mine")
    theirs = await add(store, tenant="globex", name="theirs")
    assert mine is not None
    assert theirs is not None
    await store.forget_tenant("acme")
    assert (await store.page("acme", after=None, limit=100)).data == []
    assert await store.recording("acme", mine) is None
    assert await store.recording("globex", theirs) == EVERY_BYTE + b"theirs"
    assert await add(store, name="fresh", limit=1) is not None  # room again
