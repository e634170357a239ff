"""A dictionary version is compiled once per process and reused (issue #47): a lexicon of several dictionaries walks
each version's compiled automata in turn (``Lexicon.joined``), so naming a new combination of compiled versions
compiles nothing, and requests racing for one new version compile it once."""

from __future__ import annotations

import asyncio

import pytest

from gateway.speech.pronunciation import MemoryDictionaryStore, PronunciationDictionaries
from gateway.text.lexicon import Lexicon, Rule
from gateway.text.pls import PLSError, RuleCaps, check_rules


@pytest.fixture
def dictionaries() -> PronunciationDictionaries:
    return PronunciationDictionaries(MemoryDictionaryStore(), max_per_tenant=5, caps=RuleCaps(max_rules=50))


async def test_a_new_combination_of_compiled_versions_compiles_nothing(dictionaries: PronunciationDictionaries) -> None:
    first = await dictionaries.create("acme", "first", None, [Rule("GW", alias="gateway")])
    second = await dictionaries.create("acme", "second", None, [Rule("GW", alias="great wall"), Rule("k8s", "k")])
    third = await dictionaries.create("acme", "third", None, [Rule("db", alias="database")])
    for record in (first, second, third):
        await dictionaries.lexicon("acme", [(record.id, None)])
    assert dictionaries.compiles == 3
    combinations = [[first, second], [second, first], [first, second, third], [third, second]]
    applied = [await dictionaries.lexicon("acme", [(r.id, None) for r in combination]) for combination in combinations]
    assert dictionaries.compiles == 3  # the old code compiled one automaton per combination: 4 more
    assert applied[0].lexicon.respell("GW k8s").text == "gateway k"  # the first dictionary named wins a grapheme
    assert applied[1].lexicon.respell("GW k8s").text == "great wall k"
    assert applied[2].lexicon.respell("GW db").text == "gateway database"


async def test_racing_requests_compile_a_new_version_once(dictionaries: PronunciationDictionaries) -> None:
    record = await dictionaries.create("acme", "d", None, [Rule(f"w{i}", alias="x") for i in range(50)])
    applied = await asyncio.gather(*(dictionaries.lexicon("acme", [(record.id, None)]) for _ in range(8)))
    assert dictionaries.compiles == 1
    assert {id(a.lexicon) for a in applied} == {id(applied[0].lexicon)}


async def test_a_tenants_versions_are_its_own(dictionaries: PronunciationDictionaries) -> None:
    record = await dictionaries.create("acme", "d", None, [Rule("GW", alias="gateway")])
    await dictionaries.lexicon("acme", [(record.id, None)], generation="1")
    await dictionaries.lexicon("acme", [(record.id, None)], generation="2")  # the tenant deleted and made again
    assert dictionaries.compiles == 2


@pytest.mark.parametrize(
    "text",
    ["GW and gw run New York in k8s", "new york new yorker", "GWs GW's (gw) xGW", "", "nothing here"],
)
def test_a_joined_lexicon_respells_as_one_compiled_from_all_rules(text: str) -> None:
    parts = [
        [Rule("GW", alias="gateway"), Rule("new", alias="NEW", case_sensitive=False)],
        [Rule("New York", alias="the big apple"), Rule("GW", alias="great wall")],
        [Rule("gw", alias="g w", case_sensitive=False, word_boundaries=False), Rule("k8s", alias="kubernetes")],
    ]
    whole = Lexicon([rule for rules in parts for rule in rules])
    joined = Lexicon.joined([Lexicon(rules) for rules in parts])
    assert joined.respell(text) == whole.respell(text)
    assert joined.size == sum(Lexicon(rules).size for rules in parts)


def test_a_versions_graphemes_are_capped_in_all_so_its_compile_is_cheap() -> None:
    caps = RuleCaps(max_rules=100_000)  # whatever number of rules an operator allows
    check_rules([Rule(f"{i:0256d}", alias="x") for i in range(256)], caps)  # 65,536 characters
    with pytest.raises(PLSError, match="in all"):
        check_rules([Rule(f"{i:0256d}", alias="x") for i in range(257)], caps)
