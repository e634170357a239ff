"""A decoder process that misbehaves on request (``python -m tests.upload_faults``), for the tests of what the
server does when a decoder crashes, takes all the memory or CPU it may, hangs, or answers nonsense.

It is the real decoder (``gateway/uploads/decoder.py``), with its caps, its warm-up and its pipe, whose decoding
function first looks at the upload's first bytes: ``CRASH`` ends the process with SIGSEGV, ``HOG`` allocates until
an allocation fails, ``SPIN`` computes forever, ``HANG`` sleeps forever, ``LIAR`` sends a reply that announces a
gigabyte of PCM; anything else is decoded as usual.
"""

from __future__ import annotations

import os
import signal
import struct
import sys
import time
from typing import TYPE_CHECKING

from gateway.audio.samples import MAX_RECORDING_S, MIN_RECORDING_S
from gateway.audio.samples import decode_recording as real_decode
from gateway.uploads import decoder

if TYPE_CHECKING:
    from gateway.audio.samples import DecodedRecording

__all__ = ["CRASH", "HANG", "HOG", "LIAR", "SPIN"]

CRASH, HOG, SPIN, HANG, LIAR = b"CRASH", b"HOG", b"SPIN", b"HANG", b"LIAR"


def _misbehaving_decode(
    source: bytes, *, min_s: float = MIN_RECORDING_S, max_s: float = MAX_RECORDING_S
) -> DecodedRecording:
    if source.startswith(CRASH):
        os.kill(os.getpid(), signal.SIGSEGV)
    if source.startswith(HOG):
        held = []
        while True:
            held.append(bytearray(16 * 1024 * 1024))
    if source.startswith(SPIN):
        while True:
            pass
    if source.startswith(HANG):
        time.sleep(3600)
    if source.startswith(LIAR):
        reply = sys.__stdout__.buffer  # type: ignore[union-attr]
        reply.write(struct.pack("!IQ", 2, 1 << 30) + b"{}")
        reply.flush()
        time.sleep(3600)
    return real_decode(source, min_s=min_s, max_s=max_s)


if __name__ == "__main__":
    vars(decoder)["decode_recording"] = _misbehaving_decode  # what the decoder's loop calls
    sys.exit(decoder.main(sys.argv[1:]))
