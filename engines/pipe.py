"""The pipe between the server and one engine worker: pickled messages (``engines.messages``), each behind its length.

Both ends use this module, so the framing is written once. The server reads and writes with asyncio streams (its
event loop must never block: :func:`frame` and :func:`read_message`); the worker blocks on a socket in its reader
thread (:class:`WorkerPipe`). Only our own processes sit at either end, so unpickling what arrives is as safe as
multiprocessing's own pipes, which do the same.
"""

from __future__ import annotations

import pickle
import struct
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio
    import socket

__all__ = ["WorkerPipe", "frame", "read_message"]

_LENGTH = struct.Struct("!Q")  # 8 bytes, network order: any size a pickle can have


def frame(message: object) -> bytes:
    """``message`` as it travels: its pickle's length, then the pickle."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _LENGTH.pack(len(data)) + data


async def read_message(reader: asyncio.StreamReader) -> object:
    """The next message (the server's end).

    Raises:
        asyncio.IncompleteReadError: the worker's end closed (at a frame's start, or in its middle).
    """
    (size,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
    return pickle.loads(await reader.readexactly(size))  # noqa: S301 - our own worker process (see the docstring)


class WorkerPipe:
    """The worker's end of the pipe: a blocking socket, read by one thread and written by one at a time."""

    def __init__(self, sock: socket.socket) -> None:
        self._socket = sock
        self._reader = sock.makefile("rb")

    def send(self, message: object) -> None:
        """Send one message; callers in several threads must serialise their sends."""
        self._socket.sendall(frame(message))

    def recv(self) -> object:
        """The next message, waiting for it.

        Raises:
            EOFError: the server's end closed.
        """
        (size,) = _LENGTH.unpack(self._read_exactly(_LENGTH.size))
        return pickle.loads(self._read_exactly(size))  # noqa: S301 - the server that started us (see the docstring)

    def close(self) -> None:
        self._reader.close()
        self._socket.close()

    def _read_exactly(self, size: int) -> bytes:
        data = self._reader.read(size)  # a buffered read returns fewer bytes only at the end of the stream
        if len(data) < size:
            raise EOFError("the server closed the pipe")
        return data
