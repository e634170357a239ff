"""A decoder process: decodes uploads sent by the server, one at a time, under caps (``python -m
gateway.uploads.decoder CONFIG``; started by :class:`~gateway.uploads.processes.DecoderProcesses`).

It lowers its CPU priority under the server's (``priority``: ``idle`` or ``low``), imports PyAV and warms it up with
a decoding of its own, then caps itself before it reads any upload: its address space at what it holds plus
``memory_mb`` (an allocation past it fails: a ``MemoryError``, or FFmpeg's ENOMEM), no core files, no files written;
and before each decoding, its CPU time at what it has used plus the request's ``cpu_s`` (the kernel ends it with
SIGXCPU past it). A crash, a kill or an exhausted cap ends this process only: the server answers that upload with a
400 and starts another decoder.

Messages (``gateway/uploads/wire.py``): first ``{"ready": true, "priority"}`` (the priority it got) or ``{"ready":
false, "reason"}``; then for each request ``{"min_s", "max_s", "cpu_s"}`` with the upload as payload, ``{"ok": true,
"container", "codec"}`` with the PCM as payload, or ``{"ok": false, "problem", "message", "retire"}``: ``retire`` when
this process should not be trusted with another upload (it ran out of memory, or failed in a way nobody planned for)
and exits after saying it.
"""

from __future__ import annotations

import io
import json
import logging
import math
import os
import resource
import sys
import wave
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.audio.samples import RecordingError, decode_recording
from gateway.uploads.wire import WireError, read_message, write_message
from lifecycle.signals import leave_stopping_to_the_server

if TYPE_CHECKING:
    from typing import BinaryIO

__all__ = ["main"]

_MIB = 1024 * 1024
_MAX_UPLOAD_BYTES = 16 * _MIB  # what the server sends at most (it refuses larger uploads before)
_NICENESS = 10  # added to the server's: the scheduler gives a decoder about a tenth of a core that speech needs


def main(argv: list[str]) -> int:
    """Serve decodings on standard input and output until the server closes the pipe; the exit status."""
    leave_stopping_to_the_server()
    logging.disable(logging.CRITICAL)  # nothing to log to: what matters goes back in the replies
    config = json.loads(argv[0]) if argv else {}
    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # a stray print must never corrupt the pipe
    try:
        priority = _lower_priority(str(config.get("priority", "idle")))
        _warm_up()
        _cap_resources(int(config.get("memory_mb", 256)))
    except Exception as exc:
        write_message(replies, {"ready": False, "reason": f"{type(exc).__name__}: {exc}"})
        return 1
    write_message(replies, {"ready": True, "priority": priority})
    return _serve(requests, replies)


def _lower_priority(priority: str) -> str:
    """Yield the CPU to speech, as ``priority`` says (``idle`` or ``low``, :class:`UploadSettings`); the priority
    this process got: ``low`` where ``SCHED_IDLE`` is not to be had (not Linux, or a sandbox that forbids it).

    An upload is never as urgent as speech being streamed. Niceness alone gives a decoder a tenth of a core that
    speech wants, but the kernel lets it finish its slice before a woken server or engine worker runs: a millisecond
    or so at each of the several wake-ups one first byte takes. An idle-class process is preempted at once.
    """
    os.nice(_NICENESS)
    if priority != "idle" or not hasattr(os, "SCHED_IDLE"):
        return "low"
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except OSError:
        return "low"
    return "idle"


def _serve(requests: BinaryIO, replies: BinaryIO) -> int:
    while True:
        try:
            request, upload = read_message(requests, max_payload_bytes=_MAX_UPLOAD_BYTES)
        except WireError:
            return 0  # the server closed the pipe: it is stopping, or retired us
        _cap_cpu(float(request["cpu_s"]))
        reply, pcm = _decode(request, upload)
        write_message(replies, reply, pcm)
        if reply.get("retire"):
            return 0


def _decode(request: dict[str, Any], upload: bytes) -> tuple[dict[str, Any], bytes]:
    try:
        decoded = decode_recording(upload, min_s=float(request["min_s"]), max_s=float(request["max_s"]))
    except RecordingError as exc:
        return {"ok": False, "problem": exc.problem, "message": str(exc), "retire": False}, b""
    except MemoryError:
        message = "decoding it needed more memory than an upload may take"
        return {"ok": False, "problem": "decoder_failed", "message": message, "retire": True}, b""
    except Exception as exc:  # a failure of our own code or of PyAV's that nobody planned for: say it, then go
        message = f"the decoder failed ({type(exc).__name__})"
        return {"ok": False, "problem": "decoder_failed", "message": message, "retire": True}, b""
    return {"ok": True, "container": decoded.container, "codec": decoded.codec}, decoded.pcm


def _warm_up() -> None:
    """One decoding of a second of silence, so that what PyAV and FFmpeg set up on first use is in place (and
    counted in the memory the cap starts from) before the first upload."""
    silence = io.BytesIO()
    with wave.open(silence, "wb") as writer:
        writer.setnchannels(1)
        writer.setsampwidth(2)
        writer.setframerate(8000)
        writer.writeframes(bytes(16000))
    decode_recording(silence.getvalue(), min_s=0.0)


def _cap_resources(memory_mb: int) -> None:
    """No core files (a crash would write the process's memory: uploads), no files at all, and the address space at
    what the process maps now plus ``memory_mb``."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    mapped = _mapped_bytes()
    if mapped is not None:
        _lower_soft_limit(resource.RLIMIT_AS, mapped + memory_mb * _MIB)


def _cap_cpu(cpu_s: float) -> None:
    """The CPU time this process may reach: what it has used, plus ``cpu_s`` for the decoding about to start."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    _lower_soft_limit(resource.RLIMIT_CPU, math.ceil(usage.ru_utime + usage.ru_stime + cpu_s))


def _lower_soft_limit(which: int, soft: int) -> None:
    """Set a soft limit under the hard one: the hard limit is left as it is, for an unprivileged process could never
    raise it again (the CPU limit moves with every decoding)."""
    _, hard = resource.getrlimit(which)
    resource.setrlimit(which, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))


def _mapped_bytes() -> int | None:
    """The process's address space in bytes (Linux's ``/proc``); ``None`` where there is no such file."""
    try:
        pages = int(Path("/proc/self/statm").read_text(encoding="ascii").split()[0])
    except OSError:
        return None
    return pages * os.sysconf("SC_PAGE_SIZE")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
