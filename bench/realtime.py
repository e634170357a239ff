"""Realtime WebSocket: ``input.flush`` to the first ``audio.delta``, against the engine's own first chunk.

Registered in ``bench/run.py`` as ``realtime``. Issue #7's target: the median time from a client sending
``input.flush`` to the first ``audio.delta`` of that segment is at most the engine's median time to first chunk plus
20 ms. Each engine is measured three ways in one run, on the same machine, in alternating rounds (the order reversed
every other round, so drift and other load fall on every side alike):

- **gateway**: one session on ``/v1/audio/speech/stream`` (``response_format: pcm``); per round an ``input.append``
  of a fresh sentence without trailing whitespace (the segmenter then waits for the flush), a short pause, then
  ``input.flush``, timed until the segment's first ``audio.delta`` and its ``audio.done``;
- **pool**: an ``EnginePool`` of the same settings in this process, no HTTP or WebSocket: from ``open_stream`` to its
  first PCM chunk, then to its end. It includes the hop to the worker process, as the gateway does: the baseline;
- **in-process** (synthetic engine only: a ChatTTS copy would cost another minute of loading): the engine's
  ``synthesize`` generator called directly, timed to its first chunk.

Engines: the synthetic engine with a fixed ``request_delay_ms`` (its "time to first audio") and a real-time factor,
so that it streams; and ChatTTS on random weights of the real model's dimensions (``--preset full``), one worker,
short fixed-length segments.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from websockets.asyncio.client import ClientConnection, connect

from bench import plots
from bench.servers import GatewayProcess, pinned
from bench.ttfb import PERCENTILES, _cdf, chattts_assets, engine_settings, gateway_config, percentiles
from engines.base import CancelFlag, SynthesisRequest
from engines.pool import EnginePool
from engines.settings import local_engine_settings

if TYPE_CHECKING:
    import argparse
    from collections.abc import Iterator

__all__ = ["markdown", "measure", "plot"]

STREAM = "/v1/audio/speech/stream"
TARGET_MS = 20.0  # issue #7: median flush→first delta ≤ median engine first chunk + 20 ms
SIDES = ("gateway", "pool", "in-process")
VOICE = "alloy"
# Fixed length (36 characters, so every synthetic clip lasts the same) and no trailing whitespace: a full stop
# followed by nothing does not end a sentence for the segmenter, so only the flush releases the segment.
SYNTHETIC_TEXT = "Realtime round %06d is speaking now."
CHATTTS_TEXT = "Round number %d is speaking now."
# Between the append and the flush: the append has been handled by then, as when text trickles in before a flush.
APPEND_SETTLE_S = 0.02


@dataclass(frozen=True, slots=True)
class Timing:
    """One segment: seconds to its first audio and to its end (None: not timed), and its PCM bytes."""

    first_s: float
    end_s: float | None
    size: int


@dataclass
class Series:
    """Every recorded round of one side."""

    first_ms: list[float] = field(default_factory=list)
    end_ms: list[float] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)

    def add(self, timing: Timing) -> None:
        self.first_ms.append(round(timing.first_s * 1000, 3))
        if timing.end_s is not None:
            self.end_ms.append(round(timing.end_s * 1000, 3))
        self.sizes.append(timing.size)

    def summary(self) -> dict[str, Any]:
        return {"rounds": len(self.first_ms), "first_ms": percentiles(self.first_ms),
                "end_ms": percentiles(self.end_ms) if self.end_ms else None,
                "bytes_median": int(np.median(self.sizes)) if self.sizes else None,
                "first_samples_ms": self.first_ms, "end_samples_ms": self.end_ms}  # fmt: skip


# --------------------------------------------------------------------------------------------------------------------
# the three sides


class RealtimeClient:
    """One realtime session speaking pcm with one engine."""

    def __init__(self, socket: ClientConnection, timeout_s: float) -> None:
        self.socket = socket
        self.timeout_s = timeout_s
        self.opening_errors: list[dict[str, Any]] = []
        """Error events before the session was configured (reported, not fatal)."""

    @classmethod
    async def open(cls, url: str, model: str, timeout_s: float) -> RealtimeClient:
        socket = await connect(url, max_size=None)
        client = cls(socket, timeout_s)
        await client.expect("session.created", tolerate_errors=True)
        await client.send({"type": "session.update", "session": {"model": model, "voice": VOICE,
                                                                  "response_format": "pcm"}})  # fmt: skip
        await client.expect("session.updated", tolerate_errors=True)
        return client

    async def send(self, event: dict[str, Any]) -> None:
        await self.socket.send(json.dumps(event))

    async def receive(self, *, tolerate_errors: bool = False) -> dict[str, Any]:
        event: dict[str, Any] = json.loads(await self.socket.recv())
        if event["type"] == "error":
            if not tolerate_errors:
                raise RuntimeError(f"realtime error event: {event}")
            self.opening_errors.append(event)
        return event

    async def expect(self, kind: str, *, tolerate_errors: bool = False) -> dict[str, Any]:
        async with asyncio.timeout(self.timeout_s):
            while (event := await self.receive(tolerate_errors=tolerate_errors))["type"] != kind:
                pass
            return event

    async def speak(self, text: str) -> Timing:
        """Append ``text``, flush, and time the segment's first delta and its done from sending the flush."""
        await self.send({"type": "input.append", "text": text})
        await asyncio.sleep(APPEND_SETTLE_S)
        started = time.perf_counter()
        await self.send({"type": "input.flush"})
        first: float | None = None
        size = 0
        async with asyncio.timeout(self.timeout_s):
            while (event := await self.receive())["type"] != "audio.done":
                if event["type"] == "audio.delta":
                    first = time.perf_counter() - started if first is None else first
                    size += len(base64.b64decode(event["audio"]))
        if first is None or event["status"] != "completed" or event["text"] != text:
            raise RuntimeError(f"segment not spoken as sent: {event}")
        return Timing(first, time.perf_counter() - started, size)

    async def close(self) -> None:
        await self.socket.close()


async def pool_round(pool: EnginePool, text: str) -> Timing:
    """From ``open_stream`` (the worker's acquisition included) to the first PCM chunk, and to the last."""
    started = time.perf_counter()
    first: float | None = None
    size = 0
    async with pool.open_stream(SynthesisRequest(text=text, voice=VOICE)) as pcm:
        async for chunk in pcm:
            first = time.perf_counter() - started if first is None else first
            size += len(chunk)
    if first is None:
        raise RuntimeError("the pool produced no audio")
    return Timing(first, time.perf_counter() - started, size)


def in_process_round(engine: Any, text: str) -> Timing:
    """The engine's generator to its first chunk; the rest is cancelled (it only costs time here)."""
    cancel = CancelFlag()
    started = time.perf_counter()
    chunks = engine.synthesize(SynthesisRequest(text=text, voice=VOICE), cancel)
    try:
        chunk = next(chunks)
        return Timing(time.perf_counter() - started, None, chunk.nbytes)
    finally:
        cancel.set()
        chunks.close()


# --------------------------------------------------------------------------------------------------------------------
# one engine


@dataclass
class Bench:
    """The three sides of one engine, and the texts they speak (every one different)."""

    name: str
    client: RealtimeClient
    pool: EnginePool
    engine: Any | None
    texts: Iterator[str]

    async def side(self, side: str) -> Timing:
        text = next(self.texts)
        if side == "gateway":
            return await self.client.speak(text)
        if side == "pool":
            return await pool_round(self.pool, text)
        return in_process_round(self.engine, text)

    async def rounds(self, count: int) -> dict[str, Series]:
        """One unrecorded round per side (a fresh worker's first request is slower), then ``count`` rounds."""
        sides = [s for s in SIDES if s != "in-process" or self.engine is not None]
        for side in sides:
            await self.side(side)
        series = {side: Series() for side in sides}
        for index in range(count):
            for side in sides if index % 2 == 0 else sides[::-1]:
                series[side].add(await self.side(side))
        return series


def texts_of(template: str) -> Iterator[str]:
    return (template % index for index in itertools.count(1))


async def start_pool(name: str, engine: dict[str, Any], cpus: set[int] | None) -> EnginePool:
    pool = EnginePool(name, local_engine_settings(**engine))
    with pinned(cpus):  # the workers spawn now and keep this affinity
        await pool.start()
    return pool


async def wait_pool(pool: EnginePool, workers: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while (status := pool.status()).ready_workers < workers:
        if status.state == "unavailable" or time.monotonic() > deadline:
            raise RuntimeError(f"pool {pool.name} not ready: {status.state} {status.reason}")
        await asyncio.sleep(0.1)


def cpus_of(server: GatewayProcess, pool: EnginePool) -> dict[str, list[int]]:
    """The CPUs each process may run on, as measured (a check on the pinning)."""
    assert server.process is not None
    pids = {"gateway": server.process.pid, "bench client": os.getpid()}
    pids |= {f"gateway worker {pid}": pid for pid in server.engine(pool.name)["pids"]}
    pids |= {f"pool worker {pid}": pid for pid in pool.status().pids}
    return {name: sorted(os.sched_getaffinity(pid)) for name, pid in pids.items()}


def start_gateway(server: GatewayProcess, name: str, workers: int, cpus: set[int] | None, timeout_s: float) -> None:
    # In its own thread (the pool loads meanwhile): affinity is per thread, and Popen's child takes this one's.
    with pinned(cpus):
        server.start(timeout_s)
    server.wait_engine(name, timeout_s, state="ready", ready_workers=workers)


async def compare(name: str, engine: dict[str, Any], template: str, *, rounds: int, cpus: set[int] | None,
                  start_timeout_s: float, in_process: Any | None) -> dict[str, Any]:  # fmt: skip
    """A gateway and a pool of the same engine settings, both loaded at once, then ``rounds`` alternating rounds."""
    with tempfile.TemporaryDirectory(prefix=f"bench-realtime-{name}-") as tmp:
        server = GatewayProcess(gateway_config(name, engine), Path(tmp))
        pool = await start_pool(name, engine, cpus)
        try:
            await asyncio.to_thread(start_gateway, server, name, engine["workers"], cpus, start_timeout_s)
            await wait_pool(pool, engine["workers"], start_timeout_s)
            affinity = cpus_of(server, pool)
            url = server.base_url.replace("http://", "ws://") + STREAM
            client = await RealtimeClient.open(url, name, timeout_s=max(60.0, start_timeout_s / 4))
            try:
                load_before = os.getloadavg()[0]
                series = await Bench(name, client, pool, in_process, texts_of(template)).rounds(rounds)
                opening_errors = client.opening_errors
            finally:
                await client.close()
        finally:
            await pool.stop()
            if server.process is not None:
                server.stop()
    return {"engine": name, "kind": engine["kind"], "settings": engine, "text": template, "rounds": rounds,
            "pinned": cpus is not None, "affinity": affinity, "load_before": load_before,
            "load_after": os.getloadavg()[0], "sides": {side: s.summary() for side, s in series.items()},
            "opening_errors": [event["error"] for event in opening_errors]}  # fmt: skip


def synthetic(args: argparse.Namespace) -> dict[str, Any]:
    from engines.synthetic import SyntheticEngine

    options = {"seconds_per_char": 0.02, "rtf": args.realtime_rtf, "chunk_ms": 100,
               "request_delay_ms": args.realtime_delay_ms}  # fmt: skip
    engine = engine_settings("synthetic", 1, options, queue_timeout_s=60)
    local = SyntheticEngine(options)
    local.load()
    print(f"  synthetic: request_delay_ms {args.realtime_delay_ms:g}, rtf {args.realtime_rtf:g}, "
          f"{args.realtime_rounds} rounds", flush=True)  # fmt: skip
    # The client (and the pool's server side) on CPU 0, as in the other benchmarks. Only here: a ChatTTS worker
    # started from a pinned thread would inherit the pin.
    with pinned({0} if args.pin else None):
        return asyncio.run(compare("tones", engine, SYNTHETIC_TEXT, rounds=args.realtime_rounds,
                                   cpus={1} if args.pin else None, start_timeout_s=60, in_process=local))  # fmt: skip


def chattts(args: argparse.Namespace) -> dict[str, Any]:
    assets = chattts_assets(args.chattts_assets)
    tokens, first = args.realtime_chattts_tokens, args.realtime_chattts_first_tokens
    options = {"source": "dir", "path": str(assets), "max_new_token": tokens, "min_new_token": tokens,
               "stream_first_tokens": first, "threads": args.realtime_chattts_threads}  # fmt: skip
    engine = engine_settings("chattts", 1, options, queue_timeout_s=900, start_timeout_s=900, stall_timeout_s=600)
    print(f"  chattts: 1 worker x {options['threads']} threads, {tokens} tokens per segment, first chunk after "
          f"{first}, {args.realtime_chattts_rounds} rounds", flush=True)  # fmt: skip
    # Not pinned: ChatTTS needs every core. Gateway and pool load at once; only one side speaks at a time.
    result = asyncio.run(compare("chattts", engine, CHATTTS_TEXT, rounds=args.realtime_chattts_rounds, cpus=None,
                                 start_timeout_s=900, in_process=None))  # fmt: skip
    return result | {"tokens": tokens, "first_tokens": first, "audio_s": tokens * 256 / 12000}


def measure(args: argparse.Namespace) -> dict[str, Any]:
    engines = {"synthetic": synthetic(args)}
    if args.chattts:
        engines["chattts"] = chattts(args)
    return {"engines": engines, "target_ms": TARGET_MS}


# --------------------------------------------------------------------------------------------------------------------
# report


def added_ms(engine: dict[str, Any], baseline: str) -> float:
    sides = engine["sides"]
    return float(sides["gateway"]["first_ms"]["p50"] - sides[baseline]["first_ms"]["p50"])


def paired_ms(engine: dict[str, Any], baseline: str) -> float:
    """The median over rounds of gateway minus ``baseline`` in the same round: what drift between rounds leaves."""
    sides = engine["sides"]
    pairs = zip(sides["gateway"]["first_samples_ms"], sides[baseline]["first_samples_ms"], strict=True)
    return float(np.median([gateway - other for gateway, other in pairs]))


def describe(name: str, engine: dict[str, Any]) -> str:
    options = engine["settings"]["options"]
    if engine["kind"] == "synthetic":
        audio = len(engine["text"] % 1) * options["seconds_per_char"]
        return (
            f"{name}: engine `tones`, 1 worker, `request_delay_ms: {options['request_delay_ms']:g}`, "
            f"`rtf: {options['rtf']:g}`, `chunk_ms: {options['chunk_ms']}` (first chunk due after "
            f"{options['request_delay_ms'] + options['rtf'] * options['chunk_ms']:g} ms), {audio:g} s of audio "
            f"per segment; {'gateway and workers on CPU 1, client on CPU 0' if engine['pinned'] else 'not pinned'}"
        )
    threads = f"{options['threads']} torch thread{'s' if options['threads'] != 1 else ''}"
    return (f"{name}: engine `chattts` on full-size random weights, 1 worker x {threads}, "
            f"{engine['tokens']} audio tokens ({engine['audio_s']:.2f} s) per segment, first chunk after "
            f"{engine['first_tokens']} tokens, not pinned")  # fmt: skip


def allowed(affinity: dict[str, list[int]]) -> str:
    """``name {0,1}`` per process, workers of one side folded together."""
    folded: dict[str, set[int]] = {}
    for name, cpus in affinity.items():
        folded.setdefault(name.split(" worker ")[0] + (" workers" if " worker " in name else ""), set()).update(cpus)
    return ", ".join(f"{name} {sorted(cpus)}" for name, cpus in folded.items())


def _ms(figures: dict[str, float | None] | None) -> str:
    if figures is None:
        return "-"
    return " / ".join("-" if figures[f"p{p}"] is None else f"{figures[f'p{p}']:.1f}" for p in PERCENTILES)


def markdown(report: dict[str, Any]) -> str:
    engines = report["engines"]
    lines = [
        "Gateway: flush sent → first `audio.delta` of the segment, and → its `audio.done`. Pool: `open_stream` → "
        "first PCM chunk, and → end of stream. In-process: `synthesize` → first chunk. One unrecorded round per "
        "side first; rounds alternate between the sides. With n rounds, p99 is close to the slowest.\n"
    ]
    lines += [f"- {describe(name, engine)}; 1-minute load average {engine['load_before']:.2f} → "
              f"{engine['load_after']:.2f}; CPUs allowed: {allowed(engine['affinity'])}." for name, engine in
              engines.items()]  # fmt: skip
    lines += [f"- {name}: the session's opening sent an error event before the `session.update`: "
              f"`{error['code']}` ({error['message']})" for name, engine in engines.items()
              for error in engine["opening_errors"]]  # fmt: skip
    lines += ["", "| engine | side | rounds | first audio p50 / p90 / p99 ms | segment end p50 / p90 / p99 ms "
              "| PCM bytes (median) |", "|---|---|---|---|---|---|"]  # fmt: skip
    for name, engine in engines.items():
        for side, row in engine["sides"].items():
            size = "-" if side == "in-process" else row["bytes_median"]
            lines.append(f"| {name} | {side} | {row['rounds']} | {_ms(row['first_ms'])} | {_ms(row['end_ms'])} "
                         f"| {size} |")  # fmt: skip
    lines += ["", "| target | engine | added median latency | median per-round difference | holds |",
              "|---|---|---|---|---|"]  # fmt: skip
    for name, engine in engines.items():
        added, paired = added_ms(engine, "pool"), paired_ms(engine, "pool")
        lines.append(
            f"| median flush → first delta ≤ median pool first chunk + {report['target_ms']:g} ms | {name} "
            f"| {added:+.1f} ms | {paired:+.1f} ms | {'yes' if added <= report['target_ms'] else 'no'} |"
        )
        if "in-process" in engine["sides"]:
            lines.append(f"| (against the engine in-process, no worker hop) | {name} "
                         f"| {added_ms(engine, 'in-process'):+.1f} ms "
                         f"| {paired_ms(engine, 'in-process'):+.1f} ms | - |")  # fmt: skip
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib.pyplot as plt  # backend set by bench.plots

    engines = report["engines"]
    colors = {"gateway": "#d62728", "pool": "#1f77b4", "in-process": "#2ca02c"}
    labels = {"gateway": "gateway: flush → first delta", "pool": "pool: open_stream → first chunk",
              "in-process": "in-process: synthesize → first chunk"}  # fmt: skip
    fig, axes = plt.subplots(1, len(engines), figsize=(5.5 * len(engines), 4.2), squeeze=False)
    for axis, (name, engine) in zip(axes[0], engines.items(), strict=True):
        for side, row in engine["sides"].items():
            _cdf(axis, row["first_samples_ms"], colors[side], "-", labels[side])
        target = engine["sides"]["pool"]["first_ms"]["p50"] + report["target_ms"]
        axis.axvline(target, color="grey", linestyle=":", label=f"target: pool median + {report['target_ms']:g} ms")
        axis.set_ylim(0, 1.02)
        axis.set_xlabel("ms to first audio")
        axis.set_ylabel("share of segments (cumulative)")
        added = added_ms(engine, "pool")
        axis.set_title(f"{name}: gateway adds {added:+.1f} ms at the median", fontsize=10)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8, loc="lower right")
    plots.save(fig, f"Realtime: time to first audio\n{plots.subtitle(report)}", path)
