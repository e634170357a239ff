"""Custom voice stores: the per-tenant limit holds (atomically in Redis) and a deleted tenant's voices go."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import fakeredis
import pytest

from gateway.speech.voices import MemoryVoiceStore, RedisVoiceStore, VoiceStore, new_voice

if TYPE_CHECKING:
    from collections.abc import AsyncIterator


@pytest.fixture(params=["memory", "redis"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[VoiceStore]:
    if request.param == "memory":
        yield MemoryVoiceStore()
        return
    client = fakeredis.FakeAsyncRedis()
    yield RedisVoiceStore(client)
    await client.aclose()


async def test_a_tenant_gets_no_more_voices_than_its_limit(store: VoiceStore) -> None:
    # Concurrent creations race for the last places; exactly the limit wins.
    added = await asyncio.gather(
        *(store.add(new_voice("acme", f"v{i}", "chattts", "seed:1"), max_per_tenant=3) for i in range(8))
    )
    assert sum(added) == 3
    assert len(await store.list("acme")) == 3
    assert await store.add(new_voice("globex", "v", "chattts", "seed:1"), max_per_tenant=3)  # per tenant


async def test_forgetting_a_tenant_deletes_its_voices_only(store: VoiceStore) -> None:
    await store.add(new_voice("acme", "mine", "chattts", "seed:1"), max_per_tenant=10)
    kept = new_voice("globex", "theirs", "chattts", "seed:2")
    await store.add(kept, max_per_tenant=10)
    await store.forget_tenant("acme")
    assert await store.list("acme") == []
    assert await store.list("globex") == [kept]
    assert await store.add(new_voice("acme", "mine", "chattts", "seed:1"), max_per_tenant=1)


async def test_pages_follow_their_cursor_past_a_deleted_voice(store: VoiceStore) -> None:
    made = [new_voice("acme", f"v{i}", "chattts", f"seed:{i}") for i in range(5)]
    for voice in made:
        await store.add(voice, max_per_tenant=10)
    first = await store.page("acme", after=None, limit=2)
    assert (first.data, first.has_more) == (made[:2], True)
    assert (await store.page("acme", after=made[0].id, limit=1)).data == [made[1]]
    await store.delete("acme", made[1].id)  # the cursor's own voice: the next page starts where it stood
    rest = await store.page("acme", after=made[1].id, limit=5)
    assert (rest.data, rest.has_more) == (made[2:], False)
    assert (await store.page("globex", after=None, limit=2)).data == []
