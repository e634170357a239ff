"""ElevenLabs' text-to-speech WebSockets against its HTTP stream: time to first audio on one gateway.

Registered in ``bench/run.py`` as ``elevenlabs-ws`` (run only when named). Issue #34's target: for the same engine
and text, the median time to first audio on the WebSocket is at most the median time to first byte of ElevenLabs'
HTTP stream (``POST /v1/text-to-speech/{voice_id}/stream``, ``pcm_24000``) plus 20 ms, so that a voice stack that
speaks ElevenLabs over a socket (Pipecat's ``ElevenLabsTTSService``, LiveKit's ``elevenlabs.TTS``) hears its first
audio as soon as one that posts each sentence. One gateway serves every engine; one client process measures three
sides against it, in rounds:

- **multi-stream-input**: one socket per engine, opened before the rounds, as a voice stack keeps one for its session;
  per round a context opened with ``{"text": " ", "context_id"}`` (as Pipecat opens one at the start of a turn), then
  timed from sending ``{"text", "context_id", "flush": true}`` (and, at once, ``close_context``, as Pipecat ends a
  turn) to the context's first audio message, and to its ``isFinal``;
- **stream-input**: per round a socket opened and initialised (``{"text": " "}``) before the clock starts, then timed
  from sending ``{"text", "flush": true}`` to the first audio message, and, after ``{"text": ""}``, to ``isFinal``;
- **http**: one kept-alive connection; per round ``POST …/stream?output_format=pcm_24000`` with the same text, timed
  from sending it to the first body byte, and to the body's end (``bench.ttfb``'s measurement).

Every round speaks a fresh sentence of fixed length on every side, the order rotated each round (drift and other load
fall on every side alike), after one unrecorded round per side; the cache is off. The engines are the
``openai-realtime`` benchmark's (and take its options): the synthetic engine with a fixed time to first audio,
espeak, and ChatTTS on the tiny random-weight assets.
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
from bench.openai_realtime import PERCENTILES, TEXT, Series, Timing, cpus_of, describe, engines_of
from bench.servers import GatewayProcess, pinned
from bench.ttfb import _cdf, timed

if TYPE_CHECKING:
    import argparse
    from collections.abc import Iterator

__all__ = ["markdown", "measure", "plot"]

TARGET_MS = 20.0  # issue #34: median WebSocket first audio ≤ median HTTP stream first byte + 20 ms
SIDES = ("multi-stream-input", "stream-input", "http")
SOCKETS = SIDES[:2]
VOICE = "alloy"
OUTPUT_FORMAT = "pcm_24000"


class MultiStreamSocket:
    """One ``multi-stream-input`` socket, a context per round, as a voice stack speaks its turns."""

    def __init__(self, socket: ClientConnection, timeout_s: float) -> None:
        self.socket = socket
        self.timeout_s = timeout_s
        self.contexts = (f"turn-{index}" for index in itertools.count(1))

    async def speak(self, text: str) -> Timing:
        context = next(self.contexts)
        await _send(self.socket, text=" ", context_id=context)
        started = time.perf_counter()
        await _send(self.socket, text=text, context_id=context, flush=True)
        await _send(self.socket, context_id=context, close_context=True)
        return await _until_final(self.socket, text, started, self.timeout_s, context)


async def stream_input_round(url: str, text: str, timeout_s: float) -> Timing:
    """A ``stream-input`` socket, opened and initialised before the clock starts."""
    async with connect(url, max_size=None) as socket:
        await _send(socket, text=" ")
        started = time.perf_counter()
        await _send(socket, text=text, flush=True)
        await _send(socket, text="")
        return await _until_final(socket, text, started, timeout_s, None)


async def _send(socket: ClientConnection, **message: Any) -> None:
    await socket.send(json.dumps(message))


async def _until_final(
    socket: ClientConnection, text: str, started: float, timeout_s: float, context: str | None
) -> Timing:
    """Read the context's messages (``None``: a ``stream-input`` socket's, which name none) up to its ``isFinal``."""
    first: float | None = None
    size = 0
    chars: list[str] = []
    async with asyncio.timeout(timeout_s):
        while True:
            message = json.loads(await socket.recv())
            if "error" in message:
                raise RuntimeError(f"error message: {message}")
            if message.get("contextId") != context:
                continue
            if message.get("isFinal") is True:
                break
            if audio := base64.b64decode(message.get("audio") or ""):
                first = time.perf_counter() - started if first is None else first
                size += len(audio)
            chars += (message.get("alignment") or {}).get("chars", [])
    if first is None or "".join(chars).split() != text.split():  # each piece's alignment ends with a space
        raise RuntimeError(f"not spoken as sent: {''.join(chars)!r}")
    return Timing(first, time.perf_counter() - started, size)


async def http_round(client: httpx.AsyncClient, url: str, model: str, text: str) -> Timing:
    sample = await timed(client, url, json.dumps({"text": text, "model_id": model}).encode())
    if sample.status != 200 or sample.first_byte_s is None:
        raise RuntimeError(f"the HTTP stream answered {sample.status}")
    return Timing(sample.first_byte_s, sample.total_s, sample.size)


# --------------------------------------------------------------------------------------------------------------------
# one engine, then all of them against one gateway


@dataclass
class Bench:
    """Every side for one engine, speaking the same text in each round."""

    model: str
    multi: MultiStreamSocket
    stream_input_url: str
    http: httpx.AsyncClient
    http_url: str
    timeout_s: float
    texts: Iterator[str] = field(default_factory=lambda: (TEXT % index for index in itertools.count(1)))
    """The ``openai-realtime`` benchmark's sentences: fixed length, so every clip lasts the same but ChatTTS's."""

    async def side(self, side: str, text: str) -> Timing:
        if side == "multi-stream-input":
            return await self.multi.speak(text)
        if side == "stream-input":
            return await stream_input_round(self.stream_input_url, text, self.timeout_s)
        return await http_round(self.http, self.http_url, self.model, text)

    async def rounds(self, count: int) -> dict[str, Series]:
        """One unrecorded round per side (a fresh worker's first request is slower), then ``count`` rounds."""
        for side in SIDES:
            await self.side(side, next(self.texts))
        series = {side: Series() for side in SIDES}
        for index in range(count):
            text = next(self.texts)
            shift = index % len(SIDES)
            for side in SIDES[shift:] + SIDES[:shift]:
                series[side].add(await self.side(side, text))
        return series


async def compare(server: GatewayProcess, rounds: dict[str, int], timeout_s: float) -> dict[str, dict[str, Any]]:
    """Every engine in turn, every side interleaved."""
    ws_base = server.base_url.replace("http://", "ws://") + f"/v1/text-to-speech/{VOICE}"
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    results: dict[str, dict[str, Any]] = {}
    async with httpx.AsyncClient(limits=limits, timeout=timeout_s) as http:
        for name, count in rounds.items():
            print(f"  {name}: {count} rounds per side", flush=True)
            query = f"model_id={name}&output_format={OUTPUT_FORMAT}"
            http_url = f"{server.base_url}/v1/text-to-speech/{VOICE}/stream?output_format={OUTPUT_FORMAT}"
            load_before = os.getloadavg()[0]
            async with connect(f"{ws_base}/multi-stream-input?{query}", max_size=None) as socket:
                bench = Bench(name, MultiStreamSocket(socket, timeout_s), f"{ws_base}/stream-input?{query}", http,
                              http_url, timeout_s)  # fmt: skip
                series = await bench.rounds(count)
            results[name] = {"load_before": load_before, "load_after": os.getloadavg()[0],
                             "sides": {side: s.summary() for side, s in series.items()}}  # fmt: skip
    return results


def measure(args: argparse.Namespace) -> dict[str, Any]:
    engines = engines_of(args)
    rounds = dict.fromkeys(engines, args.elevenlabs_rounds)
    config = {"engines": engines, "aliases": {}, "cache": {"enabled": False}, "server": {"playground": False}}
    with tempfile.TemporaryDirectory(prefix="bench-elevenlabs-ws-") as tmp:
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


# --------------------------------------------------------------------------------------------------------------------
# report


def difference_ms(engine: dict[str, Any], side: str, percentile: int) -> float:
    """A socket side minus HTTP at one percentile of each."""
    sides = engine["sides"]
    return float(sides[side]["first_ms"][f"p{percentile}"] - sides["http"]["first_ms"][f"p{percentile}"])


def paired_ms(engine: dict[str, Any], side: str) -> float:
    """The median over rounds of a socket side minus HTTP in the same round: what drift between rounds leaves out."""
    sides = engine["sides"]
    pairs = zip(sides[side]["first_samples_ms"], sides["http"]["first_samples_ms"], strict=True)
    return float(np.median([socket - http for socket, http in pairs]))


def _ms(figures: dict[str, float]) -> str:
    return " / ".join(f"{figures[f'p{p}']:.1f}" for p in PERCENTILES)


def markdown(report: dict[str, Any]) -> str:
    engines, target = report["engines"], report["target_ms"]
    lines = [
        "multi-stream-input: `{text, context_id, flush}` sent → the context's first audio message, and → `isFinal`. "
        "stream-input: `{text, flush}` sent on a socket opened and initialised before → first audio message, and → "
        "`isFinal`. HTTP: `POST /v1/text-to-speech/{voice_id}/stream` (pcm_24000) sent → first body byte, and → end "
        "of body. One gateway, one client process; each round speaks the same new sentence on every side, in rotating "
        "order, after one unrecorded round per side. CPUs allowed: "
        f"{', '.join(f'{n} {c}' for n, c in report['affinity'].items())}.\n"
    ]
    lines += [f"- {describe(name, engine)}; 1-minute load average {engine['load_before']:.2f} → "
              f"{engine['load_after']:.2f}." for name, engine in engines.items()]  # fmt: skip
    lines += ["", "| engine | side | rounds | first audio p50 / p95 / p99 ms | end p50 / p95 / p99 ms "
              "| PCM bytes (median) |", "|---|---|---|---|---|---|"]  # fmt: skip
    for name, engine in engines.items():
        for side, row in engine["sides"].items():
            lines.append(f"| {name} | {side} | {row['rounds']} | {_ms(row['first_ms'])} | {_ms(row['end_ms'])} "
                         f"| {row['bytes_median']} |")  # fmt: skip
    lines += ["", "| engine | socket | socket - HTTP, p50 | p95 | median per-round difference | socket / HTTP, p50 "
              f"| median ≤ HTTP median + {target:g} ms |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for name, engine in engines.items():
        for side in SOCKETS:
            ratio = engine["sides"][side]["first_ms"]["p50"] / engine["sides"]["http"]["first_ms"]["p50"]
            verdict = "yes" if difference_ms(engine, side, 50) <= target else "no"
            lines.append(f"| {name} | {side} | {difference_ms(engine, side, 50):+.1f} ms "
                         f"| {difference_ms(engine, side, 95):+.1f} ms | {paired_ms(engine, side):+.1f} ms "
                         f"| {ratio:.2f}x | {verdict} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib.pyplot as plt  # backend set by bench.plots

    engines = report["engines"]
    colors = {"multi-stream-input": "#d62728", "stream-input": "#ff7f0e", "http": "#1f77b4"}
    labels = {"multi-stream-input": "multi-stream-input: flush → first audio",
              "stream-input": "stream-input: flush → first audio", "http": "HTTP …/stream: first byte"}  # fmt: skip
    fig, axes = plt.subplots(1, len(engines), figsize=(5.2 * len(engines), 4.2), squeeze=False)
    for axis, (name, engine) in zip(axes[0], engines.items(), strict=True):
        for side, row in engine["sides"].items():
            _cdf(axis, row["first_samples_ms"], colors[side], "-", labels[side])
        target = engine["sides"]["http"]["first_ms"]["p50"] + report["target_ms"]
        axis.axvline(target, color="grey", linestyle=":", label=f"target: HTTP median + {report['target_ms']:g} ms")
        axis.set_ylim(0, 1.02)
        axis.set_xlabel("ms to first audio")
        axis.set_ylabel("share of rounds (cumulative)")
        difference = difference_ms(engine, "multi-stream-input", 50)
        axis.set_title(f"{name}: multi-stream-input {difference:+.1f} ms at the median", fontsize=10)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8, loc="lower right")
    plots.save(fig, f"ElevenLabs' WebSockets against its HTTP stream\n{plots.subtitle(report)}", path)
