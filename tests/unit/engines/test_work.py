"""Sharing an engine by work: what a request is expected to cost, and the slot scheduler charging what it used.

The sharing tests run the real :class:`SlotScheduler` over one slot with tenants that always have requests waiting;
each request's work is what an engine would make of its text (given here per script, deliberately unlike the
estimate), and the tenants' served work is compared.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest

from engines.errors import EngineNotReadyError, EngineOverloadedError
from engines.scheduling import Grant, SlotScheduler, TenantShare, expected_speech_s
from engines.settings import QueueSettings

if TYPE_CHECKING:
    from collections.abc import Callable

ENGLISH = "The quick brown fox jumps over the lazy dog, and then it runs back home. "
CJK = "今天天气很好\uff0c我们一起去公园散步吧。"  # a CJK text has CJK punctuation
DIGITS = "4 8 15 16 23 42, 7 0 3 9. "


class Slots:
    """``capacity`` interchangeable slots, all held by one holder (the name of the engine)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.taken = 0

    def free_slot(self) -> str | None:
        return "engine" if self.taken < self.capacity else None

    def take(self, holder: str) -> None:
        self.taken += 1

    def give_back(self, holder: str) -> None:
        self.taken -= 1

    def total_slots(self) -> int:
        return self.capacity

    def free_slots(self) -> int:
        return self.capacity - self.taken


def scheduler(capacity: int = 1, **settings: object) -> tuple[SlotScheduler[str], Slots]:
    slots = Slots(capacity)
    fields: dict[str, object] = {"queue_size": 64, "queue_timeout_s": 5.0, "reserved_slots": 0} | settings
    return SlotScheduler("test", QueueSettings.model_validate(fields), slots), slots


# ----------------------------------------------------------------------------------------- the estimate
def test_the_estimate_grows_with_the_speech_not_the_characters() -> None:
    english, cjk = ENGLISH * 14, CJK * 58  # about 1,030 characters each
    assert expected_speech_s(cjk) > 2.5 * expected_speech_s(english)  # a CJK character is a syllable
    digits = DIGITS * 40
    assert expected_speech_s(digits) > 1.5 * expected_speech_s(english[: len(digits)])
    assert 45 < expected_speech_s(english) < 90  # about 190 words: a minute and a bit, read aloud


def test_every_request_costs_something_and_punctuation_pauses() -> None:
    assert expected_speech_s("") == pytest.approx(0.25)
    assert expected_speech_s("?") >= expected_speech_s("")
    assert expected_speech_s("Yes. No. Maybe.") > expected_speech_s("Yes no maybe")
    assert expected_speech_s("1234567") > expected_speech_s("7")  # a number is read out digit group by group


# ----------------------------------------------------------------------------------------- sharing by work
def real_work(text: str) -> float:
    """What an engine makes of ``text``: here CJK takes twice, digits one and a half times their estimate (an
    engine's rate differs from any estimate; the charge must follow what was made)."""
    factor = 2.0 if text.startswith(CJK[:2]) else 1.5 if text[0].isdigit() else 1.0
    return factor * expected_speech_s(text)


async def served_work(
    texts: dict[str, str], *, correct: bool = True, cost: Callable[[str], float] = expected_speech_s, rounds: int = 60
) -> dict[str, float]:
    """Each tenant keeps three requests of its text waiting for one slot; returns the work each got served."""
    slots_scheduler, slots = scheduler()
    served = dict.fromkeys(texts, 0.0)
    jobs = 0

    async def tenant_loop(tenant: str) -> None:
        nonlocal jobs
        while jobs < rounds:
            grant = await slots_scheduler.acquire(tenant, None, cost(texts[tenant]))
            grant.start()
            jobs += 1
            work = real_work(texts[tenant])
            served[tenant] += work
            await asyncio.sleep(0)  # the job "runs"; the others stay queued meanwhile
            slots.taken -= 1
            grant.finish(work if correct else None)

    loops = [asyncio.create_task(tenant_loop(tenant)) for tenant in texts for _ in range(3)]
    await asyncio.wait_for(asyncio.gather(*loops), 10)
    return served


async def test_a_tenant_speaking_cjk_or_digits_gets_no_more_engine_than_one_speaking_english() -> None:
    served = await served_work({"english": ENGLISH, "cjk": CJK, "digits": DIGITS * 3})
    fair = sum(served.values()) / 3
    for tenant, work in served.items():
        assert work == pytest.approx(fair, rel=0.15), (tenant, served)


async def test_without_the_correction_an_underestimated_script_takes_more_than_its_share() -> None:
    # The check that the sharing test can fail: estimates alone give CJK twice English's work, characters far more.
    estimated_only = await served_work({"english": ENGLISH, "cjk": CJK}, correct=False)
    assert estimated_only["cjk"] > 1.6 * estimated_only["english"]
    by_characters = await served_work({"english": ENGLISH, "cjk": CJK}, correct=False, cost=len)
    assert by_characters["cjk"] > 3 * by_characters["english"]


async def test_a_request_cut_short_gives_back_what_it_did_not_use() -> None:
    slots_scheduler, slots = scheduler()
    first = await slots_scheduler.acquire("a", None, 10.0)
    first.start()
    waiting = [asyncio.create_task(slots_scheduler.acquire(tenant, None, 5.0)) for tenant in ("b", "b", "a")]
    await asyncio.sleep(0)
    order = []
    slots.taken -= 1
    first.finish(0.5)  # a's 10 s request was cancelled after half a second: a is charged 0.5, not 10
    for _ in waiting:
        grant = await next_granted(waiting)
        order.append(grant.tenant)
        grant.start()
        slots.taken -= 1
        grant.finish(5.0)
    # Charged the full 10 s, a would come after both of b's requests; charged 0.5 s, it comes between them.
    assert order == ["b", "a", "b"]


async def next_granted(waiting: list[asyncio.Task[Grant[str]]]) -> Grant[str]:
    """The one waiter handed a slot and not started yet (its task resumes a few loop turns after the hand-out)."""
    for _ in range(100):
        granted = [task.result() for task in waiting if task.done() and task.result().state == "granted"]
        if granted:
            (grant,) = granted
            return grant
        await asyncio.sleep(0)
    raise AssertionError("nobody was handed the slot")


async def test_waiters_wait_in_priority_order_and_get_not_ready_when_the_engine_goes() -> None:
    slots_scheduler, _slots = scheduler()
    held = await slots_scheduler.acquire("a", None, 1.0)
    held.start()
    low = asyncio.create_task(slots_scheduler.acquire("low", TenantShare(priority="low"), 1.0))
    high = asyncio.create_task(slots_scheduler.acquire("high", TenantShare(priority="high"), 1.0))
    await asyncio.sleep(0)
    assert slots_scheduler.queued_by_tenant() == {"low": 1, "high": 1}
    slots_scheduler.fail_waiters("gone")
    for waiter in (low, high):
        with pytest.raises(EngineNotReadyError, match="gone"):
            await waiter


async def test_a_full_queue_and_a_long_wait_are_overload() -> None:
    slots_scheduler, _slots = scheduler(queue_size=1, queue_timeout_s=0.05)
    (await slots_scheduler.acquire("a", None, 1.0)).start()
    waiting = asyncio.create_task(slots_scheduler.acquire("b", None, 1.0))
    await asyncio.sleep(0)
    with pytest.raises(EngineOverloadedError):  # the queue holds one already
        await slots_scheduler.acquire("c", None, 1.0)
    with pytest.raises(EngineOverloadedError):  # timed out
        await waiting
    assert len(slots_scheduler) == 0


async def test_the_continuation_of_a_stream_is_neither_refused_nor_timed_out_but_waits_its_turn() -> None:
    slots_scheduler, slots = scheduler(queue_size=1, queue_timeout_s=0.05)
    (await slots_scheduler.acquire("a", None, 1.0)).start()
    others = asyncio.create_task(slots_scheduler.acquire("b", None, 1.0))  # the queue is full now
    await asyncio.sleep(0)
    continuation = asyncio.create_task(slots_scheduler.acquire("a", TenantShare(max_queued=1), 1.0, continuing=True))
    await asyncio.sleep(0.2)  # past the queue timeout: b's request gave up, the continuation did not
    with pytest.raises(EngineOverloadedError):
        await others
    assert not continuation.done()
    assert slots_scheduler.queued_by_tenant() == {"a": 1}
    slots.taken -= 1
    slots_scheduler.hand_out()
    assert (await asyncio.wait_for(continuation, 1)).tenant == "a"


@pytest.mark.parametrize("continuing", [False, True], ids=["first-job", "continuing"])
async def test_a_waiter_cancelled_as_its_slot_comes_stays_cancelled_and_passes_the_slot_on(continuing: bool) -> None:
    # The client of a queued request leaves just as the job before it ends: the slot is handed to its waiter and the
    # waiter is cancelled in one turn of the loop. Python 3.11's wait_for returned the slot then, swallowing the
    # cancellation, and the request went on speaking (every segment of a long input) for nobody.
    slots_scheduler, slots = scheduler()
    held = await slots_scheduler.acquire("a", None, 1.0)
    held.start()
    waiting = asyncio.create_task(slots_scheduler.acquire("b", None, 1.0, continuing=continuing))
    await asyncio.sleep(0)
    assert slots_scheduler.queued_by_tenant() == {"b": 1}
    slots.taken -= 1  # the job ended: its backend frees the slot and says so, which hands it to b's waiter...
    held.finish()
    waiting.cancel()  # ...whose client left in the same turn
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert slots.taken == 0
    assert len(slots_scheduler) == 0


async def test_a_slot_handed_to_a_waiter_that_left_costs_its_tenant_nothing() -> None:
    slots_scheduler, slots = scheduler()
    held = await slots_scheduler.acquire("x", None, 1.0)
    held.start()
    b_leaving = asyncio.create_task(slots_scheduler.acquire("b", None, 10.0))
    a_first = asyncio.create_task(slots_scheduler.acquire("a", None, 10.0))
    await asyncio.sleep(0)
    slots.taken -= 1
    held.finish()
    b_leaving.cancel()  # b's slot comes as b leaves: it passes on to a
    with pytest.raises(asyncio.CancelledError):
        await b_leaving
    running = await a_first
    running.start()
    a_again = asyncio.create_task(slots_scheduler.acquire("a", None, 10.0))  # a asks first...
    b_again = asyncio.create_task(slots_scheduler.acquire("b", None, 10.0))
    await asyncio.sleep(0)
    slots.taken -= 1
    running.finish(10.0)
    # ...but a has had 10 s of speech and b none: b goes next (charged for the slot it never used, it tied with a).
    assert (await asyncio.wait_for(b_again, 1)).tenant == "b"
    assert not a_again.done()
    a_again.cancel()
    with pytest.raises(asyncio.CancelledError):
        await a_again
