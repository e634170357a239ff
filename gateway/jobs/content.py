"""A job's audio as one file: its committed segments in order, behind a WAV header for ``wav``.

A completed job's file has a known length, so a byte range of it is served from the segments it falls in. A job still
under way streams what is committed and follows it, segment by segment, to its end (a WAV header then says "until
the end", as the speech endpoint's streamed WAV does).
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.audio import wav_header
from gateway.audio.formats import AudioFormat, output_sample_rate
from gateway.jobs.records import ACTIVE

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from gateway.jobs.records import JobRecord
    from gateway.jobs.store import JobStore

__all__ = ["ByteRange", "RangeNotSatisfiableError", "complete_file", "file_header", "follow", "requested_range"]

_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


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
    """The one range of a ``Range`` header within a file of ``total`` bytes; ``None`` for no header, or one this
    server does not split (several ranges, another unit): then the whole file goes out, as RFC 9110 allows.

    Raises:
        RangeNotSatisfiableError: the range starts beyond the end of the file.
    """
    match = _RANGE.match(header.strip()) if header else None
    if match is None or match.groups() == ("", ""):
        return None
    start, end = match.groups()
    if not start:  # the last ``end`` bytes
        suffix = int(end)
        if suffix == 0:
            raise RangeNotSatisfiableError
        return ByteRange(max(total - suffix, 0), total - 1)
    first = int(start)
    last = min(int(end), total - 1) if end else total - 1
    if first >= total or last < first:
        raise RangeNotSatisfiableError
    return ByteRange(first, last)


async def complete_file(
    store: JobStore, record: JobRecord, sizes: list[int], wanted: ByteRange | None
) -> AsyncIterator[bytes]:
    """The bytes ``wanted`` (all when ``None``) of a completed job's file, reading only the segments they fall in."""
    header = file_header(record.response_format, sum(sizes))
    total = len(header) + sum(sizes)
    first, last = (wanted.first, wanted.last) if wanted else (0, total - 1)
    if first < len(header):
        yield header[first : last + 1]
    offset = len(header)
    for index, size in enumerate(sizes):
        begin, end = max(first - offset, 0), min(last - offset, size - 1)
        if begin <= end:
            audio = await store.chunk(record.tenant, record.id, index)
            if audio is None:  # expired while it was read: the file ends short
                return
            yield audio[begin : end + 1]
        offset += size
        if offset > last:
            return


async def follow(store: JobStore, record: JobRecord, poll_s: float) -> AsyncIterator[bytes]:
    """The file of a job under way: what is committed, then each segment as it is committed, to the job's end (or
    until it fails or is cancelled: the file ends there)."""
    yield file_header(record.response_format, None)
    index = 0
    current: JobRecord | None = record
    while current is not None:
        while index < current.segments_done:
            audio = await store.chunk(record.tenant, record.id, index)
            if audio is None:
                return
            yield audio
            index += 1
        if current.status not in ACTIVE:
            return
        await asyncio.sleep(poll_s)
        current = await store.get(record.tenant, record.id)
