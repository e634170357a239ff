"""First audio with a voice from a sample against a built-in voice, with and without the voice prefix cache.

    .venv/bin/python -m bench.chattts_voice_prefix --assets /tmp/chattts-full    # about 2 minutes on 2 idle cores

Issue #51: "Custom voices as fast as built-in ones". A sample voice's prompt is ``[Stts][empty_spk]`` + transcript +
``[speed_N]`` + text + ``[Ptts]`` + the sample's audio codes (ChatTTS's own layout); the engine keeps the keys and
values of what precedes the text per worker (``voice_prefix_cache_mb``, ``engines/chattts/prefix_cache.py``). Per
sample length, this times a request at an idle worker from ``synthesize`` to its first audio chunk (its prefill, the
``stream_first_tokens`` steps, the chunk's decode; each request is exactly that long) for: a built-in voice; the sample
voice with the cache emptied before each request (every prompt prefilled whole, as before the cache); the sample
voice with its prefix cached. The cases alternate over ``--rounds`` rounds; medians, and their ratios to the built-in
voice's, in wall time and in this process's CPU time (what stays comparable on a machine other work loads: one torch
thread, ``--threads 1``, then keeps CPU time close to the work done). The samples are espeak's speech of the
transcript, repeated to each length (the weights are random: what counts is the prompt's length). Prints Markdown.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from engines.base import CancelFlag, SynthesisRequest
from engines.chattts.engine import ChatTTSEngine
from engines.chattts.prefix_cache import PrefixCache
from harness.recordings import speech

__all__ = ["main"]

TEXT = "The weather will be sunny this afternoon, with a light breeze from the west."
TRANSCRIPT = "Hello, this is my own voice, recorded for the gateway, and these are the words I read aloud today."
SAMPLE_SECONDS = (3.0, 10.0)
FIRST_TOKENS = 24


def first_audio_s(engine: ChatTTSEngine, request: SynthesisRequest) -> tuple[float, float]:
    """Wall and CPU seconds (this process's, every thread) from the request to its first chunk."""
    started, cpu = time.perf_counter(), time.process_time()
    chunks = engine.synthesize(request, CancelFlag())
    next(chunks)
    elapsed = time.perf_counter() - started, time.process_time() - cpu
    for _ in chunks:  # the request is exactly its first chunk long: nothing more is generated
        pass
    return elapsed


def sample_speaker(engine: ChatTTSEngine, seconds: float) -> str:
    pcm, rate = speech(TRANSCRIPT)
    repeats = int(np.ceil(seconds * rate / len(pcm)))
    return engine.speaker_from_sample(np.tile(pcm, repeats)[: int(seconds * rate)], rate, TRANSCRIPT)


def prompt_tokens(engine: ChatTTSEngine, request: SynthesisRequest) -> tuple[int, int]:
    """The first segment's prompt positions, and how many of them the prefix cache holds."""
    plan = engine._plan(0, request, CancelFlag())
    code_request = engine._code_request(plan)
    return code_request.length, code_request.shared_prefix


def progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--assets", type=Path, required=True, help="a ChatTTS asset directory (full size)")
    parser.add_argument("--rounds", type=int, default=2, help="timed requests per case, alternating")
    parser.add_argument("--samples", type=float, nargs="+", default=SAMPLE_SECONDS, help="sample lengths, seconds")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--decoder", default="torch", help="the engine's decoder option (prefill is torch in both)")
    parser.add_argument("--weights", default="float32", help="the engine's weights option (with --decoder onnxruntime)")
    parser.add_argument("--prefill-weights", default="auto", help="the engine's prefill_weights option")
    args = parser.parse_args()
    options = {"source": "dir", "path": str(args.assets), "decoder": args.decoder, "max_batch": 1, "seed": 1,
               "max_new_token": FIRST_TOKENS, "min_new_token": FIRST_TOKENS, "stream_first_tokens": FIRST_TOKENS,
               "threads": args.threads, "weights": args.weights, "prefill_weights": args.prefill_weights}  # fmt: skip
    engine = ChatTTSEngine(options)
    started = time.perf_counter()
    info = engine.load()
    progress(f"loaded in {time.perf_counter() - started:.1f} s")
    cache = engine._prefixes
    assert cache is not None
    # Unseeded, the engine's seed for the tokens: a request's own seed would run it without the prefix cache.
    built_in = SynthesisRequest(TEXT, "alloy")
    cases: dict[str, tuple[SynthesisRequest, bool]] = {"built-in voice": (built_in, False)}
    for seconds in args.samples:
        custom = SynthesisRequest(TEXT, "voice_x", speaker=sample_speaker(engine, seconds))
        cases[f"{seconds:g} s sample, not cached"] = (custom, True)
        cases[f"{seconds:g} s sample, cached prefix"] = (custom, False)
    timings: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
    for round_ in range(args.rounds + 1):  # the first round warms up
        for name, (request, cold) in cases.items():
            if cold:
                engine._prefixes = PrefixCache(cache.max_bytes)
            wall, cpu = first_audio_s(engine, request)
            engine._prefixes = cache
            progress(f"round {round_}, {name}: {wall:.3f} s wall, {cpu:.3f} s CPU")
            if round_:
                timings[name].append((wall, cpu))
    details = info.details
    print(f"torch threads {torch.get_num_threads()}, decoder {details['decoder']} ({details['decode_weights']}), "
          f"prefill {details['prefill_weights']}, {FIRST_TOKENS} tokens to the first chunk, {args.rounds} rounds, "
          f"load average {os.getloadavg()[0]:.1f}\n")  # fmt: skip
    print("| voice | prompt positions | of them cached | first audio, wall s | x built-in | CPU s | x built-in |")
    print("|---|---|---|---|---|---|---|")
    base = [statistics.median(column) for column in zip(*timings["built-in voice"], strict=True)]
    for name, (request, cold) in cases.items():
        positions, shared = prompt_tokens(engine, request)
        wall, cpu = (statistics.median(column) for column in zip(*timings[name], strict=True))
        cached = 0 if cold else shared
        ratios = f"{wall:.2f} | {wall / base[0]:.2f} | {cpu:.2f} | {cpu / base[1]:.2f}"
        print(f"| {name} | {positions} | {cached} | {ratios} |")
    print(f"\nprefix cache: {len(cache)} entries, {cache.bytes / 2**20:.1f} MiB, {cache.hits} hits")


if __name__ == "__main__":
    main()
