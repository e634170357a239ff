"""Pronunciation dictionaries (``gateway/speech/pronunciation.py``), one contract for both stores (in memory, and a
real redis-server): the per-tenant cap holds under races, every change is a new version and none is lost when changes
race, old versions stay readable up to the kept count, pages follow their cursor, tenants never see each other's."""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING

import pytest
from redis.asyncio import Redis

from gateway.http.errors import as_openai_error
from gateway.speech.dictionaries import KEPT_VERSIONS, MemoryDictionaryStore, RedisDictionaryStore
from gateway.speech.errors import InvalidSpeechRequestError, UnknownDictionaryError
from gateway.speech.pronunciation import PronunciationDictionaries
from gateway.text.lexicon import Rule
from gateway.text.pls import RuleCaps

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

GW = Rule("GW", alias="gateway")


@pytest.fixture(params=["memory", "redis"])
async def dictionaries(request: pytest.FixtureRequest) -> AsyncIterator[PronunciationDictionaries]:
    caps = RuleCaps(max_rules=50)
    if request.param == "memory":
        yield PronunciationDictionaries(MemoryDictionaryStore(), max_per_tenant=3, caps=caps)
        return
    client = Redis.from_url(request.getfixturevalue("redis_url"))
    store = RedisDictionaryStore(client, prefix=f"test-{uuid.uuid4().hex}:")  # the session's Redis is shared
    yield PronunciationDictionaries(store, max_per_tenant=3, caps=caps)
    await client.aclose()


async def test_a_tenant_gets_no_more_dictionaries_than_its_cap(dictionaries: PronunciationDictionaries) -> None:
    made = await asyncio.gather(
        *(dictionaries.create("acme", f"d{i}", None, [GW]) for i in range(6)), return_exceptions=True
    )
    refused = [result for result in made if isinstance(result, InvalidSpeechRequestError)]
    assert len(refused) == 3 and {error.kind for error in refused} == {"pronunciation_dictionary_limit_reached"}
    assert len((await dictionaries.store.page("acme", after=None, limit=100)).data) == 3
    await dictionaries.create("globex", "mine", None, [GW])  # per tenant


async def test_racing_changes_each_make_a_version_and_none_is_lost(dictionaries: PronunciationDictionaries) -> None:
    created = await dictionaries.create("acme", "brand", "desc", [GW])
    changes = await asyncio.gather(
        *(dictionaries.add_rules("acme", created.id, [Rule(f"w{i}", alias="x")]) for i in range(4))
    )
    latest = await dictionaries.get("acme", created.id)
    assert len({created.version_id, *(c.version_id for c in changes)}) == 5
    assert sorted(rule.grapheme for rule in latest.rules) == ["GW", "w0", "w1", "w2", "w3"]
    assert await dictionaries.version_rules("acme", created.id, created.version_id) == (GW,)  # old versions stay


async def test_only_the_last_versions_are_kept(dictionaries: PronunciationDictionaries) -> None:
    created = await dictionaries.create("acme", "brand", None, [GW])
    for i in range(KEPT_VERSIONS):
        latest = await dictionaries.set_rules("acme", created.id, [Rule("GW", alias=f"v{i}")])
    assert len(latest.versions) == KEPT_VERSIONS
    with pytest.raises(UnknownDictionaryError) as gone:
        await dictionaries.version_rules("acme", created.id, created.version_id)
    assert (gone.value.version_id, as_openai_error(gone.value).status_code) == (created.version_id, 404)
    assert await dictionaries.version_rules("acme", created.id, latest.versions[0])


async def test_a_dropped_version_is_refused_by_a_replica_that_compiled_it(
    dictionaries: PronunciationDictionaries,
) -> None:
    # Two replicas over one store, each with its own compiled versions: the one that compiled the pinned version
    # served it from memory after it was dropped, while the other refused it (404).
    other_replica = PronunciationDictionaries(dictionaries.store, max_per_tenant=3, caps=dictionaries.caps)
    created = await dictionaries.create("acme", "brand", None, [GW])
    pinned = [(created.id, created.version_id)]
    assert (await dictionaries.lexicon("acme", pinned)).lexicon.respell("GW").text == "gateway"  # compiled here
    for i in range(KEPT_VERSIONS):  # through the other replica: the pinned version drops out
        latest = await other_replica.set_rules("acme", created.id, [Rule("GW", alias=f"v{i}")])
    assert created.version_id not in latest.versions
    for replica in (other_replica, dictionaries):
        with pytest.raises(UnknownDictionaryError) as refused:
            await replica.lexicon("acme", pinned)
        assert (refused.value.version_id, as_openai_error(refused.value).status_code) == (created.version_id, 404)
    kept = [(created.id, latest.versions[0])]
    assert (await dictionaries.lexicon("acme", kept)).lexicon.respell("GW").text == "v0"


async def test_another_tenant_sees_nothing_of_a_dictionary(dictionaries: PronunciationDictionaries) -> None:
    created = await dictionaries.create("acme", "brand", None, [GW])
    for attempt in (
        dictionaries.get("globex", created.id),
        dictionaries.add_rules("globex", created.id, [GW]),
        dictionaries.remove_rules("globex", created.id, ["GW"]),
        dictionaries.version_rules("globex", created.id, created.version_id),
        dictionaries.lexicon("globex", [(created.id, None)]),
    ):
        with pytest.raises(UnknownDictionaryError) as refused:
            await attempt
        assert as_openai_error(refused.value).status_code == 404
    assert (await dictionaries.store.page("globex", after=None, limit=10)).data == []
    assert await dictionaries.store.versions("globex", [(created.id, None)]) == [None]
    assert await dictionaries.store.versions("globex", [(created.id, created.version_id)]) == [None]
    assert await dictionaries.store.versions("acme", [(created.id, None)]) == [created.version_id]
    skipped = await dictionaries.lexicon("globex", [(created.id, None)], missing_ok=True)
    assert not skipped.lexicon  # a tenant's default it does not have is skipped


async def test_the_lexicon_names_its_versions_and_follows_changes(dictionaries: PronunciationDictionaries) -> None:
    created = await dictionaries.create("acme", "brand", None, [GW])
    first = await dictionaries.lexicon("acme", [(created.id, None)])
    assert first.versions == ((created.id, created.version_id),)
    assert first.lexicon.respell("GW").text == "gateway"
    changed = await dictionaries.set_rules("acme", created.id, [Rule("GW", alias="great wall")])
    now = await dictionaries.lexicon("acme", [(created.id, None)])
    assert now.versions == ((created.id, changed.version_id),)
    assert now.lexicon.respell("GW").text == "great wall"
    pinned = await dictionaries.lexicon("acme", [(created.id, created.version_id)])
    assert pinned.lexicon.respell("GW").text == "gateway"


async def test_pages_follow_the_cursor_and_tenants_are_forgotten(dictionaries: PronunciationDictionaries) -> None:
    ids = [(await dictionaries.create("acme", f"d{i}", None, [GW])).id for i in range(3)]
    first = await dictionaries.store.page("acme", after=None, limit=2)
    rest = await dictionaries.store.page("acme", after=first.data[-1].id, limit=2)
    assert ([r.id for r in first.data], first.has_more) == (ids[:2], True)
    assert ([r.id for r in rest.data], rest.has_more) == (ids[2:], False)
    await dictionaries.store.forget_tenant("acme")
    assert (await dictionaries.store.page("acme", after=None, limit=10)).data == []
    assert await dictionaries.store.rules("acme", ids[0], first.data[0].version_id) is None


async def test_rules_over_the_caps_are_refused(dictionaries: PronunciationDictionaries) -> None:
    with pytest.raises(InvalidSpeechRequestError) as refused:
        await dictionaries.create("acme", "big", None, [Rule(f"w{i}", alias="x") for i in range(51)])
    answer = as_openai_error(refused.value)
    assert (answer.status_code, answer.code, answer.param) == (400, "invalid_pronunciation_rules", "rules")
    created = await dictionaries.create("acme", "ok", None, [GW])
    with pytest.raises(InvalidSpeechRequestError):
        await dictionaries.add_rules("acme", created.id, [Rule(f"w{i}", alias="x") for i in range(50)])
    assert (await dictionaries.get("acme", created.id)).version_id == created.version_id  # nothing changed
