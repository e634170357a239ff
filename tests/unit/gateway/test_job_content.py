"""The file of a job under way, read by ranges (``gateway/jobs/content.py``): which ranges are honoured, and a range
following the job's commits on a real (in-memory) store, to its last byte or to the job's end."""

from __future__ import annotations

import asyncio

import pytest

from gateway.jobs.content import (
    LIVE_END,
    ByteRange,
    RangeNotSatisfiableError,
    follow,
    range_under_way,
    requested_range,
)
from gateway.jobs.records import JobRecord, now_s
from gateway.jobs.store import MemoryJobStore, SpokenSegment
from storage import sortable_id

SEGMENTS = [bytes([i]) * 100 for i in range(4)]
WHOLE = b"".join(SEGMENTS)


@pytest.mark.parametrize(
    ("header", "wanted"),
    [
        ("bytes=10-19", ByteRange(10, 19)),
        ("bytes=10-", ByteRange(10, LIVE_END)),
        (f"bytes=0-{LIVE_END}", None),  # all of it: the plain request
        ("bytes=0-", None),
        ("bytes=-100", None),  # the last bytes of a file whose end is unknown
        ("bytes=20-10", None),
        ("bytes=" + "9" * 5000 + "-" + "9" * 4999, None),  # not valid either, however far it starts
        ("bytes=0-9,20-29", None),
        ("items=0-9", None),
        (None, None),
        ("bytes=10-" + "9" * 5000, ByteRange(10, LIVE_END)),  # past int()'s 4,300 digits: to the end
        ("bytes=" + "0" * 5000 + "10-19", ByteRange(10, 19)),
        ("bytes=\u0661-\u0662", None),  # digits of another script are not a range
    ],
)
def test_which_ranges_of_a_job_under_way_are_honoured(header: str | None, wanted: ByteRange | None) -> None:
    assert range_under_way(header) == wanted


def test_a_range_of_a_job_under_way_past_any_file_is_not_satisfiable() -> None:
    with pytest.raises(RangeNotSatisfiableError):
        range_under_way("bytes=" + "9" * 5000 + "-")


@pytest.mark.parametrize(
    ("header", "wanted"),
    [
        ("bytes=10-" + "9" * 5000, ByteRange(10, 399)),
        ("bytes=-" + "9" * 5000, ByteRange(0, 399)),
        ("bytes=" + "0" * 5000 + "1-" + "0" * 4999 + "2", ByteRange(1, 2)),
    ],
)
def test_positions_of_any_length_in_a_complete_file(header: str, wanted: ByteRange) -> None:
    assert requested_range(header, 400) == wanted


@pytest.mark.parametrize(
    "header", ["bytes=20-10", "bytes=500-2", "bytes=" + "9" * 5000 + "-" + "9" * 4999, "bytes=" + "0" * 5000 + "2-1"]
)
def test_a_range_that_ends_before_it_starts_is_ignored(header: str) -> None:
    """Not valid, so ignored: the whole file (RFC 9110 section 14.2), never a 416, which is for a valid range beyond
    the file."""
    assert requested_range(header, 400) is None


@pytest.mark.parametrize("header", ["bytes=" + "9" * 5000 + "-", "bytes=" + "9" * 17 + "-" + "9" * 18])
def test_a_range_past_a_complete_file_of_any_length_is_not_satisfiable(header: str) -> None:
    with pytest.raises(RangeNotSatisfiableError):
        requested_range(header, 400)


async def running_job(store: MemoryJobStore, committed: int) -> JobRecord:
    record = JobRecord(sortable_id("job_"), "acme", {"model": "m", "response_format": "pcm"}, 40, 4, int(now_s()))
    assert await store.create(record, ["ten chars."] * 4, quota_bytes=10**6, max_jobs=10) is None
    assert await store.start("acme", record.id) is not None
    for index in range(committed):
        assert await store.commit("acme", record.id, index, SpokenSegment(SEGMENTS[index], 10, 100))
    current = await store.get("acme", record.id)
    assert current is not None
    return current


async def read(store: MemoryJobStore, record: JobRecord, wanted: ByteRange | None) -> bytes:
    return b"".join([part async for part in follow(store, record, 0.01, wanted)])


async def test_a_range_within_what_is_committed_comes_at_once() -> None:
    store = MemoryJobStore(ttl_s=60)
    record = await running_job(store, committed=2)
    assert await asyncio.wait_for(read(store, record, ByteRange(50, 149)), 1) == WHOLE[50:150]


async def test_a_range_past_what_is_committed_follows_the_job_to_its_last_byte_or_its_end() -> None:
    store = MemoryJobStore(ttl_s=60)
    record = await running_job(store, committed=1)
    past = asyncio.ensure_future(read(store, record, ByteRange(250, 349)))
    to_the_end = asyncio.ensure_future(read(store, record, ByteRange(150, LIVE_END)))
    await asyncio.sleep(0.05)
    assert not past.done()  # byte 250 is not there yet
    for index in (1, 2):
        assert await store.commit("acme", record.id, index, SpokenSegment(SEGMENTS[index], 10, 100))
        await asyncio.sleep(0.03)
    assert not past.done()  # byte 349 is not there yet
    assert await store.commit("acme", record.id, 3, SpokenSegment(SEGMENTS[3], 10, 100))
    assert await asyncio.wait_for(past, 1) == WHOLE[250:350]
    assert not to_the_end.done()  # the job runs on: more may come
    assert await store.finish("acme", record.id, "completed")
    assert await asyncio.wait_for(to_the_end, 1) == WHOLE[150:]
