"""What an uploaded recording costs the gateway (``gateway/audio/samples.py``): decoding it from each container with
resampling to 24 kHz mono, and re-encoding a consent recording as the 16 kbit/s Ogg/Opus kept for audit.

    .venv/bin/python -m bench.voice_samples              # about half a minute
    .venv/bin/python -m bench.voice_samples --rounds 3   # fewer or more timed calls per case

The recordings are espeak's speech (repeated to each duration), encoded with PyAV as a caller would upload them:
stereo at 44.1 kHz (48 kHz for Opus). Every call runs once untimed, then ``--rounds`` times timed; the median is
reported, as milliseconds and as seconds of audio per second of one core. Prints Markdown tables and writes every
figure to ``bench/results/voice_samples.json``.
"""

from __future__ import annotations

import argparse
import functools
import json
import platform
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from gateway.audio.samples import decode_recording, encode_for_audit
from harness.recordings import CONTAINERS, recording, speech

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["Row", "main", "measure"]

RESULTS = Path(__file__).resolve().parent / "results" / "voice_samples.json"
DURATIONS_S = (5.0, 15.0, 30.0)
TEXT = "I am the owner of this voice, and I consent to its use for synthetic speech. "


def _median_ms(call: Callable[[], object], rounds: int) -> float:
    call()
    timings = []
    for _ in range(rounds):
        started = time.perf_counter()
        call()
        timings.append((time.perf_counter() - started) * 1000)
    return statistics.median(timings)


def _speech_of(seconds: float) -> tuple[np.ndarray, int]:
    pcm, rate = speech(TEXT)
    repeats = int(np.ceil(seconds * rate / len(pcm)))
    return np.tile(pcm, repeats)[: int(seconds * rate)], rate


@dataclass(frozen=True)
class Row:
    container: str
    seconds: float
    upload_bytes: int
    audit_bytes: int
    decode_ms: float
    """Sniffing, demuxing, decoding and resampling to 24 kHz mono (``decode_recording``)."""
    audit_encode_ms: float
    """Encoding the decoded PCM as 16 kbit/s Ogg/Opus (``encode_for_audit``; consent recordings only)."""


def measure(rounds: int) -> list[Row]:
    """One row per duration and container."""
    rows: list[Row] = []
    for seconds in DURATIONS_S:
        pcm, rate = _speech_of(seconds)
        for kind in CONTAINERS:
            upload = recording(kind, pcm, rate)
            decoded = decode_recording(upload)
            audit = encode_for_audit(decoded.pcm)
            decode_ms = _median_ms(functools.partial(decode_recording, upload), rounds)
            encode_ms = _median_ms(functools.partial(encode_for_audit, decoded.pcm), rounds)
            rows.append(Row(kind, seconds, len(upload), len(audit), decode_ms, encode_ms))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5, help="timed calls per case")
    args = parser.parse_args()
    rows = measure(args.rounds)
    print(f"{args.rounds} timed calls per case (median), one thread, Python {platform.python_version()}\n")
    print("| container | audio s | upload KiB | decode ms | audio s per s | audit encode ms | audit KiB |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row.container} | {row.seconds:g} | {row.upload_bytes / 1024:.0f} | {row.decode_ms:.1f} | "
            f"{row.seconds * 1000 / row.decode_ms:.0f} | {row.audit_encode_ms:.1f} | {row.audit_bytes / 1024:.1f} |"
        )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    report = {"rounds": args.rounds, "python": platform.python_version(), "rows": [asdict(row) for row in rows]}
    RESULTS.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
