"""Job stores, one contract for both (in memory, and a real redis-server): a segment is committed once and in order
(a second runner's commit of it is refused), a cancelled job takes no more, audio comes back byte for byte, results
expire after their TTL and the record a TTL later, quotas refuse, pages follow their cursor, tenants stay apart."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, cast

import pytest
from redis.asyncio import Redis

from gateway.audio.formats import AudioFormat
from gateway.jobs.records import JobRecord, now_s, reservation_bytes
from gateway.jobs.store import AudioFiles, JobStore, MemoryJobStore, RedisJobStore, SpokenSegment
from storage import sortable_id

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable
    from pathlib import Path

EVERY_BYTE = bytes(range(256)) * 16
TTL_S = 1


@pytest.fixture(params=["memory", "redis", "redis+directory"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[JobStore]:
    if request.param == "memory":
        yield MemoryJobStore(TTL_S)
        return
    client = Redis.from_url(request.getfixturevalue("redis_url"))
    files = AudioFiles(tmp_path / "jobs") if request.param == "redis+directory" else None
    yield RedisJobStore(client, TTL_S, files=files)
    await client.aclose()


async def create(
    store: JobStore,
    tenant: str = "acme",
    *,
    segments: int = 3,
    quota: int = 10**9,
    reserved: int = 0,
    max_jobs: int = 3,
    generation: str = "",
) -> str | None:
    record = JobRecord(
        id=sortable_id("job_"),
        tenant=tenant,
        request={"model": "tts-1", "voice": "alloy", "response_format": "mp3"},
        characters_total=10 * segments + segments - 1,
        segments_total=segments,
        created_at=int(now_s()),
        reserved_bytes=reserved,
        generation=generation,
    )
    texts = [f"segment {i:2d}" for i in range(segments)]
    refusal = await store.create(record, texts, quota_bytes=quota, max_jobs=max_jobs)
    return record.id if refusal is None else None


def spoken(index: int) -> SpokenSegment:
    return SpokenSegment(EVERY_BYTE + bytes([index]), 10, 500)


async def test_segments_are_committed_once_and_in_order(store: JobStore) -> None:
    job = await create(store)
    assert job is not None
    assert await store.segments("acme", job) == ["segment  0", "segment  1", "segment  2"]
    assert not await store.commit("acme", job, 0, spoken(0))  # queued: nobody runs it yet
    assert await store.start("acme", job) is not None
    assert await store.commit("acme", job, 0, spoken(0))
    # Two runners of the same job (one was thought dead): only one commit of segment 1 is taken, none skips ahead.
    results = await asyncio.gather(store.commit("acme", job, 1, spoken(1)), store.commit("acme", job, 1, spoken(1)))
    assert sorted(results) == [False, True]
    assert not await store.commit("acme", job, 0, spoken(0))
    assert not await store.commit("acme", job, 3, spoken(3))
    assert await store.commit("acme", job, 2, spoken(2))
    record = await store.get("acme", job)
    assert record is not None
    assert (record.segments_done, record.characters_done, record.audio_ms) == (3, 30, 1500)
    assert await store.sizes("acme", job) == [len(EVERY_BYTE) + 1] * 3
    assert [await store.chunk("acme", job, i) for i in range(3)] == [spoken(i).audio for i in range(3)]
    ended = await store.finish("acme", job, "completed")
    assert await store.finish("acme", job, "cancelled") is None  # over: it stays completed
    record = await store.get("acme", job)
    assert record is not None
    assert (record.status, record.characters_done) == ("completed", record.characters_total)
    assert ended == record  # as it ended, read in the same step


async def test_a_job_is_charged_what_its_segments_made_the_engine_say(store: JobStore) -> None:
    """A dictionary, ``say-as`` or a break makes a segment say more than its text: the job is charged the sum of what
    each was charged, not its input's length (a job's usage used to count the caller's characters)."""
    job = await create(store)
    assert job is not None
    assert await store.start("acme", job) is not None
    for index, charged in enumerate((40, 12, 10)):  # 10 characters each, the first respelled to 40
        assert await store.commit("acme", job, index, SpokenSegment(b"x", 10, 500, charged))
    running = await store.get("acme", job)
    assert running is not None
    assert (running.characters_done, running.characters_charged, running.charged_characters) == (30, 62, 62)
    ended = await store.finish("acme", job, "completed")
    assert ended is not None
    assert (ended.characters_done, ended.characters_charged, ended.charged_characters) == (32, 62, 62)


async def test_a_job_is_charged_at_least_its_characters(store: JobStore) -> None:
    job = await create(store)
    assert job is not None
    await store.start("acme", job)
    for index in range(3):  # segments charged their length: the whitespace between them is not in any
        assert await store.commit("acme", job, index, SpokenSegment(b"x", 10, 500, 10))
    ended = await store.finish("acme", job, "completed")
    assert ended is not None
    assert ended.charged_characters == ended.characters_total == 32


async def test_whoever_ends_a_job_holds_what_it_spoke_though_a_delete_follows_at_once(store: JobStore) -> None:
    """A concurrent ``DELETE`` may forget the job right after another call ended it: that call counts its usage from
    what ``finish`` returned, read in the same step, not from a record it reads again (issue #47)."""
    job = await create(store)
    assert job is not None
    await store.start("acme", job)
    assert await store.commit("acme", job, 0, spoken(0))
    cancelled = await store.finish("acme", job, "cancelled")
    assert await store.delete("acme", job)
    assert cancelled is not None
    assert (cancelled.status, cancelled.segments_done, cancelled.characters_done, cancelled.audio_ms) == (
        "cancelled",
        1,
        10,
        500,
    )


async def test_a_cancelled_job_takes_no_more_and_gives_its_audio_up(store: JobStore) -> None:
    job = await create(store)
    assert job is not None
    await store.start("acme", job)
    assert await store.commit("acme", job, 0, spoken(0))
    assert await store.finish("acme", job, "cancelled")
    assert not await store.commit("acme", job, 1, spoken(1))
    assert await store.start("acme", job) is None  # a runner that took it over stops at once
    assert await store.chunk("acme", job, 0) is None
    record = await store.get("acme", job)
    assert record is not None
    assert (record.status, record.stored_bytes) == ("cancelled", 0)


async def test_results_expire_after_their_ttl_and_the_record_after_another(store: JobStore) -> None:
    job = await create(store, segments=1)
    assert job is not None
    await store.start("acme", job)
    await store.commit("acme", job, 0, spoken(0))
    await store.finish("acme", job, "completed")
    record = await store.get("acme", job)
    assert record is not None
    assert record.shown_status(now_s()) == "completed"
    await eventually(lambda: _expired(store, job))
    await eventually(lambda: _gone(store, job))
    assert (await store.page("acme", after=None, limit=10)).data == []


async def eventually(check: Callable[[], Awaitable[bool]], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, "not within the time the TTLs allow"
        await asyncio.sleep(0.05)


async def _expired(store: JobStore, job: str) -> bool:
    record = await store.get("acme", job)
    chunk = await store.chunk("acme", job, 0)
    return record is not None and record.shown_status(now_s()) == "expired" and chunk is None


async def _gone(store: JobStore, job: str) -> bool:
    return await store.get("acme", job) is None


async def test_caps_refuse_new_jobs(store: JobStore) -> None:
    assert [await create(store) for _ in range(3)].count(None) == 0
    assert await create(store) is None  # max_jobs = 3
    quota = 10 * len(EVERY_BYTE)
    first = await create(store, tenant="globex", quota=quota, reserved=len(EVERY_BYTE))
    assert first is not None
    await store.start("globex", first)
    for index in range(3):  # stores more than it reserved: it holds what it stored
        assert await store.commit("globex", first, index, spoken(index))
    assert await create(store, tenant="globex", quota=quota, reserved=7 * len(EVERY_BYTE) - 2) is None
    assert await create(store, tenant="globex", quota=quota, reserved=7 * len(EVERY_BYTE) - 3) is not None
    assert await create(store, tenant="initech", quota=quota, reserved=quota + 1) is None  # alone, still too big


async def test_concurrent_creations_never_reserve_more_than_the_quota(store: JobStore) -> None:
    """Twenty creations at the same instant (each its own Redis connection), room for five: five are stored."""
    reserved = 1000
    created = await asyncio.gather(
        *(create(store, quota=5 * reserved + 999, reserved=reserved, max_jobs=100) for _ in range(20))
    )
    assert len([job for job in created if job is not None]) == 5
    assert len((await store.page("acme", after=None, limit=100)).data) == 5
    over_count = await asyncio.gather(*(create(store, tenant="globex", max_jobs=4) for _ in range(12)))
    assert len([job for job in over_count if job is not None]) == 4


async def test_reservations_are_given_back_when_jobs_end_or_go(store: JobStore) -> None:
    """Two jobs fill the quota; each way a job ends or goes gives its room back (a completed job keeps only what it
    stored, until its audio expires), and a third job fits each time it should, never before."""
    room = len(EVERY_BYTE) + 1  # one segment's audio
    quota = 2 * 4 * room

    async def fits() -> bool:
        job = await create(store, quota=quota, reserved=4 * room, max_jobs=100)
        return job is not None and await store.delete("acme", job)

    jobs = [await create(store, quota=quota, reserved=4 * room, max_jobs=100) for _ in range(2)]
    assert None not in jobs
    cancelled, failed = cast("list[str]", jobs)
    assert not await fits()
    await store.start("acme", cancelled)
    assert await store.commit("acme", cancelled, 0, spoken(0))
    assert await store.finish("acme", cancelled, "cancelled")
    assert await fits()
    completed = await create(store, quota=quota, reserved=4 * room, max_jobs=100)
    assert completed is not None
    await store.start("acme", failed)
    assert await store.finish("acme", failed, "failed", "the engine broke")
    assert await fits()
    deleted = await create(store, quota=quota, reserved=4 * room, max_jobs=100)
    assert deleted is not None
    assert not await fits()
    await store.start("acme", completed)
    assert await store.commit("acme", completed, 0, spoken(0))
    assert await store.finish("acme", completed, "completed")  # now holds one segment, not four
    assert not await fits()  # 4 + 1 of 8 segments' room held: 4 more do not fit
    assert await store.delete("acme", deleted)
    assert await fits()
    assert await create(store, quota=quota, reserved=8 * room, max_jobs=100) is None
    await eventually(lambda: _expired(store, completed))
    assert await create(store, quota=quota, reserved=8 * room, max_jobs=100) is not None


async def test_pages_follow_their_cursor_and_tenants_stay_apart(store: JobStore) -> None:
    jobs = [await create(store) for _ in range(3)]
    first = await store.page("acme", after=None, limit=2)
    assert [r.id for r in first.data] == jobs[:2]
    assert first.has_more
    rest = await store.page("acme", after=jobs[1], limit=2)
    assert ([r.id for r in rest.data], rest.has_more) == (jobs[2:], False)
    assert jobs[0] is not None
    assert await store.get("globex", jobs[0]) is None
    assert (await store.page("globex", after=None, limit=10)).data == []
    assert not await store.delete("globex", jobs[0])
    assert await store.delete("acme", jobs[0])
    assert await store.get("acme", jobs[0]) is None


async def test_a_page_of_jobs_goes_at_once_whatever_each_had(store: JobStore) -> None:
    """A deleted tenant's jobs go a page at a time: a completed one with its audio, a running one (whose runner then
    commits nothing), a queued one; another tenant's job of the same id is not touched."""
    created = [await create(store) for _ in range(3)]
    assert None not in created
    completed, running, queued = cast("list[str]", created)
    kept = await create(store, tenant="globex")
    assert kept is not None
    for job in (completed, running):
        await store.start("acme", job)
        assert await store.commit("acme", job, 0, spoken(0))
    await store.finish("acme", completed, "completed")
    assert await store.delete_many("acme", [completed, running, queued, kept]) == 3  # kept is globex's, not acme's
    assert not await store.commit("acme", running, 1, spoken(1))  # its runner finds no job
    assert await store.start("acme", queued) is None
    for job in (completed, running, queued):
        assert await store.get("acme", job) is None
        assert (await store.chunk("acme", job, 0), await store.sizes("acme", job)) == (None, [])
    assert (await store.page("acme", after=None, limit=10)).data == []
    assert await store.get("globex", kept) is not None
    assert await store.delete_many("acme", [completed]) == 0
    assert await store.delete_many("acme", []) == 0


async def test_another_generation_of_a_tenant_has_jobs_of_its_own(store: JobStore) -> None:
    """A tenant deleted and created again under the same name is another generation: the jobs the old one left
    (a race with its deletion) are not counted in the new one's caps and quota, and each record keeps its generation;
    a job from before generations were recorded counts for every generation."""
    room = len(EVERY_BYTE)
    for _ in range(3):
        assert await create(store, generation="old", quota=3 * room, reserved=room) is not None
    assert await create(store, generation="old", quota=10 * room) is None  # max_jobs = 3
    new = await create(store, generation="new", quota=3 * room, reserved=3 * room)
    assert new is not None  # the old generation's three jobs hold nothing of the new one's room
    record = await store.get("acme", new)
    assert record is not None
    assert record.generation == "new"
    assert record.belongs_to("new") and not record.belongs_to("old")
    assert await store.delete("acme", new)
    legacy = await create(store, generation="", quota=3 * room, reserved=room)
    assert legacy is not None
    assert await create(store, generation="new", quota=3 * room, reserved=3 * room) is None  # the legacy job's room
    assert await create(store, generation="new", quota=3 * room, reserved=2 * room) is not None
    record = await store.get("acme", legacy)
    assert record is not None
    assert record.belongs_to("new") and record.belongs_to("old")


async def test_the_directory_holds_each_segment_once_and_the_sweep_empties_it(redis_url: str, tmp_path: Path) -> None:
    client = Redis.from_url(redis_url)
    files = AudioFiles(tmp_path / "jobs")
    store = RedisJobStore(client, TTL_S, files=files)
    try:
        kept, cancelled = await create(store), await create(store)
        assert kept is not None and cancelled is not None
        for job in (kept, cancelled):
            await store.start("acme", job)
            assert await store.commit("acme", job, 0, spoken(0))
        assert not await store.commit("acme", kept, 0, spoken(9))  # refused: the file keeps the first audio
        assert [p.name[:7] for p in (tmp_path / "jobs" / "acme" / kept).iterdir()] == ["000000."]  # one file
        assert await store.chunk("acme", kept, 0) == spoken(0).audio
        await store.finish("acme", kept, "completed")
        await store.finish("acme", cancelled, "cancelled")
        assert not (tmp_path / "jobs" / "acme" / cancelled).exists()  # gave its audio up at once
        assert await files.sweep(store) == 0  # the completed job's audio has not expired
        await eventually(lambda: _expired(store, kept))
        assert await files.sweep(store) == 1
        assert not (tmp_path / "jobs" / "acme" / kept).exists()
        with pytest.raises(ValueError, match="no plain file name"):
            await files.get("acme", "../../etc", 0, "passwd")
    finally:
        await client.aclose()


def test_a_reservation_is_the_text_spoken_at_a_reading_pace_in_its_stored_format() -> None:
    assert reservation_bytes(15, AudioFormat.WAV, 1.0) == 48_000  # one second of 24 kHz 16-bit PCM
    assert reservation_bytes(15, AudioFormat.PCM, 2.0) == 24_000
    assert reservation_bytes(150, AudioFormat.MP3, 1.0) == 80_000  # ten seconds at 64 kbit/s
    assert reservation_bytes(1, AudioFormat.AAC, 4.0) == 134
