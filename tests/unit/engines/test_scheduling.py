"""The engine pool's scheduler: who of the waiting requests gets the next free worker. On its own first, then in a
pool of real worker processes."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest

from engines.base import SynthesisRequest
from engines.errors import EngineOverloadedError
from engines.pool import EnginePool
from engines.scheduling import QueueFullError, TenantQueueFullError, TenantScheduler, TenantShare
from engines.settings import local_engine_settings
from tests.waiting import wait_for

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

pytestmark = pytest.mark.slow  # starts engine worker processes: left out of `make quick`


def drain(scheduler: TenantScheduler[str]) -> list[str]:
    order = []
    while (item := scheduler.pop()) is not None:
        order.append(item)
    return order


def test_a_tenant_holding_the_workers_goes_behind_a_tenant_holding_none() -> None:
    scheduler: TenantScheduler[str] = TenantScheduler(capacity=16)
    scheduler.charge("b")  # b's first two requests got the two workers without waiting
    scheduler.charge("b")
    scheduler.push("b3", "b")
    scheduler.push("b4", "b")
    scheduler.push("a1", "a")
    assert drain(scheduler) == ["a1", "b3", "b4"]


def test_waiting_tenants_take_turns_whatever_the_order_they_queued_in() -> None:
    scheduler: TenantScheduler[str] = TenantScheduler(capacity=16)
    for i in range(4):
        scheduler.push(f"b{i}", "b")
    for i in range(2):
        scheduler.push(f"a{i}", "a")
    assert drain(scheduler) == ["b0", "a0", "b1", "a1", "b2", "b3"]


def test_weights_divide_the_turns() -> None:
    scheduler: TenantScheduler[str] = TenantScheduler(capacity=32)
    heavy, light = TenantShare(weight=3), TenantShare(weight=1)
    for i in range(9):
        scheduler.push(f"h{i}", "heavy", heavy)
        scheduler.push(f"l{i}", "light", light)
    first_eight = drain(scheduler)[:8]
    assert sum(item.startswith("h") for item in first_eight) == 6


def test_cost_counts_a_long_request_as_more_of_the_share() -> None:
    scheduler: TenantScheduler[str] = TenantScheduler(capacity=16)
    scheduler.push("long", "b", cost=400)
    scheduler.push("short1", "a", cost=20)
    scheduler.push("short2", "a", cost=20)
    assert drain(scheduler) == ["short1", "short2", "long"]


def test_higher_priority_classes_go_first_and_are_fair_within() -> None:
    scheduler: TenantScheduler[str] = TenantScheduler(capacity=16)
    low, high = TenantShare(priority="low"), TenantShare(priority="high")
    scheduler.push("low", "c", low)
    scheduler.push("n0", "b")
    scheduler.push("n1", "b")
    scheduler.push("h0", "a", high)
    scheduler.push("h1", "a", high)
    scheduler.push("h2", "d", high)
    assert drain(scheduler) == ["h0", "h2", "h1", "n0", "n1", "low"]


def test_an_idle_tenant_saves_up_no_credit() -> None:
    scheduler: TenantScheduler[str] = TenantScheduler(capacity=16)
    for i in range(6):  # b alone: served at once, turn after turn, while a is idle
        scheduler.push(f"b{i}", "b")
        assert scheduler.pop() == f"b{i}"
    for i in range(3):
        scheduler.push(f"a{i}", "a")
    scheduler.push("b6", "b")
    scheduler.push("b7", "b")
    # a is not owed the time it was idle (it would take all three first), only b's last turn, b5, still counted.
    assert drain(scheduler) == ["a0", "a1", "b6", "a2", "b7"]


def test_a_tenant_over_its_own_cap_is_refused_while_others_still_queue() -> None:
    scheduler: TenantScheduler[str] = TenantScheduler(capacity=4)
    capped = TenantShare(max_queued=2)
    scheduler.push("b0", "b", capped)
    scheduler.push("b1", "b", capped)
    with pytest.raises(TenantQueueFullError):
        scheduler.push("b2", "b", capped)
    scheduler.push("a0", "a")
    scheduler.push("a1", "a")
    with pytest.raises(QueueFullError):
        scheduler.push("a2", "a")
    assert scheduler.queued_by_tenant() == {"b": 2, "a": 2}
    assert scheduler.pop() == "b0"
    scheduler.push("b2", "b", capped)  # room again, in its own part and in the whole
    assert len(scheduler) == 4


def test_a_queue_of_size_zero_takes_nobody() -> None:
    scheduler: TenantScheduler[str] = TenantScheduler(capacity=0)
    with pytest.raises(QueueFullError):
        scheduler.push("a0", "a")


def test_a_waiter_that_gives_up_leaves_and_gives_its_turn_back() -> None:
    scheduler: TenantScheduler[str] = TenantScheduler(capacity=16)
    for i in range(3):
        scheduler.push(f"b{i}", "b")
    scheduler.push("a0", "a")
    scheduler.push("a1", "a")
    assert scheduler.remove("b0")
    assert not scheduler.remove("b0")
    assert scheduler.queued("b") == 2
    # b's remaining waiters moved up into the turn b0 gave back.
    assert drain(scheduler) == ["b1", "a0", "b2", "a1"]
    assert len(scheduler) == 0
    assert scheduler.queued_by_tenant() == {}


def test_removing_the_only_waiter_of_a_tenant_frees_its_cap() -> None:
    scheduler: TenantScheduler[str] = TenantScheduler(capacity=16)
    capped = TenantShare(max_queued=1)
    scheduler.push("a0", "a", capped)
    scheduler.remove("a0")
    scheduler.push("a1", "a", capped)
    assert drain(scheduler) == ["a1"]


def test_pop_skips_tenants_that_are_not_eligible_and_keeps_their_place() -> None:
    scheduler: TenantScheduler[str] = TenantScheduler(capacity=16)
    scheduler.push("b0", "b")
    scheduler.push("a0", "a")
    assert scheduler.pop(lambda tenant: tenant != "b") == "a0"
    assert scheduler.pop(lambda tenant: tenant != "b") is None
    assert scheduler.pop() == "b0"


def test_fifo_serves_in_arrival_order_whatever_the_shares() -> None:
    scheduler: TenantScheduler[str] = TenantScheduler(capacity=16, scheduling="fifo")
    scheduler.charge("b")
    scheduler.push("b0", "b", TenantShare(priority="low"))
    scheduler.push("b1", "b")
    scheduler.push("a0", "a", TenantShare(weight=10, priority="high"))
    assert drain(scheduler) == ["b0", "b1", "a0"]


def test_fifo_still_applies_the_caps() -> None:
    scheduler: TenantScheduler[str] = TenantScheduler(capacity=16, scheduling="fifo")
    scheduler.push("b0", "b", TenantShare(max_queued=1))
    with pytest.raises(TenantQueueFullError):
        scheduler.push("b1", "b", TenantShare(max_queued=1))


def test_clear_hands_back_every_waiter_in_arrival_order() -> None:
    scheduler: TenantScheduler[str] = TenantScheduler(capacity=16)
    scheduler.push("b0", "b")
    scheduler.push("a0", "a", TenantShare(priority="high"))
    scheduler.push("b1", "b")
    assert scheduler.clear() == ["b0", "a0", "b1"]
    assert len(scheduler) == 0
    assert scheduler.pop() is None


def test_state_of_tenants_gone_quiet_is_dropped() -> None:
    scheduler: TenantScheduler[str] = TenantScheduler(capacity=16)
    for i in range(1000):  # a steady tenant moves the clock on; a thousand others pass through once each
        scheduler.push(f"x{i}", f"tenant-{i}")
        assert scheduler.pop() == f"x{i}"
        scheduler.charge("steady")
    assert len(scheduler._lanes) <= 2  # the steady one's, and the last passer-by's, whose turn the clock has not passed


@pytest.mark.parametrize(("weight", "max_queued"), [(0.0, None), (-1.0, None), (1.0, 0)])
def test_a_share_out_of_range_is_refused(weight: float, max_queued: int | None) -> None:
    with pytest.raises(ValueError, match="must be"):
        TenantShare(weight=weight, max_queued=max_queued)


# ----------------------------------------------------------------------------------------- in a real pool
async def real_time_pool(**settings: object) -> EnginePool:
    # Workers speaking at real time: 100 characters hold one for a second.
    pool = EnginePool(
        "fair",
        local_engine_settings(
            kind="synthetic", **({"queue_size": 8} | settings), options={"rtf": 1.0, "seconds_per_char": 0.01}
        ),
    )
    await pool.start()
    return pool


@pytest.fixture
async def one_worker_pool() -> AsyncIterator[EnginePool]:
    pool = await real_time_pool(workers=1)
    try:
        assert await pool.wait_ready(30)
        yield pool
    finally:
        await pool.stop()


@pytest.fixture
async def pool_with_a_reserved_slot() -> AsyncIterator[EnginePool]:
    pool = await real_time_pool(workers=2, reserved_slots=1)
    try:
        await wait_for(lambda: pool.status().ready_workers == 2)
        yield pool
    finally:
        await pool.stop()


async def test_the_pool_hands_the_worker_out_in_turn_and_forgets_a_waiter_that_gave_up(
    one_worker_pool: EnginePool,
) -> None:
    pool, started = one_worker_pool, []

    async def speak(tenant: str, chars: int, share: TenantShare | None = None) -> None:
        request = SynthesisRequest(text="x" * chars, voice="alloy")
        async with pool.open_stream(request, tenant=tenant, share=share) as pcm:
            started.append(tenant)
            async for _ in pcm:
                pass

    running = asyncio.create_task(speak("b", 100))
    await wait_for(lambda: pool.status().active_jobs == 1)
    b_waiting = [asyncio.create_task(speak("b", 10)) for _ in range(2)]
    quitter = asyncio.create_task(speak("a", 10))
    await wait_for(lambda: pool.status().queued_by_tenant == {"b": 2, "a": 1})
    quitter.cancel()
    await wait_for(lambda: pool.status().queued_by_tenant == {"b": 2})
    capped = TenantShare(max_queued=1)
    a_waiting = asyncio.create_task(speak("a", 10, capped))
    await wait_for(lambda: pool.status().queued_by_tenant == {"b": 2, "a": 1})
    with pytest.raises(EngineOverloadedError):  # over a's own cap, while the pool's queue has room
        await speak("a", 10, capped)
    await asyncio.gather(running, *b_waiting, a_waiting)
    # b held the worker; a's request (the one that stayed) went before b's two waiting ones.
    assert started == ["b", "a", "b", "b"]
    assert pool.status().queued == 0


async def test_a_reserved_slot_waits_for_a_tenant_running_nothing(pool_with_a_reserved_slot: EnginePool) -> None:
    pool, started = pool_with_a_reserved_slot, []

    async def speak(tenant: str, chars: int) -> None:
        async with pool.open_stream(SynthesisRequest(text="x" * chars, voice="alloy"), tenant=tenant) as pcm:
            started.append(tenant)
            async for _ in pcm:
                pass

    await speak("a", 2)
    await asyncio.sleep(1.0)
    await speak("a", 2)  # a asks about once a second: it is expected back within two seconds
    started.clear()
    b_first = asyncio.create_task(speak("b", 100))
    await wait_for(lambda: pool.status().active_jobs == 1)
    b_second = asyncio.create_task(speak("b", 10))
    await wait_for(lambda: pool.status().queued_by_tenant == {"b": 1})  # a worker is free, but it is the reserved one
    await speak("a", 10)  # a runs nothing: the reserved slot is a's at once
    await asyncio.gather(b_first, b_second)
    assert started == ["b", "a", "b"]


async def test_a_reserved_slot_goes_to_a_tenant_below_its_fair_share_though_it_runs_something() -> None:
    # Four slots, two tenants lately: a share of two each. a runs one job and lacks one; b, at its share, does not
    # get the last free slot, which waits for a's next request.
    pool, started = await real_time_pool(workers=4, reserved_slots=1), []

    async def speak(tenant: str, chars: int) -> None:
        async with pool.open_stream(SynthesisRequest(text="x" * chars, voice="alloy"), tenant=tenant) as pcm:
            started.append(tenant)
            async for _ in pcm:
                pass

    try:
        await wait_for(lambda: pool.status().ready_workers == 4)
        a_running = asyncio.create_task(speak("a", 150))
        await wait_for(lambda: pool.status().active_jobs == 1)
        b_running = [asyncio.create_task(speak("b", 150)) for _ in range(2)]
        await wait_for(lambda: pool.status().active_jobs == 3)
        b_third = asyncio.create_task(speak("b", 10))
        await wait_for(lambda: pool.status().queued_by_tenant == {"b": 1})  # one slot free: the one a lacks
        await speak("a", 10)
        await asyncio.gather(a_running, *b_running, b_third)
        assert started == ["a", "b", "b", "a", "b"]
    finally:
        await pool.stop()


async def test_a_kept_slot_goes_to_those_waiting_once_the_absent_tenants_share_lapses() -> None:
    # a asked twice and went away: the slot kept for it is handed out once it is no longer expected back (twice its
    # time between requests, at most reservation_window_s), though no job ends or request arrives then.
    pool = await real_time_pool(workers=2, reserved_slots=1, reservation_window_s=0.5)

    async def speak(tenant: str, chars: int) -> None:
        async with pool.open_stream(SynthesisRequest(text="x" * chars, voice="alloy"), tenant=tenant) as pcm:
            async for _ in pcm:
                pass

    try:
        await wait_for(lambda: pool.status().ready_workers == 2)
        await speak("a", 2)
        await asyncio.sleep(0.4)
        await speak("a", 2)
        b_long = asyncio.create_task(speak("b", 600))
        await wait_for(lambda: pool.status().active_jobs == 1)
        b_short = asyncio.create_task(speak("b", 10))
        await wait_for(lambda: pool.status().queued_by_tenant == {"b": 1})
        await wait_for(lambda: pool.status().active_jobs == 2)  # before b's 6 s job ends
        await b_short
        assert not b_long.done()
        b_long.cancel()
    finally:
        await pool.stop()


async def test_nothing_is_kept_for_a_tenant_that_asked_once(pool_with_a_reserved_slot: EnginePool) -> None:
    # One request says nothing of when the next comes: b, arriving right after, uses both workers.
    pool = pool_with_a_reserved_slot

    async def speak(tenant: str, chars: int) -> None:
        async with pool.open_stream(SynthesisRequest(text="x" * chars, voice="alloy"), tenant=tenant) as pcm:
            async for _ in pcm:
                pass

    await speak("a", 2)
    both = [asyncio.create_task(speak("b", 60)) for _ in range(2)]
    await wait_for(lambda: pool.status().active_jobs == 2)
    await asyncio.gather(*both)


async def test_a_tenant_alone_uses_every_slot_whatever_is_reserved(pool_with_a_reserved_slot: EnginePool) -> None:
    # Nobody else has asked for the engine lately: nothing is kept back, so a lone tenant loses no capacity.
    pool = pool_with_a_reserved_slot

    async def speak(chars: int) -> None:
        async with pool.open_stream(SynthesisRequest(text="x" * chars, voice="alloy"), tenant="solo") as pcm:
            async for _ in pcm:
                pass

    both = [asyncio.create_task(speak(60)) for _ in range(2)]
    await wait_for(lambda: pool.status().active_jobs == 2)
    assert pool.status().queued == 0
    await asyncio.gather(*both)


async def test_the_pool_charges_each_tenant_the_speech_its_requests_made(one_worker_pool: EnginePool) -> None:
    # "x" * 100 and "x" * 10 promise the same (one word: a quarter of a second) but make 1 s and 0.1 s. Once a's first
    # request has made its second, a's later requests wait behind all of b's; charged by the promise, they alternate.
    pool, started = one_worker_pool, []

    async def speak(tenant: str, chars: int) -> None:
        async with pool.open_stream(SynthesisRequest(text="x" * chars, voice="alloy"), tenant=tenant) as pcm:
            started.append(tenant)
            async for _ in pcm:
                pass

    blocker = asyncio.create_task(speak("c", 50))
    await wait_for(lambda: pool.status().active_jobs == 1)
    queued = []
    for count, (tenant, chars) in enumerate([("a", 100), ("b", 10), ("a", 10), ("b", 10), ("a", 10), ("b", 10)], 1):
        queued.append(asyncio.create_task(speak(tenant, chars)))
        await wait_for(lambda count=count: pool.status().queued == count)  # type: ignore[misc]
    await asyncio.gather(blocker, *queued)
    assert started == ["c", "a", "b", "b", "b", "a", "a"]


async def test_a_full_queue_refuses_new_requests_but_not_the_continuation_of_a_stream() -> None:
    pool = await real_time_pool(workers=1, queue_size=1)

    async def speak(tenant: str, chars: int, *, continuing: bool = False) -> str:
        request = SynthesisRequest(text="x" * chars, voice="alloy")
        async with pool.open_stream(request, tenant=tenant, continuing=continuing) as pcm:
            async for _ in pcm:
                pass
        return tenant

    try:
        await wait_for(lambda: pool.status().ready_workers == 1)
        running = asyncio.create_task(speak("a", 50))
        await wait_for(lambda: pool.status().active_jobs == 1)
        queued = asyncio.create_task(speak("b", 10))
        await wait_for(lambda: pool.status().queued == 1)  # the queue is full
        with pytest.raises(EngineOverloadedError):
            await speak("c", 10)
        continuation = asyncio.create_task(speak("c", 10, continuing=True))
        await wait_for(lambda: pool.status().queued == 2)  # over the queue's size: it waits its turn all the same
        assert list(await asyncio.gather(running, queued, continuation)) == ["a", "b", "c"]
    finally:
        await pool.stop()
