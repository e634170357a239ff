"""Soak: thousands of mixed-format requests, a share of them abandoned mid-stream; memory and leftovers after.

Registered in ``bench/run.py`` as ``soak``. One gateway with the synthetic engine, open to one tenant whose
``concurrent_streams`` limit equals the load's concurrency, so that every leaked stream lease would show. A closed
loop of ``--soak-concurrency`` clients sends ``--soak-requests`` requests with unique texts, formats drawn evenly from
all six, and a seeded ``--soak-abort`` share closed by the client right after the first body chunk (the engine is
paced, so the synthesis is still running then and has to be cancelled).

Measured: the resident memory (VmRSS) of the server process and of every engine worker once the first
``--soak-warmup`` requests have finished and the gateway is idle, and again at the end, idle (target: at most 5 %
growth); samples in between for the plot. At the end, idle: every engine reports ``active_jobs == 0`` and
``queued == 0`` in ``/readyz``, and the tenant can still hold its full number of streams at once (the next one is
refused with 429): ``limit`` requests to a second engine, ``hold``, whose one worker pauses before speaking, so they
are all admitted and waiting together. Status counts of every request are reported.
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from auth.keys import generate_api_key, hash_api_key
from bench import plots
from bench.servers import GatewayProcess, pinned

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable

__all__ = ["markdown", "measure", "plot"]

SPEECH = "/v1/audio/speech"
FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")
TEXT = "Soak request %06d speaks one sentence."  # 38 characters: 1.14 s of audio at 0.03 s per character
TENANT = "soak"
HOLD_DELAY_MS = 300  # the hold worker's pause before speaking: long enough for every probe to be admitted meanwhile
GROWTH_TARGET = 0.05


@dataclass(frozen=True, slots=True)
class Planned:
    index: int
    format: str
    abort: bool


@dataclass(frozen=True, slots=True)
class Outcome:
    status: str
    """The HTTP status, or the name of the httpx exception."""
    format: str
    aborted: bool
    size: int
    after_abort: bool = False
    """The same client's previous request was one it aborted (a 429 then means its lease was not yet released)."""


# --------------------------------------------------------------------------------------------------------------------
# processes


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS (KiB) and Threads of a live process, from /proc (no psutil needed)."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in {"VmRSS", "Threads"}:
            fields[key] = int(value.split()[0])
    return fields


def processes(readiness: dict[str, Any], server_pid: int) -> dict[str, int]:
    """Labels and pids: the server and every engine worker (``tones#0``, ``tones#1``, ``hold#0``)."""
    found = {"server": server_pid}
    for engine, state in sorted(readiness["engines"].items()):
        found |= {f"{engine}#{i}": pid for i, pid in enumerate(sorted(state["pids"]))}
    return found


def snapshot(pids: dict[str, int], done: int) -> dict[str, Any]:
    rss: dict[str, float | None] = {}
    for label, pid in pids.items():
        try:
            rss[label] = round(proc_status(pid)["VmRSS"] / 1024, 2)
        except (OSError, KeyError):
            rss[label] = None  # the process is gone (a replaced worker): reported, never compared
    server = pids["server"]
    return {"requests_done": done, "time": time.time(), "rss_mib": rss,
            "server_fds": len(list(Path(f"/proc/{server}/fd").iterdir())),
            "server_threads": proc_status(server)["Threads"]}  # fmt: skip


# --------------------------------------------------------------------------------------------------------------------
# load


def plan(requests: int, abort_share: float, seed: int) -> list[Planned]:
    """Formats in turn (even shares), and exactly ``abort_share`` of the requests aborted, chosen by ``seed``."""
    rng = random.Random(seed)
    aborted = set(rng.sample(range(requests), round(requests * abort_share)))
    return [Planned(i, FORMATS[i % len(FORMATS)], i in aborted) for i in range(requests)]


async def one(client: httpx.AsyncClient, url: str, planned: Planned, headers: dict[str, str]) -> Outcome:
    body = json.dumps({"model": "tones", "input": TEXT % planned.index, "voice": "alloy",
                       "response_format": planned.format}).encode()  # fmt: skip
    size = 0
    try:
        async with client.stream("POST", url, content=body, headers=headers) as response:
            async for data in response.aiter_raw():
                size += len(data)
                if planned.abort and data:
                    break  # leaving the block unread closes the connection: the client is gone mid-stream
        return Outcome(str(response.status_code), planned.format, planned.abort, size)
    except httpx.HTTPError as exc:
        return Outcome(type(exc).__name__, planned.format, planned.abort, size)


async def run_phase(client: httpx.AsyncClient, url: str, work: list[Planned], headers: dict[str, str], *,
                    concurrency: int, on_done: Callable[[], None]) -> list[Outcome]:  # fmt: skip
    outcomes: list[Outcome] = []
    remaining = iter(work)  # shared by the tasks: each request is sent once

    async def task() -> None:
        after_abort = False
        for planned in remaining:
            outcome = await one(client, url, planned, headers)
            outcomes.append(replace(outcome, after_abort=after_abort))
            after_abort = planned.abort
            on_done()
            if not outcome.status.startswith("2"):
                await asyncio.sleep(0.05)  # a refusal must not turn into a busy loop

    await asyncio.gather(*(task() for _ in range(concurrency)))
    return outcomes


async def wait_idle(client: httpx.AsyncClient, base_url: str, timeout_s: float = 15.0) -> dict[str, Any]:
    """Polls /readyz until no engine has a job or a waiter; returns the last state and how long it took."""
    started = time.monotonic()
    while True:
        engines = (await client.get(base_url + "/readyz")).json()["engines"]
        busy = {name: (s["active_jobs"], s["queued"]) for name, s in engines.items() if s["active_jobs"] or s["queued"]}
        if not busy or time.monotonic() - started > timeout_s:
            return {"idle": not busy, "waited_s": round(time.monotonic() - started, 2), "engines": engines}
        await asyncio.sleep(0.1)


async def lease_probe(client: httpx.AsyncClient, base_url: str, headers: dict[str, str], limit: int) -> dict[str, Any]:
    """``limit`` streams at once to the paused ``hold`` engine, then one more, which must be refused."""

    async def post(index: int) -> httpx.Response:
        body = {"model": "hold", "input": f"Lease {index}.", "voice": "alloy", "response_format": "pcm"}
        return await client.post(base_url + SPEECH, json=body, headers=headers)

    probes = [asyncio.create_task(post(i)) for i in range(limit)]
    held = 0
    deadline = time.monotonic() + HOLD_DELAY_MS / 1000 * 0.8
    while time.monotonic() < deadline and held < limit:  # admitted = on the worker or waiting in its queue
        hold = (await client.get(base_url + "/readyz")).json()["engines"]["hold"]
        held = max(held, hold["active_jobs"] + hold["queued"])
        await asyncio.sleep(0.01)
    extra = await post(limit)
    responses = await asyncio.gather(*probes)
    code = extra.json().get("error", {}).get("code") if extra.status_code != 200 else None
    return {"limit": limit, "held_at_once": held, "statuses": dict(Counter(str(r.status_code) for r in responses)),
            "extra_status": extra.status_code, "extra_code": code}  # fmt: skip


async def soak(server: GatewayProcess, args: argparse.Namespace, key: str, limit: int) -> dict[str, Any]:
    url, headers = server.base_url + SPEECH, {"authorization": f"Bearer {key}", "content-type": "application/json"}
    work = plan(args.soak_requests, args.soak_abort, seed=6)
    pids = processes(server.readiness(), server_pid(server))
    samples: list[dict[str, Any]] = [snapshot(pids, 0)]
    done = 0

    def on_done() -> None:
        nonlocal done
        done += 1
        if done % args.soak_sample_every == 0:
            samples.append(snapshot(pids, done))

    size = args.soak_concurrency
    limits = httpx.Limits(max_connections=size + limit + 2, max_keepalive_connections=size + limit + 2)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:
        started = time.monotonic()
        outcomes = await run_phase(client, url, work[: args.soak_warmup], headers, concurrency=size, on_done=on_done)
        idle_warm = await wait_idle(client, server.base_url)
        warm = snapshot(pids, done)
        outcomes += await run_phase(client, url, work[args.soak_warmup :], headers, concurrency=size, on_done=on_done)
        load_s = time.monotonic() - started
        idle_end = await wait_idle(client, server.base_url)
        end = snapshot(pids, done)
        probe = await lease_probe(client, server.base_url, headers, limit)
        idle_after_probe = await wait_idle(client, server.base_url)
    return {"pids": pids, "warm": warm, "end": end, "samples": samples, "load_s": round(load_s, 1),
            "idle_after_warmup": idle_warm, "idle_at_end": idle_end, "idle_after_probe": idle_after_probe,
            "lease_probe": probe, "outcomes": tally(outcomes), "restarts": restarts(idle_after_probe)}  # fmt: skip


def server_pid(server: GatewayProcess) -> int:
    assert server.process is not None
    return server.process.pid


def restarts(idle: dict[str, Any]) -> dict[str, int]:
    return {name: state["restarts"] for name, state in idle["engines"].items()}


def tally(outcomes: list[Outcome]) -> dict[str, Any]:
    by_format = {f: dict(Counter(o.status for o in outcomes if o.format == f)) for f in FORMATS}
    empty = sum(1 for o in outcomes if o.status == "200" and not o.aborted and not o.size)
    return {"requests": len(outcomes), "aborted": sum(o.aborted for o in outcomes),
            "statuses": dict(Counter(o.status for o in outcomes)),
            "statuses_aborted": dict(Counter(o.status for o in outcomes if o.aborted)), "by_format": by_format,
            "refused_after_own_abort": sum(1 for o in outcomes if o.status == "429" and o.after_abort),
            "empty_complete_bodies": empty}  # fmt: skip


# --------------------------------------------------------------------------------------------------------------------
# the benchmark


def config(args: argparse.Namespace, key_sha256: str, limit: int) -> dict[str, Any]:
    tones = {"kind": "synthetic", "workers": args.workers, "queue_size": 16, "queue_timeout_s": 30,
             "options": {"seconds_per_char": 0.03, "rtf": args.soak_rtf}}  # fmt: skip
    hold = {"kind": "synthetic", "workers": 1, "queue_size": limit,
            "options": {"request_delay_ms": HOLD_DELAY_MS, "seconds_per_char": 0.01}}  # fmt: skip
    tenant = {"name": TENANT, "limits": {"concurrent_streams": limit}, "api_key_sha256": [key_sha256]}
    # Cache off: a filling cache (up to max_memory_entries) would be growth by design, hiding or faking a leak.
    return {"engines": {"tones": tones, "hold": hold}, "aliases": {}, "cache": {"enabled": False},
            "server": {"playground": False}, "auth": {"tenants": [tenant]}}  # fmt: skip


def measure(args: argparse.Namespace) -> dict[str, Any]:
    key = generate_api_key()
    limit = args.soak_stream_limit or args.soak_concurrency
    settings = config(args, hash_api_key(key), limit)
    with tempfile.TemporaryDirectory(prefix="bench-soak-") as tmp:
        with pinned({1} if args.pin else None):
            server = GatewayProcess(settings, Path(tmp)).start()
        try:
            for name, engine in settings["engines"].items():  # every worker loaded, so every pid is measured
                server.wait_engine(name, 60, ready_workers=engine["workers"])
            with pinned({0} if args.pin else None):
                result = asyncio.run(soak(server, args, key, limit))
        finally:
            server.stop()
    growth = {label: _growth(result["warm"]["rss_mib"][label], result["end"]["rss_mib"][label])
              for label in result["pids"]}  # fmt: skip
    warm_total = sum(v for v in result["warm"]["rss_mib"].values() if v)
    end_total = sum(v for v in result["end"]["rss_mib"].values() if v)
    growth["total"] = _growth(warm_total, end_total)
    settings["auth"] = {"tenants": [{"name": TENANT, "limits": {"concurrent_streams": limit}}]}  # not the key hash
    return result | {"settings": settings, "growth": growth, "concurrency": args.soak_concurrency,
                     "warmup": args.soak_warmup, "abort_share": args.soak_abort}  # fmt: skip


def _growth(before: float | None, after: float | None) -> float | None:
    return None if not before or after is None else round(after / before - 1, 4)


# --------------------------------------------------------------------------------------------------------------------
# report


def markdown(report: dict[str, Any]) -> str:
    out, tones = report["outcomes"], report["settings"]["engines"]["tones"]
    lines = [f"{out['requests']} requests (the first {report['warmup']} are the warm-up) at concurrency "
             f"{report['concurrency']}, {out['aborted']} ({report['abort_share']:.0%}) closed by the client after the "
             f"first chunk; formats in turn: {', '.join(FORMATS)}. Synthetic engine, {tones['workers']} workers, "
             f"`rtf: {tones['options']['rtf']:g}`, 1.14 s of audio per request; cache off; tenant "
             f"`concurrent_streams: {report['lease_probe']['limit']}`. Load took {report['load_s']:g} s.\n",
             "| process | RSS after warm-up (MiB) | RSS at end (MiB) | growth |", "|---|---|---|---|"]  # fmt: skip
    for label in [*report["pids"], "total"]:
        warm, end = _rss(report["warm"], label), _rss(report["end"], label)
        lines.append(f"| {label} | {_mib(warm)} | {_mib(end)} | {_pct(report['growth'][label])} |")
    lines += ["", "| statuses, all requests | statuses, aborted requests | per format |", "|---|---|---|",
              f"| {_counts(out['statuses'])} | {_counts(out['statuses_aborted'])} | "
              + "; ".join(f"{f}: {_counts(c)}" for f, c in out["by_format"].items()) + " |"]  # fmt: skip
    lines += ["", "| target | measured | holds |", "|---|---|---|", *targets(report)]
    return "\n".join(lines) + "\n"


def targets(report: dict[str, Any]) -> list[str]:
    growth = [v for v in report["growth"].values() if v is not None]
    worst = max(growth) if growth else None
    idle = report["idle_at_end"]
    leftovers = ", ".join(f"{name}: {s['active_jobs']} / {s['queued']}" for name, s in sorted(idle["engines"].items()))
    probe = report["lease_probe"]
    bad = {k: v for k, v in report["outcomes"]["statuses"].items() if k[0] in "45" or not k[0].isdigit()}
    refused = report["outcomes"]["refused_after_own_abort"]
    after_abort = f" ({refused} of the 429s right after the same client aborted)" if "429" in bad else ""
    fds = f"{report['warm']['server_fds']} → {report['end']['server_fds']}"
    threads = f"{report['warm']['server_threads']} → {report['end']['server_threads']}"
    probe_ok = (
        probe["held_at_once"] == probe["limit"]
        and probe["extra_status"] == 429
        and probe["statuses"] == {"200": probe["limit"]}
    )
    return [
        f"| RSS growth after warm-up ≤ 5 % (every process and total) | worst {_pct(worst)} "
        f"| {_yes(worst is not None and worst <= GROWTH_TARGET)} |",
        f"| idle at the end: active_jobs == 0 and queued == 0 (per engine: jobs / queued) | {leftovers} "
        f"(after {idle['waited_s']:g} s) | {_yes(idle['idle'])} |",
        f"| the tenant holds all {probe['limit']} concurrent streams at once, the next is refused | "
        f"{probe['held_at_once']} held, then {probe['extra_status']} ({probe['extra_code']}); probes "
        f"{_counts(probe['statuses'])} | {_yes(probe_ok)} |",
        f"| no 4xx/5xx or transport errors | {_counts(bad) if bad else 'none'}{after_abort} | {_yes(not bad)} |",
        f"| (server RSS under load after warm-up, MiB: min / median / max of the samples) | {band(report)} | - |",
        f"| (server open file descriptors, threads: after warm-up → end) | {fds}; {threads} | - |",
        f"| (worker restarts) | {report['restarts']} | - |",
    ]  # fmt: skip


def band(report: dict[str, Any]) -> str:
    """The spread of the server's RSS under load: the idle snapshots are two points of a curve that saws."""
    values = [s["rss_mib"]["server"] for s in report["samples"]
              if s["requests_done"] > report["warmup"] and s["rss_mib"]["server"] is not None]  # fmt: skip
    if not values:
        return "-"
    return f"{min(values):.1f} / {statistics.median(values):.1f} / {max(values):.1f} (n={len(values)})"


def _rss(snap: dict[str, Any], label: str) -> float | None:
    if label == "total":
        return float(sum(v for v in snap["rss_mib"].values() if v))
    value = snap["rss_mib"].get(label)
    return None if value is None else float(value)


def _mib(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1%}"


def _yes(ok: bool) -> str:
    return "yes" if ok else "no"


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())) or "-"


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib.pyplot as plt  # backend set by bench.plots

    samples = report["samples"]
    done = [s["requests_done"] for s in samples]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for label in report["pids"]:
        values = [s["rss_mib"].get(label) for s in samples]
        left.plot(done, values, "o-", markersize=3, label=label)
        warm = report["warm"]["rss_mib"].get(label)
        if warm:
            right.plot(done, [None if v is None else (v / warm - 1) * 100 for v in values], "o-", markersize=3,
                       label=label)  # fmt: skip
    for axis in (left, right):
        axis.axvline(report["warmup"], color="gray", linestyle=":", label="end of warm-up")
        axis.set_xlabel("requests completed")
        axis.grid(alpha=0.3)
    right.axhspan(-GROWTH_TARGET * 100, GROWTH_TARGET * 100, color="green", alpha=0.08, label="±5 % target")
    left.set_ylabel("RSS, MiB")
    left.set_title("resident memory (sampled under load)", fontsize=10)
    right.set_ylabel("% vs idle after warm-up")
    right.set_title("growth relative to the idle snapshot after warm-up", fontsize=10)
    left.legend(fontsize=8)
    right.legend(fontsize=8)
    title = f"Soak, {report['outcomes']['requests']} requests, {report['abort_share']:.0%} aborted"
    plots.save(fig, f"{title} — {plots.subtitle(report)}", path)
