"""Where a request's first audio goes as the batch grows (issue #51, part 3): the engine in process, closed loops.

    .venv/bin/python -m bench.chattts_first_audio --assets /tmp/chattts-full --concurrency 1,8 --tokens 96

At each concurrency N, N clients each send ``--repeat`` requests of exactly ``--tokens`` audio tokens back to back
to one ``ChatTTSEngine`` (``synthesize_batch`` with a job source, as the worker runs it; no HTTP, no process hop);
client k starts k * tokens / N passes after the first, so that every later request joins a running batch of N - 1
(the first round, filling the batch, is not counted). Each request's time from arrival to its first audio chunk is
split into what the token loop did meanwhile: decode steps (the running rows alone), passes that also prefilled a
joiner's prompt, the streaming decodes (DVAE + Vocos) of chunks, and the rest (sampling, bookkeeping); and counted
in forward passes. Each level runs per ``--variants``: ``held`` (the engine as it is: later chunks wait for a first
chunk, and a pass's first chunks are decoded and leave before its other due chunks), ``together`` (later chunks held,
but a pass's due chunks decoded in one round: the code before first chunks went first) and ``at-once`` (every due
chunk decoded at once, in one round: the code before both), alternating over ``--rounds``. Prints a table row per
run and, per variant, first audio p50 at the highest level over the lowest.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections import deque
from typing import TYPE_CHECKING, Any, TypeVar

from engines.base import OPENAI_VOICES, CancelFlag, SynthesisRequest
from engines.chattts import chunk_order, streaming
from engines.chattts.engine import ChatTTSEngine
from engines.chattts.generation import CodeBatch

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    import torch

    from engines.base import CancelToken

__all__ = ["main"]

_Due = TypeVar("_Due")

TEXT = "Request number %d of the first audio benchmark, spoken in one sentence."


class Timeline:
    """Wall time spent per kind of work, as (start, end, kind) spans, and forward passes counted."""

    def __init__(self) -> None:
        self.spans: list[tuple[float, float, str]] = []

    def between(self, start: float, end: float) -> dict[str, float]:
        totals: dict[str, float] = {}
        for begin, finish, kind in self.spans:
            overlap = min(finish, end) - max(begin, start)
            if overlap > 0:
                totals[kind] = totals.get(kind, 0.0) + overlap
        return totals

    def passes(self, start: float, end: float) -> int:
        return sum(1 for begin, _, kind in self.spans if kind in {"step", "prefill"} and start <= begin < end)


def instrument(timeline: Timeline) -> None:
    """Wrap the token loop's pass and the chunk decode so that each records its span."""
    step, decode = CodeBatch.step, streaming.decode_windows

    def timed_step(self: CodeBatch) -> Any:
        kind = "prefill" if self._waiting else "step"  # a benchmark's view inside
        started = time.perf_counter()
        result = step(self)
        timeline.spans.append((started, time.perf_counter(), kind))
        return result

    def timed_decode(chat: Any, windows: list[torch.Tensor], *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        result = decode(chat, windows, *args, **kwargs)
        timeline.spans.append((started, time.perf_counter(), "decode"))
        return result

    CodeBatch.step = timed_step  # type: ignore[method-assign]
    streaming.decode_windows = timed_decode


class ClosedLoop:
    """``clients`` clients, each sending its next request when its previous one ends, ``repeat`` each; client ``k``
    starts ``k * stagger`` forward passes after the first, so that requests arrive at a running batch, spread over
    it (all at once, every request of the same length, they would start and end together, and none would join)."""

    def __init__(self, clients: int, repeat: int, stagger: int) -> None:
        self.pending: deque[int] = deque()
        self.left = dict.fromkeys(range(clients), repeat)
        self.number = 0
        self.arrived: dict[int, float] = {}  # request number -> arrival time
        self.first: dict[int, float] = {}
        self.client_of: dict[int, int] = {}
        self.starts = {client * stagger: client for client in range(clients)}
        self.polls = 0
        self.send(self.starts.pop(0))

    def send(self, client: int) -> None:
        if self.left[client] == 0:
            return
        self.left[client] -= 1
        self.number += 1
        self.client_of[self.number] = client
        self.arrived[self.number] = time.perf_counter()
        self.pending.append(self.number)

    def take(self, limit: int) -> list[int]:
        self.polls += 1
        if (client := self.starts.pop(self.polls, None)) is not None:
            self.send(client)
        taken: list[int] = []
        while self.pending and len(taken) < limit:
            taken.append(self.pending.popleft())
        return taken


def run_level(
    engine: ChatTTSEngine, timeline: Timeline, clients: int, repeat: int, stagger: int
) -> list[tuple[float, dict[str, float], int]]:
    loop = ClosedLoop(clients, repeat, stagger)
    numbers: dict[int, int] = {}  # the running batch's index -> request number
    order = iter(range(0))

    def jobs(numbers_now: list[int]) -> list[tuple[SynthesisRequest, CancelToken]]:
        for number in numbers_now:
            numbers[next(order)] = number
        voice = OPENAI_VOICES[0]
        # Unseeded: a request's own seed would run it apart from the batch (docs/engines.md, "Seeded requests").
        return [(SynthesisRequest(TEXT % n, voice), CancelFlag()) for n in numbers_now]

    def arrivals(limit: int) -> Sequence[tuple[SynthesisRequest, CancelToken]]:
        return jobs(loop.take(limit))

    while loop.pending or loop.starts:
        numbers.clear()
        order = iter(range(10**9))  # each batch numbers its requests from 0
        first = jobs(loop.take(engine._max_batch))
        for index, item in engine.synthesize_batch([r for r, _ in first], [c for _, c in first], arrivals):
            number = numbers[index]
            if item is None:
                loop.send(loop.client_of[number])
            elif number not in loop.first:
                loop.first[number] = time.perf_counter()
    # The first round fills the batch up; the later ones join it running, spread over it (what part 3 is about).
    return [
        (loop.first[n] - loop.arrived[n], timeline.between(loop.arrived[n], loop.first[n]),
         timeline.passes(loop.arrived[n], loop.first[n]))
        for n in sorted(loop.first) if clients == 1 or n > clients
    ]  # fmt: skip


def report(level: str, results: list[tuple[float, dict[str, float], int]]) -> float:
    firsts = [first for first, _, _ in results]
    kinds = ("step", "prefill", "decode")
    shares = {kind: statistics.median(parts.get(kind, 0.0) for _, parts, _ in results) for kind in kinds}
    other = statistics.median(first - sum(parts.values()) for first, parts, _ in results)
    passes = statistics.median(p for _, _, p in results)
    p50 = statistics.median(firsts)
    print(f"| {level} | {len(results)} | {p50 * 1000:.0f} | {max(firsts) * 1000:.0f} | {passes:.0f} | "
          + " | ".join(f"{shares[k] * 1000:.0f}" for k in kinds) + f" | {other * 1000:.0f} |")  # fmt: skip
    return p50


def _one_round(due: Sequence[_Due], _decoder: Callable[[_Due], chunk_order.Started | None]) -> list[list[_Due]]:
    """Every due chunk in one decode round, as before first chunks went first."""
    return [list(due)] if due else []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--assets", required=True)
    parser.add_argument("--concurrency", default="1,8")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--decoder", default="auto")
    parser.add_argument("--weights", default="float32")
    parser.add_argument("--max-batch", default="auto")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--variants", default="held,at-once", help="held (the engine as it is) and/or at-once")
    parser.add_argument("--option", action="append", default=[], help="NAME=VALUE engine option (repeatable)")
    args = parser.parse_args()
    batch = args.max_batch if args.max_batch == "auto" else int(args.max_batch)
    options: dict[str, Any] = {"source": "dir", "path": args.assets, "device": "cpu", "decoder": args.decoder,
                               "weights": args.weights, "max_new_token": args.tokens, "min_new_token": args.tokens,
                               "max_batch": batch}  # fmt: skip
    for option in args.option:
        name, value = option.split("=", 1)
        options[name] = int(value) if value.lstrip("-").isdigit() else value
    engine = ChatTTSEngine(options)
    info = engine.load()
    print(f"max_batch {info.details['max_batch']}; decoder {info.details['decoder']}; load {os.getloadavg()}")
    print(
        "| concurrency | requests | first audio p50 ms | max ms | passes p50 | in decode steps | in prefill passes "
        "| in chunk decodes | other |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    levels = [int(level) for level in args.concurrency.split(",")]
    timeline = Timeline()
    instrument(timeline)
    for _ in engine.synthesize(SynthesisRequest("warm up", OPENAI_VOICES[0]), CancelFlag()):
        pass
    held = ChatTTSEngine.__dict__["_held"]  # the staticmethod itself
    first_first = chunk_order.first_chunks_first
    p50s: dict[tuple[int, str], list[float]] = {}
    for _ in range(args.rounds):  # alternating: the machine's other work drifts
        for level in levels:
            for variant in args.variants.split(","):
                # "held": as the engine runs; "together": one decode round a pass; "at once": nothing held either
                ChatTTSEngine._held = held if variant != "at-once" else staticmethod(lambda _due, _live: [])  # type: ignore[method-assign]
                chunk_order.first_chunks_first = first_first if variant == "held" else _one_round  # type: ignore[assignment]
                p50 = report(
                    f"{level} {variant}", run_level(engine, timeline, level, args.repeat, args.tokens // level)
                )
                p50s.setdefault((level, variant), []).append(p50)
    for variant in args.variants.split(","):
        ratio = statistics.median(p50s[levels[-1], variant]) / statistics.median(p50s[levels[0], variant])
        print(f"{variant}: first audio p50 at {levels[-1]} over {levels[0]}: {ratio:.2f}x")
    print(f"load {os.getloadavg()}")


if __name__ == "__main__":
    main()
