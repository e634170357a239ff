"""The pipe between the server and a decoder process: each message a JSON header and a binary payload, each behind
its length.

Both ends use this module. Not pickle, as the engine workers' pipe is: a decoder parses hostile bytes, and whatever
it sends back is read as data, within sizes the reader sets, so that even a decoder taken over by a crafted file
cannot make the server run code or hold more than one recording's PCM.
"""

from __future__ import annotations

import json
import struct
from typing import TYPE_CHECKING, Any, BinaryIO

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["WireError", "read_message", "write_message"]

_LENGTHS = struct.Struct("!IQ")  # the header's length, then the payload's
_CHUNK = 64 * 1024
MAX_HEADER_BYTES = 64 * 1024


class WireError(Exception):
    """The other end closed the pipe or sent what this end does not take."""


def write_message(pipe: BinaryIO, header: Mapping[str, Any], payload: bytes | BinaryIO = b"") -> None:
    """Send ``header`` and ``payload`` (bytes, or a seekable file sent from its start in chunks).

    Raises:
        WireError: the other end closed the pipe.
    """
    encoded = json.dumps(header).encode()
    size = len(payload) if isinstance(payload, bytes) else payload.seek(0, 2)
    try:
        pipe.write(_LENGTHS.pack(len(encoded), size) + encoded)
        if isinstance(payload, bytes):
            pipe.write(payload)
        else:
            payload.seek(0)
            while chunk := payload.read(_CHUNK):
                pipe.write(chunk)
        pipe.flush()
    except (BrokenPipeError, ConnectionResetError, ValueError) as exc:  # ValueError: the pipe was closed meanwhile
        raise WireError(f"the pipe closed: {exc}") from None


def read_message(pipe: BinaryIO, *, max_payload_bytes: int) -> tuple[dict[str, Any], bytes]:
    """The next header and payload.

    Raises:
        WireError: the pipe closed, or the header is not a JSON object or either is longer than allowed.
    """
    header_size, payload_size = _LENGTHS.unpack(_read_exactly(pipe, _LENGTHS.size))
    if header_size > MAX_HEADER_BYTES or payload_size > max_payload_bytes:
        raise WireError(f"a message of {header_size} + {payload_size} bytes, more than allowed")
    try:
        header = json.loads(_read_exactly(pipe, header_size))
    except ValueError:
        raise WireError("a header that is not JSON") from None
    if not isinstance(header, dict):
        raise WireError("a header that is not a JSON object")
    return header, _read_exactly(pipe, payload_size)


def _read_exactly(pipe: BinaryIO, size: int) -> bytes:
    try:
        data = pipe.read(size)  # a buffered read returns fewer bytes only at the end of the stream
    except (ConnectionResetError, ValueError) as exc:
        raise WireError(f"the pipe closed: {exc}") from None
    if len(data) < size:
        raise WireError("the pipe closed")
    return data
