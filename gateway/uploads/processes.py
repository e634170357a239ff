"""The decoder processes (``gateway/uploads/decoder.py``), kept started and replaced when they end.

Blocking and thread-safe: :meth:`DecoderProcesses.decode` runs in a thread (the async side, with its wait and its
limit, is :class:`~gateway.uploads.Uploads`), so one set of processes may serve several event loops (the in-process
tests share one). Each process decodes one upload at a time; a process that crashed, was killed at its deadline, ran
out of memory or has served ``decodes_per_decoder`` uploads is retired and a new one started in the background, warm
(PyAV imported and used) before it takes an upload. A decoding that passes its deadline because the machine had no CPU
to give it (decoders yield to speech, ``decoder_priority``) is the machine's doing, not the upload's: it is told
apart by the decoder still wanting to run at the deadline with less than half of it spent running (Linux's
``/proc/PID/stat``).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, cast, get_args

from gateway.audio.samples import (
    MAX_RECORDING_S,
    MIN_RECORDING_S,
    SAMPLE_RATE,
    DecodedRecording,
    RecordingError,
    RecordingProblem,
)
from gateway.uploads.wire import WireError, read_message, write_message
from lifecycle import naming

if TYPE_CHECKING:
    from gateway.uploads.settings import UploadSettings

__all__ = ["DecoderProcesses", "DecoderStarvedError", "NoDecoderError"]

logger = naming.logger("uploads")

_START_TIMEOUT_S = 30.0
_MAX_RESTART_BACKOFF_S = 30.0
_PCM_SLACK_S = 1.0  # a reply's PCM may exceed the longest recording by this much (the decoder's own padding)
_CRASH_SIGNALS = frozenset({signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT, signal.SIGILL, signal.SIGFPE})
_STARVED_SHARE = 0.5  # a decoding still runnable at its deadline that ran less than this share of it was starved


class NoDecoderError(Exception):
    """No decoder process became free within the wait."""


class DecoderStarvedError(Exception):
    """A decoding passed its deadline waiting for the CPU: the machine was busy, the upload was not at fault."""


class _Decoder:
    """One decoder process and what the server knows of it."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process
        self.decodes = 0
        self.deadline_passed = False
        self.priority = ""
        """The CPU priority the process says it got (``UploadSettings.decoder_priority``)."""
        self.cpu_s_at_start: float | None = None
        self.ran_s: float | None = None
        """CPU seconds the decoding that passed its deadline had, when it still wanted to run then."""

    def scheduling(self) -> tuple[str, float] | None:
        """The process's state (``R``: running or waiting for a CPU, ``S``: asleep, ...) and the CPU seconds it has
        had; ``None`` where the kernel does not say (not Linux, or a process already reaped)."""
        try:
            stat = Path(f"/proc/{self.process.pid}/stat").read_text(encoding="ascii")
            fields = stat[stat.rindex(")") + 2 :].split()  # after the command's name, which may hold anything
            return fields[0], (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            return None

    @property
    def requests(self) -> BinaryIO:
        return cast("BinaryIO", self.process.stdin)

    @property
    def replies(self) -> BinaryIO:
        return cast("BinaryIO", self.process.stdout)

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self.process.kill()

    def end(self) -> int:
        """Close the pipes and reap the process (killed if it is still running); its exit status."""
        for pipe in (self.process.stdin, self.process.stdout):
            with contextlib.suppress(OSError):
                pipe.close()  # type: ignore[union-attr]
        try:
            return self.process.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            self.kill()
            return self.process.wait()


class DecoderProcesses:
    """``settings.decoders`` decoder processes, each decoding one upload at a time under the settings' caps."""

    def __init__(self, settings: UploadSettings, *, module: str = "gateway.uploads.decoder") -> None:
        """``module``: what each decoder process runs (``python -m``); the tests name decoders that misbehave."""
        self.settings = settings
        self._module = module
        self._idle: queue.SimpleQueue[_Decoder] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._running: set[_Decoder] = set()
        self._stopped = False
        self._failed_starts = 0
        self._priority_noted = False
        self.replaced = 0
        """Decoders retired and started anew since the start: crashed, killed, out of memory, or worn out."""

    @property
    def size(self) -> int:
        return self.settings.decoders

    @property
    def idle(self) -> int:
        """Decoders started, warm and free now."""
        return self._idle.qsize()

    def start(self) -> None:
        """Start every decoder in the background: they take uploads once warm, in about a fifth of a second."""
        for _ in range(self.settings.decoders):
            self._replace_soon(0.0)

    def stop(self) -> None:
        """End every decoder (an upload being decoded gets a 400, as for a killed decoder)."""
        with self._lock:
            self._stopped = True
            running = list(self._running)
        for decoder in running:
            decoder.kill()
            decoder.end()

    def decode(
        self, upload: BinaryIO, *, wait_s: float, min_s: float = MIN_RECORDING_S, max_s: float = MAX_RECORDING_S
    ) -> DecodedRecording:
        """Decode ``upload`` (a seekable file, at most 10 MiB: the caller checked) in a decoder process, waiting up to
        ``wait_s`` for one to be free; see :func:`~gateway.audio.samples.decode_recording`.

        Raises:
            RecordingError: what decoding found (``decoder_failed`` when the decoder crashed, ran out of memory or
                time: the message says which).
            NoDecoderError: no decoder was free within ``wait_s``.
            DecoderStarvedError: the decoding passed its deadline waiting for the CPU.
        """
        decoder = self._take(wait_s)
        reply: dict[str, Any] = {"retire": True}
        try:
            reply, pcm = self._run(decoder, upload, min_s, max_s)
        finally:
            healthy = not reply.get("retire") and decoder.decodes < self.settings.decodes_per_decoder
            self._give_back(decoder, healthy)
        return _recording(reply, pcm)

    def _take(self, wait_s: float) -> _Decoder:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                decoder = self._idle.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise NoDecoderError(f"no upload decoder was free within {wait_s:g} s") from None
            if decoder.process.poll() is None:
                return decoder
            self._retire(decoder, f"ended while idle ({_describe_status(decoder.process.returncode)})")

    def _run(self, decoder: _Decoder, upload: BinaryIO, min_s: float, max_s: float) -> tuple[dict[str, Any], bytes]:
        """The decoder's reply and its PCM.

        Raises:
            RecordingError: the decoder ended before it replied (``decoder_failed``, saying why).
        """
        settings = self.settings
        request = {"min_s": min_s, "max_s": max_s, "cpu_s": settings.decoder_cpu_s}
        max_pcm_bytes = int((max_s + _PCM_SLACK_S) * SAMPLE_RATE) * 2
        timer = threading.Timer(settings.decode_timeout_s, _at_deadline, args=(decoder,))
        now = decoder.scheduling()
        decoder.cpu_s_at_start = None if now is None else now[1]
        timer.start()
        try:
            write_message(decoder.requests, request, upload)
            reply, pcm = read_message(decoder.replies, max_payload_bytes=max_pcm_bytes)
        except WireError:
            ran_s = decoder.ran_s
            if decoder.deadline_passed and ran_s is not None and ran_s < _STARVED_SHARE * settings.decode_timeout_s:
                raise self._starved(decoder, ran_s) from None
            raise RecordingError("decoder_failed", self._failure(decoder)) from None
        finally:
            timer.cancel()
        decoder.decodes += 1
        return reply, pcm

    def _failure(self, decoder: _Decoder) -> str:
        """Why a decoder's pipe closed mid-decoding (or carried what it must not), in words for the client."""
        decoder.kill()  # if it still runs, it is not to be trusted with anything
        status = decoder.end()
        settings = self.settings
        if decoder.deadline_passed:
            why = f"decoding it took longer than {settings.decode_timeout_s:g} s"
        elif status == -signal.SIGXCPU:
            why = f"decoding it took more than {settings.decoder_cpu_s} s of CPU time"
        elif -status in _CRASH_SIGNALS:
            why = f"it crashed the decoder ({_describe_status(status)})"
        else:
            why = f"the decoder ended ({_describe_status(status)})"
        logger.warning("an upload decoder ended while decoding: %s", why)
        return f"The recording could not be decoded: {why}."

    def _starved(self, decoder: _Decoder, ran_s: float) -> DecoderStarvedError:
        decoder.end()  # killed at the deadline
        timeout_s = self.settings.decode_timeout_s
        logger.warning(
            "an upload decoder ran %.2f s of its %g s, waiting for the CPU (the machine is busy): the upload gets 503",
            ran_s,
            timeout_s,
        )
        return DecoderStarvedError(f"the decoding ran {ran_s:.2f} s of its {timeout_s:g} s, waiting for the CPU")

    def _give_back(self, decoder: _Decoder, healthy: bool) -> None:
        if healthy and not self._stopped:
            self._idle.put(decoder)
        else:
            self._retire(decoder, "retired after its upload")

    def _retire(self, decoder: _Decoder, why: str) -> None:
        status = decoder.end()
        with self._lock:
            self._running.discard(decoder)
            stopped = self._stopped
            self.replaced += 1
        if not stopped:
            logger.debug("upload decoder pid %s %s (%s)", decoder.process.pid, why, _describe_status(status))
            self._replace_soon(0.0)

    def _replace_soon(self, delay_s: float) -> None:
        threading.Thread(target=self._start_one, args=(delay_s,), name="upload-decoder-start", daemon=True).start()

    def _start_one(self, delay_s: float) -> None:
        time.sleep(delay_s)
        with self._lock:
            if self._stopped:
                return
            decoder = _Decoder(self._spawn())
            self._running.add(decoder)
        failure = _wait_ready(decoder)
        if failure is None:
            self._failed_starts = 0
            self._note_priority(decoder)
            self._idle.put(decoder)
            return
        decoder.end()
        with self._lock:
            self._running.discard(decoder)
            if self._stopped:
                return
            self._failed_starts += 1
            backoff = min(_MAX_RESTART_BACKOFF_S, 0.5 * 2.0 ** (self._failed_starts - 1))
        logger.error("an upload decoder failed to start: %s; trying again in %g s", failure, backoff)
        self._replace_soon(backoff)

    def _note_priority(self, decoder: _Decoder) -> None:
        """Say once when decoders run at another priority than the settings ask (``SCHED_IDLE`` refused)."""
        asked = self.settings.decoder_priority
        if decoder.priority != asked and not self._priority_noted:
            self._priority_noted = True
            logger.warning("upload decoders asked for %r CPU priority run at %r", asked, decoder.priority)

    def _spawn(self) -> subprocess.Popen[bytes]:
        settings = self.settings
        config = json.dumps({"memory_mb": settings.decoder_memory_mb, "priority": settings.decoder_priority})
        return subprocess.Popen(
            [sys.executable, "-B", "-m", self._module, config],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # FFmpeg's complaints about hostile files; what matters comes in the replies
            env=_decoder_environment(),
        )


def _at_deadline(decoder: _Decoder) -> None:
    now, cpu_s_at_start = decoder.scheduling(), decoder.cpu_s_at_start  # before the kill: a reaped process says none
    if now is not None and cpu_s_at_start is not None and now[0] == "R":
        decoder.ran_s = now[1] - cpu_s_at_start
    decoder.deadline_passed = True
    decoder.kill()


def _wait_ready(decoder: _Decoder) -> str | None:
    """``None`` once the decoder says it is ready; else why it will not be."""
    timer = threading.Timer(_START_TIMEOUT_S, decoder.kill)
    timer.start()
    try:
        reply, _ = read_message(decoder.replies, max_payload_bytes=0)
    except WireError:
        return f"it ended ({_describe_status(decoder.end())})"
    finally:
        timer.cancel()
    if reply.get("ready") is not True:
        return str(reply.get("reason", "it said it is not ready"))[:500]
    decoder.priority = str(reply.get("priority", ""))[:16]
    return None


def _recording(reply: dict[str, Any], pcm: bytes) -> DecodedRecording:
    """The decoder's reply, read as data: fields of the wrong type make it a failed decoding, not a server error."""
    if reply.get("ok") is True and len(pcm) % 2 == 0:
        return DecodedRecording(pcm, str(reply.get("container", ""))[:32], str(reply.get("codec", ""))[:64])
    problem = reply.get("problem")
    message = str(reply.get("message", ""))[:500] or "The recording could not be decoded."
    known = cast("RecordingProblem", problem) if problem in get_args(RecordingProblem) else "decoder_failed"
    raise RecordingError(known, message)


def _describe_status(status: int | None) -> str:
    if status is None:
        return "still running"
    if status >= 0:
        return f"exit code {status}"
    try:
        return f"signal {signal.Signals(-status).name}"
    except ValueError:
        return f"signal {-status}"


def _decoder_environment() -> dict[str, str]:
    """The server's environment, with the numeric libraries held to one thread: a decoder uses one core."""
    return {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
