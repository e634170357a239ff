"""A job's audio as one file: its committed segments in order, behind a WAV header for ``wav``.

A completed job's file has a known length, so a byte range of it is served from the segments it falls in. A job still
under way streams what is committed and follows it, segment by segment, to its end (a WAV header then says "until
the end", as the speech endpoint's streamed WAV does); a byte range of it is served the same way, from its first byte
and up to its last, as RFC 8673 (HTTP random access and live content) has it: the file's length is ``*``, and an open
range runs to the "very large" last position its live clients send (:data:`LIVE_END`).
"""

from __future__ import annotations

import asyncio
import re
from contextlib import aclosing
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

from gateway.audio import wav_header
from gateway.audio.formats import AudioFormat, output_sample_rate
from gateway.jobs.records import ACTIVE

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, AsyncIterator, Callable

    from gateway.jobs.records import JobRecord
    from gateway.jobs.store import JobStore

    Readings: TypeAlias = Callable[[JobRecord], AsyncGenerator[JobRecord | None]]
    """The job's record each time it is read anew, from a record on (``None``: the job is gone)."""

__all__ = [
    "LIVE_END",
    "ByteRange",
    "RangeNotSatisfiableError",
    "complete_file",
    "file_header",
    "follow",
    "range_under_way",
    "requested_range",
]

_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$", re.ASCII)  # int() would read other scripts' digits too
LIVE_END = 2**53 - 1
"""The last byte of an open range of a job under way: RFC 8673's "very large" position (the largest integer a
JavaScript number holds exactly), which its clients send to follow a growing file to its end."""


_POSITION_DIGITS = len(str(LIVE_END))


def _position(digits: str) -> int:
    """A ``Range`` position of any length: one longer than :data:`LIVE_END`'s digits is one past it, beyond any file.

    Read as such rather than by ``int``, which refuses more than 4,300 digits (a 500 for a header, issue #47) and
    costs quadratic time below that.
    """
    digits = digits.lstrip("0") or "0"
    return int(digits) if len(digits) <= _POSITION_DIGITS else LIVE_END + 1


def _ends_before_it_starts(start: str, end: str) -> bool:
    """Whether the range-spec ``start-end`` is not valid: its last position before its first. RFC 9110 (section 14.2)
    has a server ignore such a ``Range`` (the whole file, ``200``), where a valid range beyond the file is a ``416``.
    Compared as digits, whatever their number (past :data:`LIVE_END` too, where :func:`_position` makes them equal)."""
    return bool(end) and _magnitude(end) < _magnitude(start)


def _magnitude(digits: str) -> tuple[int, str]:
    """A position's digits ordered as its number: by their count without leading zeros, then as text."""
    digits = digits.lstrip("0")
    return len(digits), digits


class RangeNotSatisfiableError(Exception):
    """The requested range lies beyond the file (416)."""


@dataclass(frozen=True, slots=True)
class ByteRange:
    first: int
    last: int
    """Inclusive, as ``Content-Range`` has it."""

    @property
    def length(self) -> int:
        return self.last - self.first + 1


def file_header(fmt: AudioFormat, data_bytes: int | None) -> bytes:
    """What goes before the segments: a WAV header (sized when the data's size is known), nothing otherwise."""
    return wav_header(output_sample_rate(fmt), data_bytes) if fmt is AudioFormat.WAV else b""


def requested_range(header: str | None, total: int) -> ByteRange | None:
    """The one range of a ``Range`` header within a file of ``total`` bytes; ``None`` for no header, one that is not
    valid (its last position before its first), or one this server does not split (several ranges, another unit):
    then the whole file goes out, as RFC 9110 has it.

    Raises:
        RangeNotSatisfiableError: the range starts beyond the end of the file.
    """
    match = _RANGE.match(header.strip()) if header else None
    if match is None or match.groups() == ("", "") or _ends_before_it_starts(*match.groups()):
        return None
    start, end = match.groups()
    if not start:  # the last ``end`` bytes
        suffix = _position(end)
        if suffix == 0:
            raise RangeNotSatisfiableError
        return ByteRange(max(total - suffix, 0), total - 1)
    first = _position(start)
    last = min(_position(end), total - 1) if end else total - 1
    if first >= total:
        raise RangeNotSatisfiableError
    return ByteRange(first, last)


async def complete_file(
    store: JobStore, record: JobRecord, sizes: list[int], wanted: ByteRange | None
) -> AsyncIterator[bytes]:
    """The bytes ``wanted`` (all when ``None``) of a completed job's file, reading only the segments they fall in."""
    header = file_header(record.response_format, sum(sizes))
    whole = ByteRange(0, len(header) + sum(sizes) - 1)
    async for part in _part(store, record, header, _listed(sizes), wanted or whole):
        yield part


def range_under_way(header: str | None) -> ByteRange | None:
    """The one range of a ``Range`` header on the file of a job under way (an open one up to :data:`LIVE_END`);
    ``None`` for the whole file: no header, ``bytes=0-`` (a browser's first request), the last bytes of a file whose
    end is not known yet, a range that is not valid (its last position before its first), or a form this server does
    not split (RFC 9110 lets a server ignore those).

    Raises:
        RangeNotSatisfiableError: the range starts past :data:`LIVE_END`, where no file reaches.
    """
    match = _RANGE.match(header.strip()) if header else None
    if match is None or not match.group(1) or _ends_before_it_starts(*match.groups()):
        return None
    first, last = _position(match.group(1)), _position(match.group(2)) if match.group(2) else LIVE_END
    if first > LIVE_END:
        raise RangeNotSatisfiableError
    last = min(last, LIVE_END)
    if first == 0 and last == LIVE_END:
        return None
    return ByteRange(first, last)


async def follow(
    store: JobStore,
    record: JobRecord,
    poll_s: float,
    wanted: ByteRange | None = None,
    *,
    readings: Readings | None = None,
) -> AsyncIterator[bytes]:
    """The file of a job under way (the bytes ``wanted`` of it, or all): what is committed, then each segment as it is
    committed, until the last byte wanted or the job's end (when it fails or is cancelled, the file ends there).

    ``readings``: where the job's record is read anew (the job's one poll per process,
    :meth:`~gateway.jobs.followers.JobFollowers.readings`); without it, this follower reads it every ``poll_s``.
    """
    header = file_header(record.response_format, None)
    async with aclosing(_committed(store, record, readings or _polled(store, poll_s))) as committed:
        async for part in _part(store, record, header, committed, wanted or ByteRange(0, LIVE_END)):
            yield part


async def _part(
    store: JobStore, record: JobRecord, header: bytes, segments: AsyncIterator[tuple[int, int]], wanted: ByteRange
) -> AsyncIterator[bytes]:
    """The bytes ``wanted`` of the job's file: of its header, then of the ``segments`` (index, size each) they reach,
    reading only the audio of those they fall in."""
    first, last = wanted.first, wanted.last
    if first < len(header):
        yield header[first : last + 1]
    offset = len(header)
    async for index, size in segments:
        begin, end = max(first - offset, 0), min(last - offset, size - 1)
        if begin <= end:
            audio = await store.chunk(record.tenant, record.id, index)
            if audio is None:  # expired while it was read: the file ends short
                return
            yield audio[begin : end + 1]
        offset += size
        if offset > last:
            return


async def _listed(sizes: list[int]) -> AsyncIterator[tuple[int, int]]:
    """The completed job's segments, (index, size) each."""
    for segment in enumerate(sizes):
        yield segment


async def _committed(store: JobStore, record: JobRecord, readings: Readings) -> AsyncGenerator[tuple[int, int]]:
    """Each segment's index and size as it is committed, to the job's end; only sizes are read (a range skips the
    segments before it without reading their audio)."""
    index = 0
    current: JobRecord | None = record
    async with aclosing(readings(record)) as later:
        while current is not None:
            if index < current.segments_done:
                sizes = await store.sizes(record.tenant, record.id)
                for size in sizes[index : current.segments_done]:
                    yield index, size
                    index += 1
            if current.status not in ACTIVE:
                return
            current = await anext(later, None)


def _polled(store: JobStore, poll_s: float) -> Readings:
    """The job's record read every ``poll_s`` by this follower alone."""

    async def readings(record: JobRecord) -> AsyncGenerator[JobRecord | None]:
        while True:
            await asyncio.sleep(poll_s)
            yield await store.get(record.tenant, record.id)

    return readings
