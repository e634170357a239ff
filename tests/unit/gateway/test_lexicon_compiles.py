"""A dictionary version is compiled once per process and reused (issue #47): a lexicon of several dictionaries walks
each version's compiled automata in turn (``Lexicon.joined``), so naming a new combination of compiled versions
compiles nothing, and requests racing for one new version compile it once."""

from __future__ import annotations

import asyncio
import gc
import multiprocessing
import os
import random
import signal
import string
import time
from typing import TYPE_CHECKING

import pytest

from gateway.http.errors import as_openai_error
from gateway.speech.compile_process import CompileProcess
from gateway.speech.dictionaries import MemoryDictionaryStore
from gateway.speech.errors import OverLimitError
from gateway.speech.pronunciation import PronunciationDictionaries
from gateway.text.lexicon import Lexicon, Rule
from gateway.text.pls import NAMESPACE, PLSError, RuleCaps, check_rules, write_pls

if TYPE_CHECKING:
    from collections.abc import Iterator


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


def _full_version(seed: int) -> list[Rule]:
    """The most a version may hold: 256 graphemes of 256 characters (65,536 in all), nearly a state each."""
    rng = random.Random(seed)
    return [Rule("".join(rng.choices(string.ascii_letters, k=256)), alias="x") for _ in range(256)]


async def test_a_compile_gives_the_event_loop_its_turns() -> None:
    """Compiling the largest version takes some 0.07 s of pure Python; another task waits a slice of it, not all of
    it. Measured in the process's CPU time, which other processes on the machine do not stretch: compiled in a worker
    thread, the loop waited 7 to 57 ms of the compile's CPU at a time (the thread holds the GIL for its switch interval,
    5 ms, or longer); in slices on the loop, about 1 ms, 3.5 ms at most.

    The process's CPU time counts every thread's: one wait may carry another thread's work (pytest-xdist's own thread
    reporting results: a CI run once saw one wait of 7 ms, the others about 1 ms), so one wait may exceed the slice;
    a compile off the loop makes many such waits."""
    dictionaries = PronunciationDictionaries(MemoryDictionaryStore(), max_per_tenant=5, caps=RuleCaps(max_rules=256))
    record = await dictionaries.create("acme", "big", None, _full_version(1))
    waits: list[float] = []
    compiling = asyncio.create_task(dictionaries.lexicon("acme", [(record.id, None)]))
    gc.disable()  # a collection's pause is no compile's
    try:
        last = time.process_time()
        while not compiling.done():
            await asyncio.sleep(0)
            now = time.process_time()
            waits.append(now - last)
            last = now
    finally:
        gc.enable()
    applied = await compiling
    assert applied.lexicon.respell(f"say {record.rules[7].grapheme} now").text == "say x now"
    assert len(waits) >= 20
    *slices, largest = sorted(waits)
    assert slices[-1] < 0.005, "the loop waited more than a slice of the compile, more than once"
    assert largest < 0.02


async def test_a_tenants_compiles_past_its_budget_are_refused() -> None:
    caps = RuleCaps(max_rules=256)
    dictionaries = PronunciationDictionaries(
        MemoryDictionaryStore(), max_per_tenant=5, caps=caps, compile_characters_per_minute=100_000
    )
    first = await dictionaries.create("acme", "one", None, _full_version(1))
    second = await dictionaries.create("acme", "two", None, _full_version(2))
    other = await dictionaries.create("globex", "one", None, _full_version(3))
    await dictionaries.lexicon("acme", [(first.id, None)])  # 65,536 of acme's 100,000 a minute
    with pytest.raises(OverLimitError) as refused:
        await dictionaries.lexicon("acme", [(second.id, None)])
    answer = as_openai_error(refused.value)
    assert (answer.status_code, answer.type, answer.code) == (429, "requests", "rate_limit_exceeded")
    assert 1 <= int(answer.headers["Retry-After"]) <= 60  # 31,072 characters at 100,000 a minute: 19 s
    await dictionaries.lexicon("acme", [(first.id, None)])  # compiled already: applied whatever the budget
    await dictionaries.lexicon("globex", [(other.id, None)])  # another tenant's budget is its own
    assert dictionaries.compiles == 2


async def test_the_budget_refills_over_a_minute(monkeypatch: pytest.MonkeyPatch) -> None:
    dictionaries = PronunciationDictionaries(
        MemoryDictionaryStore(), max_per_tenant=5, caps=RuleCaps(max_rules=256), compile_characters_per_minute=65_536
    )
    records = [await dictionaries.create("acme", str(n), None, _full_version(n)) for n in range(2)]
    now = time.monotonic()
    monkeypatch.setattr(time, "monotonic", lambda: now)
    await dictionaries.lexicon("acme", [(records[0].id, None)])
    with pytest.raises(OverLimitError, match="retry after 60 s"):
        await dictionaries.lexicon("acme", [(records[1].id, None)])
    monkeypatch.setattr(time, "monotonic", lambda: now + 60)
    await dictionaries.lexicon("acme", [(records[1].id, None)])
    assert dictionaries.compiles == 2


def test_a_compile_in_steps_is_the_compile_at_once() -> None:
    rules = [Rule("GW", alias="gateway"), Rule("new york", alias="NYC", case_sensitive=False), *_full_version(4)]
    steps = Lexicon.building(rules)
    yielded = 0
    while True:
        try:
            next(steps)
            yielded += 1
        except StopIteration as done:
            stepped: Lexicon = done.value
            break
    assert yielded > 10
    text = f"GW in New York: {rules[5].grapheme}."
    assert stepped.respell(text) == Lexicon(rules).respell(text)
    assert stepped.size == Lexicon(rules).size


async def test_a_compile_apart_takes_a_fraction_of_the_loops_cpu() -> None:
    """Compiled in the compile process, the largest version costs the event loop's thread the loading of its tables
    (a copy and C-speed dictionary updates), not the compile: measured in the loop thread's own CPU time, which other
    processes on the machine do not stretch."""
    process = CompileProcess()
    try:
        apart, here = (
            PronunciationDictionaries(
                MemoryDictionaryStore(), max_per_tenant=5, caps=RuleCaps(max_rules=256), compile_process=compiler
            )
            for compiler in (process, None)
        )
        warm = await apart.create("acme", "warm", None, [Rule("GW", alias="gateway")])
        await apart.lexicon("acme", [(warm.id, None)])  # the process's start is not what this measures
        rules = [Rule("new york", alias="NYC", case_sensitive=False), *_full_version(5)[1:]]
        spent: list[float] = []
        applied = []
        for dictionaries in (apart, here):
            record = await dictionaries.create("acme", "big", None, rules)
            started = time.thread_time()
            applied.append(await dictionaries.lexicon("acme", [(record.id, None)]))
            spent.append(time.thread_time() - started)
        assert process.compiles == 2
        text = f"New York: {rules[9].grapheme}, {rules[9].grapheme}x."
        assert applied[0].lexicon.respell(text) == applied[1].lexicon.respell(text)
        assert applied[0].lexicon.respell(text).text == "NYC: x, " + rules[9].grapheme + "x."
        assert applied[0].lexicon.size == applied[1].lexicon.size
        assert spent[0] < spent[1] / 4, spent
    finally:
        process.close()


@pytest.fixture
def compiling() -> Iterator[tuple[CompileProcess, PronunciationDictionaries]]:
    """A compile process (started on its first task), and the dictionaries that compile and read files in it."""
    process = CompileProcess()
    try:
        yield (
            process,
            PronunciationDictionaries(
                MemoryDictionaryStore(), max_per_tenant=5, caps=RuleCaps(max_rules=50), compile_process=process
            ),
        )
    finally:
        process.close()


async def test_a_compile_process_that_ended_is_replaced_and_its_compile_done_here(
    compiling: tuple[CompileProcess, PronunciationDictionaries],
) -> None:
    process, dictionaries = compiling
    first = await dictionaries.create("acme", "one", None, [Rule("GW", alias="gateway")])
    await dictionaries.lexicon("acme", [(first.id, None)])
    assert process.compiles == 1
    for child in multiprocessing.active_children():  # the compile process (killed: out of memory, say)
        os.kill(child.pid or 0, signal.SIGKILL)
        child.join()
    second = await dictionaries.create("acme", "two", None, [Rule("db", alias="database")])
    applied = await dictionaries.lexicon("acme", [(second.id, None)])  # compiled on the loop this once
    assert applied.lexicon.respell("a db").text == "a database"
    assert process.compiles == 1
    third = await dictionaries.create("acme", "three", None, [Rule("k8s", alias="kubernetes")])
    applied = await dictionaries.lexicon("acme", [(third.id, None)])  # in a new process
    assert applied.lexicon.respell("on k8s").text == "on kubernetes"
    assert process.compiles == 2
    assert dictionaries.compiles == 3


async def test_a_stop_signal_sent_to_the_servers_group_leaves_the_compile_process_running(
    compiling: tuple[CompileProcess, PronunciationDictionaries],
) -> None:
    # A supervisor that stops the server's whole group (systemd's KillMode=control-group) signals it too; the server
    # drains, and a compile under way then must not lose its process.
    process, dictionaries = compiling
    first = await dictionaries.create("acme", "one", None, [Rule("GW", alias="gateway")])
    await dictionaries.lexicon("acme", [(first.id, None)])
    (child,) = multiprocessing.active_children()
    os.kill(child.pid or 0, signal.SIGTERM)
    os.kill(child.pid or 0, signal.SIGINT)
    second = await dictionaries.create("acme", "two", None, [Rule("db", alias="database")])
    applied = await dictionaries.lexicon("acme", [(second.id, None)])
    assert applied.lexicon.respell("a db").text == "a database"
    assert (process.compiles, child.is_alive()) == (2, True)  # the same process compiled both


async def test_an_uploaded_pls_file_is_read_in_the_compile_process(
    compiling: tuple[CompileProcess, PronunciationDictionaries],
) -> None:
    # Untrusted XML is read apart: the process that compiles reads it (started by the read: nothing compiled yet),
    # and what it refuses comes back as the refusal.
    process, dictionaries = compiling
    assert multiprocessing.active_children() == []
    rules = [Rule("GW", alias="gateway"), Rule("db", alias="database")]
    assert await dictionaries.file_rules(write_pls(rules)) == rules
    (child,) = multiprocessing.active_children()
    with pytest.raises(PLSError, match="more than 864 elements"):
        await dictionaries.file_rules(b'<lexicon xmlns="' + NAMESPACE.encode() + b'">' + b"<x/>" * 1000 + b"</lexicon>")
    assert (process.compiles, child.is_alive()) == (0, True)
