"""What decoding uploads in decoder processes (``gateway/uploads``) costs against decoding them in the server process,
as the gateway did before: for 10-second voice samples in each container, the time of one decoding and the uploads
decoded per second with several at once.

    .venv/bin/python -m bench.upload_decoders              # about a minute
    .venv/bin/python -m bench.upload_decoders --rounds 20  # more timed decodings per case

In process: ``decode_recording`` in threads, at most 4 at once (the server's former limit). Decoder processes: the
default settings (2 processes), fed from 4 threads as the server's requests would. Each case alternates the two
ways round by round, so that a machine busy with something else slows both alike; the ratio of each pair is what
to read. Prints a Markdown table and writes every figure to ``bench/results/upload_decoders.json``.
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import platform
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from gateway.audio.samples import DecodedRecording, decode_recording
from gateway.uploads import DecoderProcesses, UploadSettings
from harness.recordings import CONTAINERS, recording, speech

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["SECONDS", "Row", "main", "measure", "voice_sample"]

RESULTS = Path(__file__).resolve().parent / "results" / "upload_decoders.json"
SECONDS = 10.0
AT_ONCE = 4  # the server's former thread limit for decoding; also the requests feeding the decoders here
TEXT = "I am the owner of this voice, and I consent to its use for synthetic speech. "


@dataclass(frozen=True)
class Row:
    container: str
    upload_bytes: int
    in_process_ms: float
    """One decoding, alone, in the calling process (median)."""
    decoder_ms: float
    """One decoding, alone, sent to a decoder process and its PCM read back (median)."""
    in_process_per_s: float
    """Uploads decoded per second, ``AT_ONCE`` at a time, in threads of the calling process (median of rounds)."""
    decoders_per_s: float
    """Uploads decoded per second, ``AT_ONCE`` at a time, by the default decoder processes (median of rounds)."""


def voice_sample() -> tuple[np.ndarray, int]:
    """``SECONDS`` of espeak's speech, as a voice sample would last: its PCM and rate."""
    pcm, rate = speech(TEXT)
    return np.tile(pcm, int(np.ceil(SECONDS * rate / len(pcm))))[: int(SECONDS * rate)], rate


def _timed(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def _burst(decode: Callable[[bytes], object], upload: bytes, pool: ThreadPoolExecutor) -> float:
    """Uploads per second for ``2 * AT_ONCE`` decodings, ``AT_ONCE`` at a time."""
    count = 2 * AT_ONCE
    return count / _timed(lambda: list(pool.map(decode, [upload] * count)))


def measure(rounds: int) -> list[Row]:
    """One row per container; in-process and decoder-process figures taken in alternating rounds."""
    decoders = DecoderProcesses(UploadSettings())
    decoders.start()

    def in_decoder(upload: bytes) -> DecodedRecording:
        return decoders.decode(io.BytesIO(upload), wait_s=60.0)

    rows: list[Row] = []
    try:
        pcm, rate = voice_sample()
        with ThreadPoolExecutor(AT_ONCE) as pool:
            for kind in CONTAINERS:
                upload = recording(kind, pcm, rate)
                # Warm both ways, and check that they agree to the sample.
                assert in_decoder(upload).pcm == decode_recording(upload).pcm, kind
                alone: tuple[list[float], list[float]] = ([], [])
                bursts: tuple[list[float], list[float]] = ([], [])
                for _ in range(rounds):
                    alone[0].append(_timed(functools.partial(decode_recording, upload)) * 1000)
                    alone[1].append(_timed(functools.partial(in_decoder, upload)) * 1000)
                    bursts[0].append(_burst(decode_recording, upload, pool))
                    bursts[1].append(_burst(in_decoder, upload, pool))
                medians = [statistics.median(values) for values in (*alone, *bursts)]
                rows.append(Row(kind, len(upload), *medians))
    finally:
        decoders.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds per container")
    args = parser.parse_args()
    rows = measure(args.rounds)
    print(f"{SECONDS:g} s samples, {args.rounds} alternating rounds per container (medians)\n")
    print("| container | upload KiB | in process ms | decoder ms | ratio | in process /s | decoders /s | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row.container} | {row.upload_bytes / 1024:.0f} | {row.in_process_ms:.1f} | {row.decoder_ms:.1f} | "
            f"{row.decoder_ms / row.in_process_ms:.2f} | {row.in_process_per_s:.1f} | {row.decoders_per_s:.1f} | "
            f"{row.in_process_per_s / row.decoders_per_s:.2f} |"
        )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    report = {"rounds": args.rounds, "python": platform.python_version(), "rows": [asdict(row) for row in rows]}
    RESULTS.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
