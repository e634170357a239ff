"""OpenAI's Realtime API against the speech endpoint: ``response.create`` to the first ``response.output_audio.delta``
on ``/v1/realtime``, against ``POST /v1/audio/speech``'s time to first byte.

Registered in ``bench/run.py`` as ``openai-realtime``. The target: for the same engine and text, the median time from
sending ``response.create`` to the response's first ``response.output_audio.delta`` is at most the median time to
first byte of the HTTP endpoint (``pcm``, streamed) plus 20 ms, so that a caller moving from ``/v1/audio/speech`` to
the Realtime API hears its first audio as soon as before. One gateway serves every engine; one client process
measures both sides against it, in rounds:

- **realtime**: one session per engine, opened and set up before the rounds (``session.update``: the voice,
  ``audio/pcm`` at 24 kHz); per round an out-of-band ``response.create`` (``conversation: none``, the text as its
  user message), timed from sending it to the first ``response.output_audio.delta``, and to ``response.done``;
- **http**: one kept-alive connection; per round ``POST /v1/audio/speech`` with the same text and voice,
  ``response_format: pcm``, timed from sending it to the first body byte, and to the body's end (``bench.ttfb``'s
  measurement).

Every round speaks a fresh sentence of fixed length on both sides, the order reversed every other round (drift and
other load fall on both alike), after one unrecorded round per side; the cache is off, so every round synthesizes.
Engines: the synthetic engine with a fixed time to first audio (the ``realtime`` benchmark's settings), espeak (what
``make serve`` speaks with), and ChatTTS on the tiny random-weight assets (generated into ``--openai-chattts-assets``
when missing; never the full-size ones): its first chunk comes after ``stream_first_tokens`` as the real model's
does, at a fraction of its compute.
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

import httpx
import numpy as np
from websockets.asyncio.client import ClientConnection, connect

from bench import plots
from bench.servers import GatewayProcess, pinned
from bench.ttfb import _cdf, engine_settings, timed
from engines.chattts.assets import generate_assets

if TYPE_CHECKING:
    import argparse
    from collections.abc import Iterator

__all__ = ["markdown", "measure", "plot"]

REALTIME = "/v1/realtime"
SPEECH = "/v1/audio/speech"
TARGET_MS = 20.0  # median response.create → first delta ≤ median HTTP time to first byte + 20 ms
SIDES = ("realtime", "http")
PERCENTILES = (50, 95, 99)
VOICE = "alloy"
PCM_FORMAT = {"type": "audio/pcm", "rate": 24000}
# Fixed length (38 characters), so that every round's clip lasts the same on every engine but ChatTTS (whose length
# min_new_token fixes).
TEXT = "Realtime round %06d is speaking now."
DEFAULT_TINY_ASSETS = Path(tempfile.gettempdir()) / "chattts-tiny-bench"  # bench/warm_workers.py's default too


@dataclass(frozen=True, slots=True)
class Timing:
    """One round of one side: seconds to the first audio and to the end, and the PCM bytes received."""

    first_s: float
    end_s: float
    size: int


@dataclass
class Series:
    """Every recorded round of one side."""

    first_ms: list[float] = field(default_factory=list)
    end_ms: list[float] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)

    def add(self, timing: Timing) -> None:
        self.first_ms.append(round(timing.first_s * 1000, 3))
        self.end_ms.append(round(timing.end_s * 1000, 3))
        self.sizes.append(timing.size)

    def summary(self) -> dict[str, Any]:
        return {"rounds": len(self.first_ms), "first_ms": percentiles(self.first_ms),
                "end_ms": percentiles(self.end_ms), "bytes_median": int(np.median(self.sizes)),
                "first_samples_ms": self.first_ms, "end_samples_ms": self.end_ms}  # fmt: skip


def percentiles(values_ms: list[float]) -> dict[str, float]:
    return {f"p{p}": round(float(np.percentile(values_ms, p)), 2) for p in PERCENTILES}


# --------------------------------------------------------------------------------------------------------------------
# the two sides


class RealtimeSession:
    """One ``/v1/realtime`` session speaking out-of-band responses as 24 kHz PCM, as a migrated speech caller does."""

    def __init__(self, socket: ClientConnection, timeout_s: float) -> None:
        self.socket = socket
        self.timeout_s = timeout_s

    @classmethod
    async def open(cls, url: str, timeout_s: float) -> RealtimeSession:
        session = cls(await connect(url, max_size=None), timeout_s)
        await session.expect("session.created")
        output = {"format": PCM_FORMAT, "voice": VOICE}
        await session.send({"type": "session.update", "session": {"type": "realtime", "audio": {"output": output}}})
        await session.expect("session.updated")
        return session

    async def send(self, event: dict[str, Any]) -> None:
        await self.socket.send(json.dumps(event))

    async def receive(self) -> dict[str, Any]:
        event: dict[str, Any] = json.loads(await self.socket.recv())
        if event["type"] == "error":
            raise RuntimeError(f"realtime error event: {event['error']}")
        return event

    async def expect(self, kind: str) -> dict[str, Any]:
        async with asyncio.timeout(self.timeout_s):
            while (event := await self.receive())["type"] != kind:
                pass
            return event

    async def speak(self, text: str) -> Timing:
        """One out-of-band response speaking ``text``, timed from sending ``response.create``."""
        message = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
        started = time.perf_counter()
        await self.send({"type": "response.create", "response": {"conversation": "none", "input": [message]}})
        first: float | None = None
        size = 0
        async with asyncio.timeout(self.timeout_s):
            while (event := await self.receive())["type"] != "response.done":
                if event["type"] == "response.output_audio.delta":
                    first = time.perf_counter() - started if first is None else first
                    size += len(base64.b64decode(event["delta"]))
        ended = time.perf_counter() - started
        response = event["response"]
        said = response["output"][0]["content"][0]["transcript"] if response["output"] else None
        if first is None or response["status"] != "completed" or said != text:
            raise RuntimeError(f"response not spoken as sent: {response}")
        return Timing(first, ended, size)

    async def close(self) -> None:
        await self.socket.close()


async def http_round(client: httpx.AsyncClient, url: str, model: str, text: str) -> Timing:
    body = json.dumps({"model": model, "input": text, "voice": VOICE, "response_format": "pcm"}).encode()
    sample = await timed(client, url, body)
    if sample.status != 200 or sample.first_byte_s is None:
        raise RuntimeError(f"{SPEECH} answered {sample.status}")
    return Timing(sample.first_byte_s, sample.total_s, sample.size)


# --------------------------------------------------------------------------------------------------------------------
# one engine, then all of them against one gateway


@dataclass
class Bench:
    """Both sides for one engine, speaking the same text in each round."""

    model: str
    session: RealtimeSession
    http: httpx.AsyncClient
    speech_url: str
    texts: Iterator[str] = field(default_factory=lambda: (TEXT % index for index in itertools.count(1)))

    async def side(self, side: str, text: str) -> Timing:
        if side == "realtime":
            return await self.session.speak(text)
        return await http_round(self.http, self.speech_url, self.model, text)

    async def rounds(self, count: int) -> dict[str, Series]:
        """One unrecorded round per side (a fresh worker's first request is slower), then ``count`` rounds."""
        for side in SIDES:
            await self.side(side, next(self.texts))
        series = {side: Series() for side in SIDES}
        for index in range(count):
            text = next(self.texts)
            for side in SIDES if index % 2 == 0 else SIDES[::-1]:
                series[side].add(await self.side(side, text))
        return series


async def compare(server: GatewayProcess, rounds: dict[str, int], timeout_s: float) -> dict[str, dict[str, Any]]:
    """Every engine in turn, both sides interleaved, on one kept-alive HTTP connection and one session per engine."""
    ws_base = server.base_url.replace("http://", "ws://") + REALTIME
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    results: dict[str, dict[str, Any]] = {}
    async with httpx.AsyncClient(limits=limits, timeout=timeout_s) as http:
        for name, count in rounds.items():
            print(f"  {name}: {count} rounds per side", flush=True)
            session = await RealtimeSession.open(f"{ws_base}?model={name}", timeout_s)
            load_before = os.getloadavg()[0]
            try:
                series = await Bench(name, session, http, server.base_url + SPEECH).rounds(count)
            finally:
                await session.close()
            results[name] = {"load_before": load_before, "load_after": os.getloadavg()[0],
                             "sides": {side: s.summary() for side, s in series.items()}}  # fmt: skip
    return results


def engines_of(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    synthetic = {"seconds_per_char": 0.02, "rtf": args.realtime_rtf, "chunk_ms": 100,
                 "request_delay_ms": args.realtime_delay_ms}  # fmt: skip
    engines = {"tones": engine_settings("synthetic", 1, synthetic, queue_timeout_s=60),
               "espeak": engine_settings("espeak", 1, {}, queue_timeout_s=60)}  # fmt: skip
    if args.chattts:
        tokens = args.realtime_chattts_tokens
        options = {"source": "dir", "path": str(tiny_assets(args.openai_chattts_assets)), "max_new_token": tokens,
                   "min_new_token": tokens, "stream_first_tokens": args.realtime_chattts_first_tokens,
                   "threads": args.realtime_chattts_threads}  # fmt: skip
        engines["chattts"] = engine_settings("chattts", 1, options, queue_timeout_s=300, start_timeout_s=300)
    return engines


def tiny_assets(path: Path) -> Path:
    """``path`` with the tiny random-weight ChatTTS assets, generated there when missing (a few seconds)."""
    if not (path / "asset").exists():
        print(f"  generating tiny ChatTTS assets into {path}", flush=True)
        generate_assets(path, "tiny", seed=0)
    return path


def measure(args: argparse.Namespace) -> dict[str, Any]:
    engines = engines_of(args)
    rounds = dict.fromkeys(engines, args.openai_rounds)
    config = {"engines": engines, "aliases": {}, "cache": {"enabled": False}, "server": {"playground": False}}
    with tempfile.TemporaryDirectory(prefix="bench-openai-realtime-") as tmp:
        server = GatewayProcess(config, Path(tmp))
        try:
            with pinned({1} if args.pin else None):  # the gateway and its workers keep this affinity
                server.start(300)
                for name, engine in engines.items():
                    server.wait_engine(name, 300, state="ready", ready_workers=engine["workers"])
            affinity = cpus_of(server, engines)
            with pinned({0} if args.pin else None):
                results = asyncio.run(compare(server, rounds, timeout_s=120))
        finally:
            if server.process is not None:
                server.stop()
    for name, result in results.items():
        result |= {"kind": engines[name]["kind"], "settings": engines[name]}
    return {"engines": results, "target_ms": TARGET_MS, "text": TEXT, "voice": VOICE, "affinity": affinity}


def cpus_of(server: GatewayProcess, engines: dict[str, Any]) -> dict[str, list[int]]:
    """The CPUs each process may run on, as measured (a check on the pinning)."""
    assert server.process is not None
    pids = {"gateway": server.process.pid}
    pids |= {f"{name} worker": pid for name in engines for pid in server.engine(name)["pids"]}
    return {name: sorted(os.sched_getaffinity(pid)) for name, pid in pids.items()}


# --------------------------------------------------------------------------------------------------------------------
# report


def difference_ms(engine: dict[str, Any], percentile: int) -> float:
    """Realtime minus HTTP at one percentile of each side."""
    sides = engine["sides"]
    return float(sides["realtime"]["first_ms"][f"p{percentile}"] - sides["http"]["first_ms"][f"p{percentile}"])


def paired_ms(engine: dict[str, Any]) -> float:
    """The median over rounds of realtime minus HTTP in the same round: what drift between rounds leaves out."""
    sides = engine["sides"]
    pairs = zip(sides["realtime"]["first_samples_ms"], sides["http"]["first_samples_ms"], strict=True)
    return float(np.median([realtime - http for realtime, http in pairs]))


def holds(engine: dict[str, Any], target_ms: float) -> bool:
    return difference_ms(engine, 50) <= target_ms


def describe(name: str, engine: dict[str, Any]) -> str:
    options, chars = engine["settings"]["options"], len(TEXT % 1)
    if engine["kind"] == "synthetic":
        return (f"{name}: synthetic, `request_delay_ms: {options['request_delay_ms']:g}`, "
                f"`rtf: {options['rtf']:g}`, `chunk_ms: {options['chunk_ms']}`, "
                f"{chars * options['seconds_per_char']:g} s of audio")  # fmt: skip
    if engine["kind"] == "chattts":
        return (f"{name}: ChatTTS on the tiny random-weight assets, {options['threads']} torch thread(s), "
                f"{options['max_new_token']} audio tokens, first chunk after "
                f"{options['stream_first_tokens']}")  # fmt: skip
    return f"{name}: espeak-ng, a {chars}-character sentence"


def _ms(figures: dict[str, float]) -> str:
    return " / ".join(f"{figures[f'p{p}']:.1f}" for p in PERCENTILES)


def markdown(report: dict[str, Any]) -> str:
    engines, target = report["engines"], report["target_ms"]
    lines = [
        "Realtime: `response.create` sent → first `response.output_audio.delta`, and → `response.done`. HTTP: "
        "`POST /v1/audio/speech` (pcm) sent → first body byte, and → end of body. One gateway, one client process; "
        "each round speaks the same new sentence on both sides, in alternating order, after one unrecorded round per "
        f"side. CPUs allowed: {', '.join(f'{n} {c}' for n, c in report['affinity'].items())}.\n"
    ]
    lines += [f"- {describe(name, engine)}; 1-minute load average {engine['load_before']:.2f} → "
              f"{engine['load_after']:.2f}." for name, engine in engines.items()]  # fmt: skip
    lines += ["", "| engine | side | rounds | first audio p50 / p95 / p99 ms | end p50 / p95 / p99 ms "
              "| PCM bytes (median) |", "|---|---|---|---|---|---|"]  # fmt: skip
    for name, engine in engines.items():
        for side, row in engine["sides"].items():
            lines.append(f"| {name} | {side} | {row['rounds']} | {_ms(row['first_ms'])} | {_ms(row['end_ms'])} "
                         f"| {row['bytes_median']} |")  # fmt: skip
    lines += ["", "| engine | realtime - HTTP, p50 | p95 | median per-round difference | realtime / HTTP, p50 "
              f"| median ≤ HTTP median + {target:g} ms |", "|---|---|---|---|---|---|"]  # fmt: skip
    for name, engine in engines.items():
        ratio = engine["sides"]["realtime"]["first_ms"]["p50"] / engine["sides"]["http"]["first_ms"]["p50"]
        verdict = "yes" if holds(engine, target) else "no"
        lines.append(f"| {name} | {difference_ms(engine, 50):+.1f} ms | {difference_ms(engine, 95):+.1f} ms "
                     f"| {paired_ms(engine):+.1f} ms | {ratio:.2f}x | {verdict} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib.pyplot as plt  # backend set by bench.plots

    engines = report["engines"]
    colors = {"realtime": "#d62728", "http": "#1f77b4"}
    labels = {"realtime": "/v1/realtime: response.create → first delta", "http": "/v1/audio/speech: first byte"}
    fig, axes = plt.subplots(1, len(engines), figsize=(5.2 * len(engines), 4.2), squeeze=False)
    for axis, (name, engine) in zip(axes[0], engines.items(), strict=True):
        for side, row in engine["sides"].items():
            _cdf(axis, row["first_samples_ms"], colors[side], "-", labels[side])
        target = engine["sides"]["http"]["first_ms"]["p50"] + report["target_ms"]
        axis.axvline(target, color="grey", linestyle=":", label=f"target: HTTP median + {report['target_ms']:g} ms")
        axis.set_ylim(0, 1.02)
        axis.set_xlabel("ms to first audio")
        axis.set_ylabel("share of rounds (cumulative)")
        axis.set_title(f"{name}: realtime {difference_ms(engine, 50):+.1f} ms at the median", fontsize=10)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8, loc="lower right")
    plots.save(fig, f"OpenAI Realtime against HTTP: time to first audio\n{plots.subtitle(report)}", path)
