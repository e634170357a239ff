"""The upload decoder processes: uploads are decoded outside the test process, a decoder that crashes, takes all its
memory or CPU, hangs or answers nonsense costs its upload a clear refusal and is replaced, and nothing it sends can
make the server hold more than one recording's PCM. The misbehaving decoder is the real one with a decoding that
misbehaves on request (``tests/upload_faults.py``), under the real caps."""

from __future__ import annotations

import ast
import io
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import gateway
from gateway.audio.samples import RecordingError, decode_recording
from gateway.uploads import DecoderProcesses, UploadSettings
from gateway.uploads.processes import NoDecoderError
from harness.hostile_uploads import wav_pcm
from harness.recordings import recording, tone
from tests.cpu_starvation import children_running
from tests.upload_faults import CRASH, HANG, HOG, LIAR, SPIN
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

FAULTS = "tests.upload_faults"


@pytest.fixture
def start_decoders() -> Iterator[Callable[..., DecoderProcesses]]:
    """Starts decoder processes of the misbehaving kind with the settings it is given; stops them after the test.

    At ``low`` priority unless told: the faults' deadlines are short, and a decoder at ``idle`` priority on a machine
    busy with other tests might wait for the CPU through them, which is a 503 of its own (test_upload_routes.py).
    """
    started: list[DecoderProcesses] = []

    def start(module: str = FAULTS, **settings: Any) -> DecoderProcesses:
        settings.setdefault("decoder_priority", "low")
        processes = DecoderProcesses(UploadSettings(**settings), module=module)
        started.append(processes)
        processes.start()
        return processes

    yield start
    for processes in started:
        processes.stop()


@pytest.fixture
def decoders(start_decoders: Callable[..., DecoderProcesses]) -> DecoderProcesses:
    return start_decoders()


def decode(decoders: DecoderProcesses, data: bytes) -> bytes:
    return decoders.decode(io.BytesIO(data), wait_s=30.0).pcm


def refusal(decoders: DecoderProcesses, data: bytes) -> RecordingError:
    with pytest.raises(RecordingError) as refused:
        decode(decoders, data)
    return refused.value


def test_a_decoder_process_decodes_as_the_function_does(decoders: DecoderProcesses) -> None:
    upload = recording("mp3", tone(2.0, 330.0))
    assert decode(decoders, upload) == decode_recording(upload).pcm


@pytest.mark.parametrize(
    ("upload", "said"),
    [
        (recording("flac", tone(0.5)), ("too_short", "The recording lasts 0.50 s; at least 1 s.")),
        (
            # A WAV header of 0 bits per sample, for which FFmpeg has no codec: it once retired its decoder.
            wav_pcm(bytes(48000), rate=24000, channels=1, bits=0),
            (
                "unsupported",
                "The wav file declares its audio in an encoding no decoder reads "
                "(an unknown codec, or an impossible sample size such as 0 bits).",
            ),
        ),
    ],
    ids=["too-short", "wav-of-0-bits"],
)
def test_what_decoding_refuses_comes_back_as_said_and_the_decoder_stays(
    decoders: DecoderProcesses, upload: bytes, said: tuple[str, str]
) -> None:
    problem = refusal(decoders, upload)
    assert (problem.problem, str(problem)) == said
    assert decoders.replaced == 0


@pytest.mark.parametrize(
    ("upload", "words"),
    [
        (CRASH, "it crashed the decoder (signal SIGSEGV)"),
        (HOG, "decoding it needed more memory than an upload may take"),
    ],
    ids=["crash", "memory"],
)
def test_a_decoder_that_crashes_or_runs_out_of_memory_is_replaced(
    decoders: DecoderProcesses, upload: bytes, words: str
) -> None:
    problem = refusal(decoders, upload)
    assert problem.problem == "decoder_failed"
    assert words in str(problem)
    assert decoders.replaced == 1
    valid = recording("wav", tone(1.5))
    assert decode(decoders, valid) == decode_recording(valid).pcm  # a fresh decoder took its place


def test_a_decoding_that_spins_is_ended_at_its_cpu_time(start_decoders: Callable[..., DecoderProcesses]) -> None:
    decoders = start_decoders(decoder_cpu_s=1)
    problem = refusal(decoders, SPIN)
    assert "decoding it took more than 1 s of CPU time" in str(problem)


def test_a_decoding_that_hangs_is_ended_at_its_deadline(start_decoders: Callable[..., DecoderProcesses]) -> None:
    decoders = start_decoders(decode_timeout_s=0.5)
    problem = refusal(decoders, HANG)
    assert "decoding it took longer than 0.5 s" in str(problem)


def test_a_reply_announcing_more_than_a_recording_is_not_read(decoders: DecoderProcesses) -> None:
    problem = refusal(decoders, LIAR)  # a gigabyte announced: refused from its length, nothing allocated
    assert problem.problem == "decoder_failed"
    assert decoders.replaced == 1


def test_a_decoder_is_replaced_after_its_share_of_uploads(start_decoders: Callable[..., DecoderProcesses]) -> None:
    decoders = start_decoders(decodes_per_decoder=2, decoders=1)
    valid = recording("wav", tone(1.5))
    for _ in range(2):
        decode(decoders, valid)
    assert decoders.replaced == 1
    decode(decoders, valid)


def test_an_upload_waits_for_a_free_decoder_within_a_bound(start_decoders: Callable[..., DecoderProcesses]) -> None:
    decoders = start_decoders(decoders=1, decode_timeout_s=2.0)
    decode(decoders, recording("wav", tone(1.5)))  # the one decoder is up
    hung = threading.Thread(target=refusal, args=(decoders, HANG))
    hung.start()
    wait_until(lambda: decoders.idle == 0, what="the decoder taken")
    started = time.monotonic()
    with pytest.raises(NoDecoderError):
        decoders.decode(io.BytesIO(recording("wav", tone(1.5))), wait_s=0.3)
    assert time.monotonic() - started < 5.0
    hung.join()


def test_a_decoder_that_cannot_start_is_tried_again_and_uploads_are_told(
    start_decoders: Callable[..., DecoderProcesses], caplog: pytest.LogCaptureFixture
) -> None:
    decoders = start_decoders("tests.no_such_module", decoders=1)
    with pytest.raises(NoDecoderError):
        decoders.decode(io.BytesIO(recording("wav", tone(1.5))), wait_s=1.0)
    assert "an upload decoder failed to start: it ended (exit code 1)" in caplog.text


def test_only_the_decoder_process_decodes_uploads() -> None:
    # The server hands uploads to decoder processes; a module of it calling the decoding itself would put FFmpeg's
    # parsing of untrusted bytes back into the process that holds every tenant's streams.
    package = Path(gateway.__file__).parent
    defined, decoder = package / "audio" / "samples.py", package / "uploads" / "decoder.py"
    callers = {path for path in package.rglob("*.py") if "decode_recording" in _names_used(path)}
    assert callers - {defined} == {decoder}


def _names_used(path: Path) -> set[str]:
    """The names a module's code refers to or imports (not what its strings and docstrings mention)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.ImportFrom):
            names.update(alias.name for alias in node.names)
    return names


@pytest.mark.parametrize(("priority", "policy"), [("idle", os.SCHED_IDLE), ("low", os.SCHED_OTHER)])
def test_decoders_yield_the_cpu_to_speech(
    start_decoders: Callable[..., DecoderProcesses], priority: str, policy: int
) -> None:
    module = "gateway.uploads.decoder"
    earlier = set(children_running(module))  # an earlier test's decoders not reaped yet
    decoders = start_decoders(module=module, decoder_priority=priority)
    wait_until(lambda: decoders.idle == decoders.size, what="every decoder started and warm")
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    pids = set(children_running(module)) - earlier
    assert len(pids) == decoders.size
    assert {os.sched_getscheduler(pid) for pid in pids} == {policy}
    assert {os.getpriority(os.PRIO_PROCESS, pid) for pid in pids} == {min(ours + 10, 19)}
