"""Who speaks next: tenants take turns at a process's speaking slots (one segment a turn), and replicas take jobs
from the Redis queue by tenant rather than first come, first served."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, cast

import pytest

from gateway.jobs.dispatch import QueueDispatch
from gateway.jobs.turns import TenantTurns
from gateway.settings import JobsSettings
from storage import connect_redis, sortable_id

if TYPE_CHECKING:
    from gateway.jobs.runner import JobRunner


async def speak(turns: TenantTurns, tenant: str, segments: int, spoken: list[str]) -> None:
    for _ in range(segments):
        async with turns.turn(tenant):
            spoken.append(tenant)
            await asyncio.sleep(0.001)


async def test_tenants_take_turns_whatever_their_backlog() -> None:
    turns, spoken, asked = TenantTurns(1), list[str](), list[int]()

    async def newcomer() -> None:
        asked.append(len(spoken))
        await speak(turns, "other", 3, spoken)

    jobs = [asyncio.create_task(speak(turns, "flood", 5, spoken)) for _ in range(4)]
    await asyncio.sleep(0.005)  # the flood holds the slot and waits for it
    jobs.append(asyncio.create_task(newcomer()))
    await asyncio.gather(*jobs)
    first = spoken.index("other")
    assert first - asked[0] <= 1  # at most the segment under way when it asked went before it
    assert spoken[first : first + 6 : 2] == ["other"] * 3  # then every other turn is the newcomer's
    assert "other" not in spoken[first + 5 :]


async def test_a_cancelled_wait_or_turn_gives_the_slot_on() -> None:
    turns = TenantTurns(1)
    held = asyncio.Event()

    async def hold() -> None:
        async with turns.turn("a"):
            held.set()
            await asyncio.sleep(10)

    holder = asyncio.create_task(hold())
    await held.wait()
    waiter = asyncio.create_task(speak(turns, "b", 1, []))
    await asyncio.sleep(0)
    waiter.cancel()
    holder.cancel()
    await asyncio.gather(holder, waiter, return_exceptions=True)
    assert turns.idle and turns.waiting == 0
    await asyncio.wait_for(speak(turns, "c", 1, []), 1)


class Runs:
    """Stands in for the job runner: records the jobs the queue hands it, and holds each until released."""

    def __init__(self) -> None:
        self.started: asyncio.Queue[str] = asyncio.Queue()
        self.release = asyncio.Event()

    async def run(self, tenant: str, job_id: str) -> None:
        await self.started.put(f"{tenant}:{job_id}")
        await self.release.wait()


async def nothing_more(runs: Runs, for_s: float) -> None:
    with pytest.raises(TimeoutError):
        extra = await asyncio.wait_for(runs.started.get(), for_s)
        pytest.fail(f"{extra} was taken")


async def test_replicas_take_a_newcomers_job_first_and_spread_a_flood(redis_url: str) -> None:
    redis = connect_redis(redis_url)
    settings = JobsSettings(concurrency=1, max_in_progress=8)
    first, second = Runs(), Runs()
    replicas = [QueueDispatch(redis, cast("JobRunner", runs), settings) for runs in (first, second)]
    replicas[0].start()
    try:
        flood = [sortable_id("job_") for _ in range(4)]
        for job_id in flood:
            await replicas[0].submit("flood", job_id)
        assert await asyncio.wait_for(first.started.get(), 10) == f"flood:{flood[0]}"
        await nothing_more(first, 1.0)  # one slot, held by the flood: its other jobs stay queued
        newcomer = sortable_id("job_")
        await replicas[0].submit("other", newcomer)
        assert await asyncio.wait_for(first.started.get(), 2) == f"other:{newcomer}"  # not behind the flood
        replicas[1].start()  # another replica takes the flood's next job, not the first replica
        assert await asyncio.wait_for(second.started.get(), 10) == f"flood:{flood[1]}"
        await nothing_more(first, 0.5)
    finally:
        first.release.set()
        second.release.set()
        for replica in replicas:
            await replica.close()
        await redis.aclose()
