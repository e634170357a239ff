"""What a shortened first chunk costs a listener (``stream_first_tokens_min``, issue #51): the engine in process.

    .venv/bin/python -m bench.chattts_first_chunk --assets /tmp/chattts-full --requests 8 --mins 24,12 --rounds 2

``--requests`` requests of exactly ``--tokens`` audio tokens arrive together at one ``ChatTTSEngine`` (``max_batch:
auto``, 8-bit ONNX Runtime steps: the CPU default), once per value of ``stream_first_tokens_min`` in ``--mins``,
alternating over ``--rounds``. Per request, as a listener playing each chunk as it comes would hear it: the time to its
first audio, that chunk's audio, the silence after the first audio until the end (all the gaps), and the time of its
last audio. Prints one row per run (medians over the requests).
"""

from __future__ import annotations

import argparse
import statistics
import time

from engines.base import OPENAI_VOICES, CancelFlag, SynthesisRequest
from engines.chattts.engine import SAMPLE_RATE, ChatTTSEngine

__all__ = ["main"]

TEXT = "Request number %d of the first chunk benchmark, spoken in one sentence."


def listen(engine: ChatTTSEngine, requests: int) -> list[list[tuple[float, float]]]:
    """Each request's chunks as ``(seconds after the arrival, seconds of audio)``."""
    # Unseeded: a request's own seed would run it apart from the batch (docs/engines.md, "Seeded requests").
    batch = [SynthesisRequest(TEXT % number, OPENAI_VOICES[0]) for number in range(requests)]
    started = time.perf_counter()
    chunks: dict[int, list[tuple[float, float]]] = {}
    for index, item in engine.synthesize_batch(batch, [CancelFlag() for _ in batch]):
        if item is not None and not isinstance(item, Exception):
            chunks.setdefault(index, []).append((time.perf_counter() - started, len(item) / SAMPLE_RATE))
    return list(chunks.values())


def silence_after_first(chunks: list[tuple[float, float]]) -> float:
    """The listener's waits after the first audio: each chunk that comes after the audio before it has played."""
    played_until, silence = chunks[0][0], 0.0
    for arrived, audio in chunks:
        silence += max(0.0, arrived - played_until)
        played_until = max(played_until, arrived) + audio
    return silence


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--assets", required=True)
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--mins", default="24,12", help="stream_first_tokens_min values, alternating")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    engine = ChatTTSEngine({"source": "dir", "path": args.assets, "device": "cpu", "decoder": "onnxruntime",
                            "weights": "int8", "max_new_token": args.tokens, "min_new_token": args.tokens})  # fmt: skip
    info = engine.load()
    print(f"max_batch {info.details['max_batch']}; first_chunk {info.details['first_chunk']}")
    listen(engine, 1)  # warm up
    print("| stream_first_tokens_min | first audio p50 | first chunk's audio | silence after it, in all | last audio |")
    print("|---|---|---|---|---|")
    for _ in range(args.rounds):
        for least in (int(value) for value in args.mins.split(",")):
            engine.options = engine.options.model_copy(update={"stream_first_tokens_min": least})
            heard = listen(engine, args.requests)
            print(f"| {least} | {statistics.median(c[0][0] for c in heard):.3f} s "
                  f"| {statistics.median(c[0][1] for c in heard):.3f} s "
                  f"| {statistics.median(silence_after_first(c) for c in heard):.3f} s "
                  f"| {statistics.median(c[-1][0] for c in heard):.3f} s |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
