"""The pipe between the server and a worker: one framing, read and written by both ends over a real socket pair."""

from __future__ import annotations

import asyncio
import socket
from typing import TYPE_CHECKING

import pytest

from engines.base import SynthesisRequest
from engines.messages import CancelJob, JobChunk, JobEnded, Ping, Pong, StartJob
from engines.pipe import WorkerPipe, frame, read_message

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

# Larger than a socket buffer and than asyncio's stream limit (64 KiB): a frame arrives in many reads.
LARGE_PCM = bytes(range(256)) * 8192


@pytest.fixture
async def ends() -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter, WorkerPipe]]:
    server_socket, worker_socket = socket.socketpair()
    reader, writer = await asyncio.open_unix_connection(sock=server_socket)
    worker = WorkerPipe(worker_socket)
    yield reader, writer, worker
    writer.close()
    worker.close()


async def test_what_the_worker_sends_the_server_reads_whole_and_in_order(
    ends: tuple[asyncio.StreamReader, asyncio.StreamWriter, WorkerPipe],
) -> None:
    reader, _, worker = ends
    sent = [JobChunk(1, LARGE_PCM), JobChunk(1, b""), JobEnded(1, error="boom"), Pong(7)]

    async def read_all() -> list[object]:
        return [await read_message(reader) for _ in sent]

    def send_all() -> None:
        for message in sent:
            worker.send(message)

    received, _ = await asyncio.gather(read_all(), asyncio.to_thread(send_all))
    assert received == sent


async def test_what_the_server_sends_the_worker_reads_whole_and_in_order(
    ends: tuple[asyncio.StreamReader, asyncio.StreamWriter, WorkerPipe],
) -> None:
    _, writer, worker = ends
    sent = [StartJob(3, SynthesisRequest(text="x" * 100_000, voice="nova")), CancelJob(3), Ping(9)]

    async def send_all() -> None:
        for message in sent:
            writer.write(frame(message))
        await writer.drain()

    received, _ = await asyncio.gather(asyncio.to_thread(lambda: [worker.recv() for _ in sent]), send_all())
    assert received == sent


@pytest.mark.parametrize("cut", [0, 3, 8 + 5], ids=["between frames", "in a length", "in a pickle"])
async def test_a_server_gone_anywhere_in_a_frame_is_the_end_for_the_worker(
    ends: tuple[asyncio.StreamReader, asyncio.StreamWriter, WorkerPipe], cut: int
) -> None:
    _, writer, worker = ends
    writer.write(frame(Ping(1)) + frame(Ping(2))[:cut])
    await writer.drain()
    writer.close()
    assert await asyncio.to_thread(worker.recv) == Ping(1)
    with pytest.raises(EOFError):
        await asyncio.to_thread(worker.recv)


async def test_a_worker_gone_in_a_frame_is_the_end_for_the_server() -> None:
    server_socket, worker_socket = socket.socketpair()
    reader, writer = await asyncio.open_unix_connection(sock=server_socket)
    worker_socket.sendall(frame(Pong(1)) + frame(Pong(2))[:12])
    worker_socket.close()
    assert await read_message(reader) == Pong(1)
    with pytest.raises(asyncio.IncompleteReadError):
        await read_message(reader)
    writer.close()
