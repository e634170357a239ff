"""The streaming decode (DVAE decoder + Vocos): torch on the worker's threads or one, and ONNX Runtime's graph in
float32 and in 8 bits, in one process (issue #51).

    .venv/bin/python -m bench.chattts_stream_decode --assets /tmp/chattts-full    # about 2 minutes on 2 cores
    .venv/bin/python -m bench.chattts_stream_decode --assets /tmp/chattts-full --ways torch,onnxruntime,onnxruntime+int8
    .venv/bin/python -m bench.chattts_stream_decode --assets /tmp/chattts-full \
        --ways onnxruntime+int8,onnxruntime+int8-2 --tokens 24,54,102 --rounds 9

Decodes one window of each ``--tokens`` size with :func:`engines.chattts.streaming.decode_windows` in each of
``--ways`` (``torch`` on the worker's ``--threads``, ``torch-1`` on one, ``onnxruntime`` and ``onnxruntime+int8``:
the audio graph, ``engines/chattts/audio_graph.py``, on one thread, or on N with ``-N``: ``onnxruntime+int8-2``, as
``stream_decode_threads_alone`` runs a decode nothing runs beside), alternating ``--rounds`` times, and prints the
median wall and CPU time (every thread of the process) of each way, each way's time over torch on one thread, and how
far its audio is from that: the log spectral distance in dB (1024-point frames, hop 256) and the difference's
energy relative to the signal's. The hidden states are random (the decode's cost does not depend on them); so are the
weights, which no one can judge by ear.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from bench.chattts_decoder import log_spectral_distance
from engines.chattts import streaming
from engines.chattts.audio_graph import AudioGraph, load_audio_graph
from engines.chattts.engine import ChatTTSEngine
from engines.chattts.loader import verify_directory

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = ["main"]

REFERENCE = "torch-1"


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def timed(
    chat: object, window: torch.Tensor, threads: int, graph: AudioGraph | None
) -> tuple[float, float, npt.NDArray[np.float32]]:
    """Wall and CPU seconds of one decode of ``window``, and its audio."""
    cpu, wall = cpu_s(), time.perf_counter()
    (audio,) = streaming.decode_windows(chat, [window], threads, graph)
    return time.perf_counter() - wall, cpu_s() - cpu, audio


def ways_of(
    engine: ChatTTSEngine, names: list[str], assets: str, threads: int
) -> dict[str, tuple[int, AudioGraph | None]]:
    """Each way's torch threads and graph (built beside the assets on first use)."""
    location = verify_directory(Path(assets))
    cache = Path(engine.options.cache_dir).expanduser()
    found: dict[str, tuple[int, AudioGraph | None]] = {}
    for name in dict.fromkeys([REFERENCE, *names]):
        if name.startswith("torch"):
            found[name] = (1 if name == REFERENCE else threads, None)
            continue
        kind, _, count = name.partition("-")
        graph = load_audio_graph(engine._chat, location.hashes, location.path, cache, int(count or 1),
                                 int8=kind.endswith("int8"))  # fmt: skip
        if graph is None:
            raise SystemExit(f"the audio graph for {name} could not be built here (see the log)")
        found[name] = (1, graph)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--assets", required=True, help="a ChatTTS directory (chattts-gateway assets generate ...)")
    parser.add_argument("--tokens", type=lambda s: [int(x) for x in s.split(",")], default=[24, 64, 88])
    parser.add_argument("--threads", type=int, default=2, help="the worker's torch threads")
    parser.add_argument("--ways", type=lambda s: s.split(","), default=["torch", "torch-1"])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    engine = ChatTTSEngine({"source": "dir", "path": args.assets, "device": "cpu", "threads": args.threads,
                            "decoder": "torch"})  # fmt: skip
    engine.load()
    chat = engine._chat
    ways = ways_of(engine, args.ways, args.assets, args.threads)
    hidden = int(chat.config.gpt.hidden_size)
    print("| window tokens | way | wall ms | CPU ms | wall over torch-1 | LSD dB | error energy |")
    print("|---|---|---|---|---|---|---|")
    for tokens in args.tokens:
        window = torch.randn(tokens, hidden, generator=torch.Generator().manual_seed(tokens))
        audio = {way: timed(chat, window, threads, graph)[2] for way, (threads, graph) in ways.items()}  # warm-up
        found: dict[str, list[tuple[float, float]]] = {way: [] for way in ways}
        for round_ in range(args.rounds):
            for way in ways if round_ % 2 == 0 else reversed(ways):
                wall, cpu, _ = timed(chat, window, *ways[way])
                found[way].append((wall, cpu))
        reference, base = audio[REFERENCE], statistics.median(wall for wall, _ in found[REFERENCE])
        for way, times in found.items():
            wall = statistics.median(wall for wall, _ in times)
            cpu = statistics.median(cpu for _, cpu in times)
            error = float(np.sum((audio[way] - reference) ** 2) / np.sum(reference**2))
            print(f"| {tokens} | {way} | {wall * 1000:.1f} | {cpu * 1000:.1f} | {wall / base:.2f} "
                  f"| {log_spectral_distance(reference, audio[way]):.3f} | {error:.1e} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
