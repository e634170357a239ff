"""How a job's queued PCM reaches its consumer: joined when it piled up, in order, then the job's end."""

from __future__ import annotations

import pytest

from engines.base import EngineInfo
from engines.errors import SynthesisFailedError
from engines.messages import JobEnded
from engines.pool.stream import MAX_JOINED_BYTES, Job, SynthesisStream

INFO = EngineInfo(name="tones", sample_rate=24000, voices=())


def job_with(*pieces: bytes, ended: JobEnded | None = None) -> Job:
    job = Job(1, max_buffered_bytes=10 * MAX_JOINED_BYTES)
    for piece in pieces:
        assert job.on_chunk(piece)
    if ended is not None:
        job.on_end(ended, 24000)
    return job


async def read_all(stream: SynthesisStream) -> list[bytes]:
    return [piece async for piece in stream]


async def test_pcm_that_piled_up_comes_out_as_one_piece_in_order() -> None:
    pieces = [bytes([n]) * 4800 for n in range(7)]
    job = job_with(*pieces, ended=JobEnded(1))
    assert await read_all(SynthesisStream(job, INFO)) == [b"".join(pieces)]
    assert job.buffered_bytes == 0


async def test_a_failure_behind_queued_pcm_is_raised_after_that_pcm() -> None:
    job = job_with(b"\x01\x00" * 100, b"\x02\x00" * 100, ended=JobEnded(1, error="engine crashed"))
    stream = SynthesisStream(job, INFO)
    assert await anext(stream) == b"\x01\x00" * 100 + b"\x02\x00" * 100
    with pytest.raises(SynthesisFailedError, match="engine crashed"):
        await anext(stream)


async def test_joined_pieces_stop_growing_at_the_cap() -> None:
    piece = b"\x00" * (MAX_JOINED_BYTES // 3 + 2)
    job = job_with(*[piece] * 6, ended=JobEnded(1))
    out = await read_all(SynthesisStream(job, INFO))
    assert b"".join(out) == piece * 6
    assert len(out) == 2
    assert all(len(chunk) < MAX_JOINED_BYTES + len(piece) for chunk in out)


async def test_a_piece_that_arrives_alone_is_handed_on_at_once() -> None:
    job = job_with(b"\x05\x00" * 10)
    stream = SynthesisStream(job, INFO)
    assert await anext(stream) == b"\x05\x00" * 10  # nothing else queued: no waiting for more
    job.on_end(JobEnded(1), 24000)
    assert await read_all(stream) == []
