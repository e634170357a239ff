"""What a valid upload costs to decode on a machine whose every core is kept busy, per ``uploads.decoder_priority``.

    .venv/bin/python -m bench.upload_under_load              # about a minute on 2 cores
    .venv/bin/python -m bench.upload_under_load --busy 1     # one core kept busy, the other free

The worst case of the price of ``idle`` priority (``gateway/uploads/decoder.py``): ``--busy`` processes (default: one
per core) at the server's priority that compute without pause, as engines would that never leave a core idle, while
the decoder processes of each priority (the default settings otherwise: 2 decoders, a 10 s deadline) decode a valid
10-second mp3 voice sample ``--rounds`` times, one after another. Each row: how the decodings ended (decoded, or 503
for a decoder starved of CPU, or a 400) and the median time to that answer. The same with no busy process first, for
the idle machine's time.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from contextlib import contextmanager
from typing import TYPE_CHECKING, Literal

from bench.upload_decoders import SECONDS, voice_sample
from gateway.audio.samples import RecordingError
from gateway.uploads import DecoderProcesses, UploadSettings
from gateway.uploads.processes import DecoderStarvedError
from harness.recordings import recording

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["main"]

_SPIN = "while True:\n    pass\n"
PRIORITIES: tuple[Literal["idle", "low"], ...] = ("low", "idle")


@contextmanager
def busy_cores(count: int) -> Iterator[None]:
    """``count`` processes at this process's priority computing without pause while the block runs."""
    spinners = [subprocess.Popen([sys.executable, "-c", _SPIN]) for _ in range(count)]
    try:
        time.sleep(0.5)  # under way
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def decode_rounds(
    priority: Literal["idle", "low"], upload: bytes, rounds: int, busy: int
) -> tuple[Counter[str], float]:
    """How ``rounds`` decodings by decoders of ``priority`` ended beside ``busy`` spinning processes, and the median
    seconds to their answers."""
    decoders = DecoderProcesses(UploadSettings(decoder_priority=priority))
    decoders.start()
    ended: Counter[str] = Counter()
    times: list[float] = []
    try:
        decoders.decode(io.BytesIO(upload), wait_s=60.0)  # every decoder started, and warm
        with busy_cores(busy):
            for _ in range(rounds):
                started = time.perf_counter()
                try:
                    decoders.decode(io.BytesIO(upload), wait_s=60.0)
                    ended["decoded"] += 1
                except DecoderStarvedError:
                    ended["503 starved"] += 1
                except RecordingError as exc:
                    ended[f"400 {exc.problem}"] += 1
                times.append(time.perf_counter() - started)
    finally:
        decoders.stop()
    return ended, statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--busy", type=int, default=os.cpu_count() or 1, help="processes kept computing")
    parser.add_argument("--rounds", type=int, default=3, help="decodings per priority and load")
    args = parser.parse_args()
    upload = recording("mp3", *voice_sample())
    print(f"a {SECONDS:g} s mp3 of {len(upload) / 1024:.0f} KiB; {os.cpu_count()} cores\n")
    print("| decoder priority | busy processes | answers | median s to the answer |")
    print("|---|---|---|---|")
    for busy in (0, args.busy):
        for priority in PRIORITIES:
            ended, median_s = decode_rounds(priority, upload, args.rounds, busy)
            answers = ", ".join(f"{count} {how}" for how, count in sorted(ended.items()))
            print(f"| {priority} | {busy} | {answers} | {median_s:.2f} |")


if __name__ == "__main__":
    main()
