#!/usr/bin/env python
"""Gateway benchmarks on loopback: overhead, pool efficiency, the naive Flask baseline, time to first byte, ChatTTS
batching, soak, realtime (flush to first audio on the WebSocket), openai-realtime (OpenAI's Realtime API against the
HTTP endpoint's first byte); when named, remote and elevenlabs-ws (ElevenLabs' WebSockets against its HTTP stream).

    .venv/bin/python bench/run.py                 # all eight, about 19 minutes
    .venv/bin/python bench/run.py overhead        # or one: overhead | pool | baseline (each about 2 minutes),
                                                  # ttfb (about 4, ChatTTS included) | batching (about 7)
                                                  # | soak (about 1.5) | realtime (about 4, ChatTTS included)
                                                  # | openai-realtime (about 1.5, ChatTTS on tiny weights included)
    .venv/bin/python bench/run.py remote          # only when named: the remote hop (bench/remote.py), about 5
    .venv/bin/python bench/run.py elevenlabs-ws   # only when named: ElevenLabs' WebSockets, about 2

Every server binds 127.0.0.1; every run is bounded by a duration and a request count. By default the servers are
pinned to CPU 1 and the load generator to CPU 0 (``--no-pin`` to let them share both), so ratios compare servers on
the same core with the same client. Results go to ``bench/results/``: ``<name>.json`` (every figure),
``<name>.md`` (the tables) and PNG plots. Run it on an otherwise idle machine (``--wait-quiet`` waits for a
1-minute load average below 1.5); use ratios from one run, never absolute figures across runs.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx

from bench import chattts_batching, plots, wrkcheck
from bench import elevenlabs_ws as elevenlabs_ws_bench
from bench import openai_realtime as openai_realtime_bench
from bench import realtime as realtime_bench
from bench import remote as remote_bench
from bench import soak as soak_bench
from bench import ttfb as ttfb_bench
from bench.loadgen import LoadResult, run_load
from bench.servers import ROOT, ServerProcess, bare_litestar, flask_gunicorn, gateway
from engines.chattts.options import Dtype

if TYPE_CHECKING:
    from collections.abc import Callable

RESULTS = ROOT / "bench" / "results"
SPEECH = "/v1/audio/speech"
# The synthetic tone depends only on the voice and the text's length, so every text of this template (13 characters:
# 0.65 s at the default 0.05 s per character) gives the same pcm bytes. Texts must differ between concurrent requests:
# the gateway synthesizes identical in-flight requests once (even with the cache disabled).
TEXT_TEMPLATE = "Hello %06d."
TEMPLATE = json.dumps({"model": "tones", "input": TEXT_TEMPLATE, "voice": "alloy", "response_format": "pcm"})
BODY = (TEMPLATE % 0).encode()  # the one repeated request (cache hits), and the reference bytes


def unique_bodies() -> Callable[[], bytes]:
    counter = itertools.count(1)

    def body() -> bytes:
        return (TEMPLATE % (next(counter) % 1_000_000)).encode()

    return body


# --------------------------------------------------------------------------------------------------------------------
# helpers


def machine() -> dict[str, Any]:
    model = "unknown"
    for line in subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout.splitlines():
        if line.startswith("Model name:"):
            model = line.split(":", 1)[1].strip()
    mem_kib = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                   if line.startswith("MemTotal:"))  # fmt: skip
    versions = {name: metadata.version(name) for name in ("litestar", "uvicorn", "uvloop", "httptools", "httpx",
                                                          "flask", "gunicorn")}  # fmt: skip
    return {"cpu_model": model, "cpus": os.cpu_count(), "mem_gib": round(mem_kib / 2**20, 1),
            "python": platform.python_version(), "versions": versions}  # fmt: skip


def stamp() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def load_average() -> float:
    return os.getloadavg()[0]


def engine_config(
    *, workers: int, queue_size: int, queue_timeout_s: float, options: dict[str, Any], cache: bool
) -> dict[str, Any]:
    engine = {"kind": "synthetic", "workers": workers, "queue_size": queue_size, "queue_timeout_s": queue_timeout_s,
              "health_interval_s": 30, "options": options}  # fmt: skip
    return {"engines": {"tones": engine}, "aliases": {}, "cache": {"enabled": cache},
            "server": {"playground": False}}  # fmt: skip


def fetch_reference(base_url: str, workdir: Path) -> tuple[Path, str]:
    """One request to the gateway: its pcm bytes (for the other servers to return) and content type."""
    response = httpx.post(base_url + SPEECH, content=BODY, headers={"content-type": "application/json"}, timeout=30)
    response.raise_for_status()
    path = workdir / "reference.pcm"
    path.write_bytes(response.content)
    return path, response.headers["content-type"]


def check_same_bytes(base_url: str, reference: Path) -> None:
    response = httpx.post(base_url + SPEECH, content=BODY, headers={"content-type": "application/json"}, timeout=30)
    if response.status_code != 200 or response.content != reference.read_bytes():
        raise RuntimeError(f"{base_url} did not return the reference bytes ({response.status_code})")


def save(name: str, report: dict[str, Any], markdown: str) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / f"{name}.md").write_text(markdown)
    print(markdown, flush=True)


def fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def header(report: dict[str, Any]) -> str:
    m = report["machine"]
    return (f"Command: `{report['command']}`  \n"
            f"Machine: {m['cpus']} cores ({m['cpu_model']}), {m['mem_gib']} GiB, Python {m['python']}; "
            f"{report['started']}; 1-minute load average {report['load_before']:.2f} before, "
            f"{report['load_after']:.2f} after; pinning: {report['pinning']}.\n\n")  # fmt: skip


def new_report(args: argparse.Namespace, name: str) -> dict[str, Any]:
    pinning = "servers on CPU 1, load generator on CPU 0" if args.pin else "none"
    return {"name": name, "command": " ".join([".venv/bin/python", "bench/run.py", *sys.argv[1:]]),
            "machine": machine(), "started": stamp(), "load_before": load_average(), "pinning": pinning}  # fmt: skip


# --------------------------------------------------------------------------------------------------------------------
# 1. overhead


def overhead(args: argparse.Namespace) -> None:
    report = new_report(args, "overhead")
    with tempfile.TemporaryDirectory(prefix="bench-overhead-") as tmp:
        workdir = Path(tmp)
        servers = start_overhead_servers(args, workdir)
        try:
            rounds = []
            order = list(servers)
            for index in range(args.rounds):
                names = order if index % 2 == 0 else order[::-1]  # alternate the order to balance drift
                rounds.append({name: measure_overhead(args, servers[name], repeat=name == "gateway cache hit")
                               for name in names})  # fmt: skip
        finally:
            for server in servers.values():
                server.stop()
    report["load_after"] = load_average()
    report["rounds"] = rounds
    report["summary"] = summarize_overhead(rounds)
    plots.overhead(report, RESULTS / "overhead.png")
    save("overhead", report, overhead_markdown(report, args))


def start_overhead_servers(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    cpus = {1} if args.pin else None
    zero = {"request_delay_ms": 0}
    synthetic_dir, cache_dir = workdir / "synthetic", workdir / "cache"
    synthetic_dir.mkdir()
    cache_dir.mkdir()
    config = {"workers": args.workers, "queue_size": 64, "queue_timeout_s": 30, "options": zero}
    servers: dict[str, Any] = {}
    try:
        servers["gateway synthetic (no cache)"] = gateway(engine_config(**config, cache=False), synthetic_dir, cpus)
        body_file, content_type = fetch_reference(servers["gateway synthetic (no cache)"].base_url, workdir)
        servers["gateway cache hit"] = gateway(engine_config(**config, cache=True), cache_dir, cpus)
        servers["bare Litestar"] = bare_litestar(workdir, body_file, content_type).start(cpus)
        for server in servers.values():
            check_same_bytes(server.base_url, body_file)  # also makes the cache entry
    except BaseException:
        for server in servers.values():
            server.stop()
        raise
    return {"bare Litestar": servers["bare Litestar"], "gateway cache hit": servers["gateway cache hit"],
            "gateway synthetic (no cache)": servers["gateway synthetic (no cache)"]}  # fmt: skip


def server_pid(server: Any) -> int:
    if isinstance(server, ServerProcess):
        return server.pid
    assert server.process is not None
    return int(server.process.pid)


def measure_overhead(args: argparse.Namespace, server: Any, *, repeat: bool) -> dict[str, Any]:
    """httpx at --concurrency and at 1, then wrk; ``repeat``: the same request every time, else unique texts."""
    url = server.base_url + SPEECH
    with_client_cpu = {0} if args.pin else None
    results = {}
    for key, concurrency, duration in (("loaded", args.concurrency, args.duration), ("single", 1, args.duration / 2)):
        result = in_client_cpu(
            with_client_cpu,
            lambda c=concurrency, d=duration, k=key: run_load(
                url,
                BODY if repeat else unique_bodies(),
                label=k,
                concurrency=c,
                duration_s=d,
                max_requests=args.max_requests,
                warmup_s=1.0,
                server_pid=server_pid(server),
            ),
        )
        results[key] = result.summary()
        print(f"  {server.base_url} {key}: {results[key]}", flush=True)
    if args.wrk:
        # Also at concurrency 1: a C client's own time per request is tiny and steady, so the added median there is
        # the gateway's, where the httpx client adds a millisecond or two of its own that varies between rounds.
        for key, concurrency in (("wrk", args.concurrency), ("wrk_single", 1)):
            results[key] = wrkcheck.run_wrk(
                url,
                BODY,
                concurrency=concurrency,
                duration_s=args.duration / 2,
                cpus=with_client_cpu,
                server_pid=server_pid(server),
                template=None if repeat else TEMPLATE,
            )
            print(f"  {server.base_url} {key}: {results[key]}", flush=True)
    return results


def in_client_cpu(cpus: set[int] | None, work: Any) -> LoadResult:
    from bench.servers import pinned

    with pinned(cpus):
        result: LoadResult = work()
        return result


def summarize_overhead(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Means over the rounds, per server; then the gateway/bare ratios."""
    summary: dict[str, Any] = {}
    for name in rounds[0]:

        def mean(key: str, metric: str, name: str = name) -> float:
            return float(sum(r[name][key][metric] for r in rounds)) / len(rounds)

        summary[name] = {
            "rps": mean("loaded", "rps"), "median_ms": mean("loaded", "median_ms"), "p99_ms": mean("loaded", "p99_ms"),
            "single_median_ms": mean("single", "median_ms"), "single_p99_ms": mean("single", "p99_ms"),
            "cpu_ms_per_req": mean("loaded", "server_cpu_ms_per_ok"),
            "client_cpu_share": mean("loaded", "client_cpu_share"),
            "rps_per_round": [r[name]["loaded"]["rps"] for r in rounds],
            "requests": sum(r[name]["loaded"]["requests"] + r[name]["single"]["requests"] for r in rounds),
            "errors": sum(r[name]["loaded"]["errors"] + r[name]["single"]["errors"] for r in rounds),
            "cache_hits": sum(r[name]["loaded"]["cache_hits"] + r[name]["single"]["cache_hits"] for r in rounds),
        }  # fmt: skip
        if "wrk" in rounds[0][name]:
            summary[name] |= {"wrk_" + metric: sum(r[name]["wrk"][metric] for r in rounds) / len(rounds)
                              for metric in ("rps", "median_ms", "p99_ms", "server_cpu_ms_per_req")}  # fmt: skip
            summary[name]["wrk_bad"] = sum(r[name]["wrk"]["non_2xx"] for r in rounds)
        summary[name]["added_single_per_round"] = added_per_round(rounds, name, "single")
        if "wrk_single" in rounds[0][name]:
            medians = [r[name]["wrk_single"]["median_ms"] for r in rounds]
            summary[name]["wrk_single_median_ms"] = sum(medians) / len(medians)
            summary[name]["wrk_added_single_per_round"] = added_per_round(rounds, name, "wrk_single")
    bare = summary["bare Litestar"]
    for row in summary.values():
        row["rps_ratio"] = row["rps"] / bare["rps"]
        row["added_median_ms_loaded"] = row["median_ms"] - bare["median_ms"]
        row["added_median_ms_single"] = row["single_median_ms"] - bare["single_median_ms"]
        row["cpu_ratio"] = bare["cpu_ms_per_req"] / row["cpu_ms_per_req"]
        if "wrk_rps" in row:
            row["wrk_rps_ratio"] = row["wrk_rps"] / bare["wrk_rps"]
            row["wrk_added_median_ms"] = row["wrk_median_ms"] - bare["wrk_median_ms"]
        if "wrk_single_median_ms" in row:
            row["wrk_added_single_ms"] = row["wrk_single_median_ms"] - bare["wrk_single_median_ms"]
    return summary


def added_per_round(rounds: list[dict[str, Any]], name: str, key: str) -> list[float]:
    """The server's median minus the bare route's in the same round, for the measurement ``key``."""
    return [r[name][key]["median_ms"] - r["bare Litestar"][key]["median_ms"] for r in rounds]


def per_round_ms(values: list[float]) -> str:
    return ", ".join(f"{value:+.2f}" for value in values)


def overhead_markdown(report: dict[str, Any], args: argparse.Namespace) -> str:
    s = report["summary"]
    lines = [header(report),
             f"Concurrency {args.concurrency} for {args.duration:g} s and concurrency 1 for {args.duration / 2:g} s "
             f"per server and round, {args.rounds} rounds (order alternated), means over rounds; "
             f"{args.workers} engine workers.\n",
             f"| server | req/s (c={args.concurrency}) | per round | median ms | p99 ms | median ms (c=1) "
             "| p99 ms (c=1) | server CPU ms/req | client CPU share | requests | errors | x-cache hits |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for name, row in s.items():
        per_round = " / ".join(f"{v:.0f}" for v in row["rps_per_round"])
        lines.append(f"| {name} | {row['rps']:.0f} | {per_round} | {fmt(row['median_ms'])} | {fmt(row['p99_ms'])} "
                     f"| {fmt(row['single_median_ms'], 3)} | {fmt(row['single_p99_ms'], 3)} "
                     f"| {fmt(row['cpu_ms_per_req'], 3)} | {fmt(row['client_cpu_share'])} | {row['requests']} "
                     f"| {row['errors']} | {row['cache_hits']} |")  # fmt: skip
    lines += ["", "| target | gateway path | measured | holds |", "|---|---|---|---|"]
    for name in ("gateway cache hit", "gateway synthetic (no cache)"):
        row = s[name]
        lines.append(f"| gateway req/s ≥ 70 % of bare | {name} | {row['rps_ratio']:.0%} "
                     f"| {'yes' if row['rps_ratio'] >= 0.70 else 'no'} |")  # fmt: skip
        lines.append(f"| added median latency ≤ 1 ms (c=1) | {name} | {row['added_median_ms_single']:+.3f} ms "
                     f"(rounds: {per_round_ms(row['added_single_per_round'])}) "
                     f"| {'yes' if row['added_median_ms_single'] <= 1.0 else 'no'} |")  # fmt: skip
        if "wrk_added_single_ms" in row:
            lines.append(f"| added median latency ≤ 1 ms (c=1, wrk) | {name} | {row['wrk_added_single_ms']:+.3f} ms "
                         f"(rounds: {per_round_ms(row['wrk_added_single_per_round'])}) "
                         f"| {'yes' if row['wrk_added_single_ms'] <= 1.0 else 'no'} |")  # fmt: skip
        lines.append(f"| added median latency ≤ 1 ms (c={args.concurrency}) | {name} "
                     f"| {row['added_median_ms_loaded']:+.3f} ms "
                     f"| {'yes' if row['added_median_ms_loaded'] <= 1.0 else 'no'} |")  # fmt: skip
        lines.append(f"| (server CPU per request, bare / gateway) | {name} | {row['cpu_ratio']:.0%} | - |")
    if "wrk_rps" in s["bare Litestar"]:
        lines += ["", f"Cross-check with wrk (`wrk -t1 -c{args.concurrency} -d{max(1, round(args.duration / 2))}s`, "
                  "pinned like the httpx client), means over rounds:", "",
                  "| server | req/s | of bare | median ms | added median ms | p99 ms | server CPU ms/req | non-2xx |",
                  "|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for name, row in s.items():
            lines.append(f"| {name} | {row['wrk_rps']:.0f} | {row['wrk_rps_ratio']:.0%} | {row['wrk_median_ms']:.2f} "
                         f"| {row['wrk_added_median_ms']:+.2f} | {row['wrk_p99_ms']:.2f} "
                         f"| {row['wrk_server_cpu_ms_per_req']:.3f} | {row['wrk_bad']} |")  # fmt: skip
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------------------------------
# 2. pool


def pool(args: argparse.Namespace) -> None:
    report = new_report(args, "pool")
    workers, delay = args.workers, args.delay_ms
    theory = workers / (delay / 1000)
    levels = [workers, 2 * workers, 4 * workers]
    options = {"request_delay_ms": delay}
    config = engine_config(workers=workers, queue_size=args.queue_size, queue_timeout_s=5, options=options,
                           cache=False)  # fmt: skip
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-pool-") as tmp:
        server = gateway(config, Path(tmp), {1} if args.pin else None)
        try:
            for level in levels:
                result = in_client_cpu(
                    {0} if args.pin else None,
                    lambda c=level: run_load(
                        server.base_url + SPEECH,
                        unique_bodies(),
                        label="gateway",
                        concurrency=c,
                        duration_s=args.pool_duration,
                        max_requests=args.max_requests,
                        warmup_s=1.0,
                        reject_pause_s=args.reject_pause_ms / 1000,
                        server_pid=server_pid(server),
                    ),
                )
                row = result.summary() | {"efficiency": result.rps / theory}
                rows.append(row)
                print(f"  pool c={level}: {row}", flush=True)
        finally:
            server.stop()
    report |= {"load_after": load_average(), "workers": workers, "delay_ms": delay, "theory_rps": theory,
               "queue_size": args.queue_size, "reject_pause_ms": args.reject_pause_ms, "rows": rows}  # fmt: skip
    plots.pool(report, RESULTS / "pool.png")
    save("pool", report, pool_markdown(report, args))


def pool_markdown(report: dict[str, Any], args: argparse.Namespace) -> str:
    theory = report["theory_rps"]
    lines = [header(report),
             f"P = {report['workers']} workers, L = {report['delay_ms']:g} ms (`request_delay_ms`), "
             f"texts {TEXT_TEMPLATE!r}, "
             f"pcm, cache off, `queue_size: {report['queue_size']}`, `queue_timeout_s: 5`; {args.pool_duration:g} s "
             f"per level; a client that gets a 503 waits {report['reject_pause_ms']:g} ms before its next request. "
             f"Theoretical P/L = {theory:g} req/s.\n",
             "| concurrency | requests | 200 req/s | of P/L | median ms | p99 ms | 503 share | 503 median ms "
             "| 503 p99 ms | other errors |",
             "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for row in report["rows"]:
        lines.append(
            f"| {row['concurrency']} | {row['requests']} | {row['rps']:.2f} | {row['efficiency']:.1%} "
            f"| {fmt(row['median_ms'], 1)} | {fmt(row['p99_ms'], 1)} | {row['rejected_share']:.1%} "
            f"| {fmt(row['rejected_median_ms'])} | {fmt(row['rejected_p99_ms'])} | {row['errors']} |"
        )
    lines += ["", "| target | concurrency | measured | holds |", "|---|---|---|---|"]
    for row in report["rows"]:
        lines.append(f"| throughput ≥ 95 % of P/L | {row['concurrency']} | {row['efficiency']:.1%} "
                     f"| {'yes' if row['efficiency'] >= 0.95 else 'no'} |")  # fmt: skip
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------------------------------
# 3. baseline


def baseline(args: argparse.Namespace) -> None:
    report = new_report(args, "baseline")
    workers, delay = args.workers, args.delay_ms
    levels = [int(c) for c in args.levels.split(",")]
    cpus = {1} if args.pin else None
    series: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-baseline-") as tmp:
        workdir = Path(tmp)
        config = engine_config(workers=workers, queue_size=max(16, *levels), queue_timeout_s=30,
                               options={"request_delay_ms": delay}, cache=False)  # fmt: skip
        targets: dict[str, Any] = {"gateway": gateway(config, workdir, cpus)}
        try:
            body_file, content_type = fetch_reference(targets["gateway"].base_url, workdir)
            targets[f"Flask + lock, gunicorn sync x{workers}"] = flask_gunicorn(
                workdir, body_file, content_type, workers=workers, delay_ms=delay
            ).start(cpus)
            if args.threads > 1:
                targets[f"Flask + lock, gunicorn gthread x{workers}x{args.threads}"] = flask_gunicorn(
                    workdir,
                    body_file,
                    content_type,
                    workers=workers,
                    delay_ms=delay,
                    threads=args.threads,
                ).start(cpus)
            for server in targets.values():
                check_same_bytes(server.base_url, body_file)
            for name, server in targets.items():
                series[name] = [baseline_level(args, server, name, level) for level in levels]
        finally:
            for server in targets.values():
                server.stop()
    report |= {"load_after": load_average(), "workers": workers, "delay_ms": delay,
               "theory_rps": workers / (delay / 1000), "levels": levels, "series": series}  # fmt: skip
    plots.baseline(report, RESULTS / "baseline.png")
    save("baseline", report, baseline_markdown(report, args))


def baseline_level(args: argparse.Namespace, server: Any, name: str, level: int) -> dict[str, Any]:
    result = in_client_cpu(
        {0} if args.pin else None,
        lambda: run_load(
            server.base_url + SPEECH,
            unique_bodies(),
            label=name,
            concurrency=level,
            duration_s=args.baseline_duration,
            max_requests=args.max_requests,
            warmup_s=0.5,
            server_pid=server_pid(server),
        ),
    )
    row = result.summary()
    print(f"  {name} c={level}: {row}", flush=True)
    return row


def baseline_markdown(report: dict[str, Any], args: argparse.Namespace) -> str:
    lines = [header(report),
             f"P = {report['workers']}, L = {report['delay_ms']:g} ms; {args.baseline_duration:g} s per level; "
             f"gateway `queue_size: {max(16, *report['levels'])}`, cache off. P/L = {report['theory_rps']:g} "
             "req/s.\n",
             "| server | concurrency | requests | req/s | of P/L | mean ms | p99 ms | error rate (non-200) |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for name, rows in report["series"].items():
        for row in rows:
            failures = row["errors"] + row["rejected"]
            lines.append(f"| {name} | {row['concurrency']} | {row['requests']} | {row['rps']:.2f} "
                         f"| {row['rps'] / report['theory_rps']:.0%} "
                         f"| {fmt(row['mean_ms'], 1)} | {fmt(row['p99_ms'], 1)} "
                         f"| {failures / max(1, row['requests']):.1%} |")  # fmt: skip
    names = list(report["series"])
    lines += ["", "| concurrency | " + " | ".join(f"gateway req/s / {name} req/s" for name in names[1:]) + " |",
              "|---" * len(names) + "|"]  # fmt: skip
    for index, level in enumerate(report["levels"]):
        gateway_rps = report["series"][names[0]][index]["rps"]
        ratios = [f"{gateway_rps / report['series'][name][index]['rps']:.2f}x" for name in names[1:]]
        lines.append(f"| {level} | " + " | ".join(ratios) + " |")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------------------------------
# 4. time to first byte and 5. soak (bench/ttfb.py, bench/soak.py)


def ttfb(args: argparse.Namespace) -> None:
    run_module("ttfb", ttfb_bench, args)


def batching(args: argparse.Namespace) -> None:
    run_module("batching", chattts_batching, args)


def soak(args: argparse.Namespace) -> None:
    run_module("soak", soak_bench, args)


def realtime(args: argparse.Namespace) -> None:
    run_module("realtime", realtime_bench, args)


def openai_realtime(args: argparse.Namespace) -> None:
    run_module("openai_realtime", openai_realtime_bench, args)


def remote(args: argparse.Namespace) -> None:
    run_module("remote", remote_bench, args)


def elevenlabs_ws(args: argparse.Namespace) -> None:
    run_module("elevenlabs_ws", elevenlabs_ws_bench, args)


def run_module(name: str, module: Any, args: argparse.Namespace) -> None:
    """A benchmark module's ``measure``, then its ``plot`` and ``markdown`` under the common report header."""
    report = new_report(args, name)
    report |= module.measure(args)
    report["load_after"] = load_average()
    module.plot(report, RESULTS / f"{name}.png")
    save(name, report, header(report) + module.markdown(report))


# --------------------------------------------------------------------------------------------------------------------

BENCHMARKS = {"overhead": overhead, "pool": pool, "baseline": baseline, "ttfb": ttfb, "batching": batching,
              "soak": soak, "realtime": realtime, "openai-realtime": openai_realtime, "remote": remote,
              "elevenlabs-ws": elevenlabs_ws}  # fmt: skip
# Run only when named: the remote hop (bench/remote.py, about 5 minutes) and ElevenLabs' WebSockets
# (bench/elevenlabs_ws.py, about 2) are not part of the default eight.
DEFAULT = [name for name in BENCHMARKS if name not in {"remote", "elevenlabs-ws"}]


def wait_quiet(limit: float, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while (load := load_average()) >= limit:
        if time.monotonic() > deadline:
            raise SystemExit(f"load average still {load:.2f} after {timeout_s:g} s; not measuring")
        print(f"waiting for a quiet machine: 1-minute load average {load:.2f}", flush=True)
        time.sleep(15)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "benchmarks", nargs="*", metavar="|".join(BENCHMARKS), help="default: all but remote and elevenlabs-ws"
    )
    parser.add_argument("--no-pin", dest="pin", action="store_false", help="do not pin servers and client to CPUs")
    parser.add_argument("--wait-quiet", action="store_true", help="wait (≤ 10 min) for a load average below 1.5")
    parser.add_argument("--workers", type=int, default=2, help="engine workers / gunicorn workers (P)")
    parser.add_argument("--delay-ms", type=float, default=200, help="work per request in pool and baseline (L)")
    parser.add_argument("--max-requests", type=int, default=100_000, help="request budget per measured run")
    g = parser.add_argument_group("overhead")
    g.add_argument("--concurrency", type=int, default=16)
    g.add_argument("--duration", type=float, default=8, help="seconds at --concurrency (half that at concurrency 1)")
    g.add_argument("--rounds", type=int, default=2)
    g.add_argument("--no-wrk", dest="wrk", action="store_false", help="skip the wrk cross-check")
    g = parser.add_argument_group("pool")
    g.add_argument("--pool-duration", type=float, default=15)
    g.add_argument("--queue-size", type=int, default=2)
    g.add_argument("--reject-pause-ms", type=float, default=50)
    g = parser.add_argument_group("baseline")
    g.add_argument("--levels", default="1,2,4,8,16")
    g.add_argument("--baseline-duration", type=float, default=5)
    g.add_argument("--threads", type=int, default=8, help="also run gunicorn gthread with this many threads (1: off)")
    add_ttfb_soak_options(parser)
    add_realtime_options(parser)
    add_openai_realtime_options(parser)
    remote_bench.add_options(parser)
    args = parser.parse_args()
    unknown = set(args.benchmarks) - set(BENCHMARKS)
    if unknown:
        parser.error(f"unknown benchmarks {sorted(unknown)}: choose from {', '.join(BENCHMARKS)}")
    if args.pin and (os.cpu_count() or 1) < 2:
        args.pin = False
    args.wrk = args.wrk and wrkcheck.available()
    if args.wait_quiet:
        wait_quiet(1.5, 600)
    for name in args.benchmarks or DEFAULT:
        print(f"== {name} ({stamp()}, load average {load_average():.2f})", flush=True)
        started = time.monotonic()
        BENCHMARKS[name](args)
        print(f"== {name} took {time.monotonic() - started:.0f} s", flush=True)


def add_ttfb_soak_options(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("ttfb")
    g.add_argument("--ttfb-requests", type=int, default=100, help="synthetic engine: requests per concurrency")
    g.add_argument("--ttfb-rtf", type=float, default=0.25, help="synthetic engine: real-time factor of the pacing")
    g.add_argument("--ttfb-format", default="mp3", choices=["mp3", "opus", "aac", "flac", "wav", "pcm"])
    g.add_argument("--no-chattts", dest="chattts", action="store_false", help="skip the ChatTTS cells")
    g.add_argument("--ttfb-chattts-requests", type=int, default=10, help="ChatTTS: requests per concurrency")
    g.add_argument("--chattts-assets", type=Path, default=Path("/tmp/chattts-full"),
                   help="full-size ChatTTS assets; generated there when missing or invalid")  # fmt: skip
    g.add_argument("--chattts-workers", type=int, default=2, help="ChatTTS workers (P), cores shared between them")
    g.add_argument("--chattts-tokens", type=int, default=64, help="ChatTTS: audio tokens per request (~21 ms each)")
    g = parser.add_argument_group("batching (also takes --chattts-assets)")
    g.add_argument("--batching-tokens", type=int, default=64, help="audio tokens per request (~21 ms each)")
    g.add_argument("--batching-concurrency", default="1,2,4,8", help="levels; the gain is read at 4 (or the highest)")
    g.add_argument("--batching-repeat", type=int, default=3, help="closed loop: requests per client")
    g.add_argument(
        "--batching-dtype",
        default="auto",
        choices=get_args(Dtype),
        help="the ChatTTS engine's dtype option (the GPT backbone's number type)",
    )
    g.add_argument("--batching-stagger", type=int, default=3, help="staggered arrivals: requests per level x level")
    g.add_argument("--batching-threads", type=int, default=2, help="torch threads of the worker")
    g.add_argument("--batching-ceiling-threads", default="1,2", help="torch thread counts of the in-process ceiling")
    g = parser.add_argument_group("soak")
    g.add_argument("--soak-requests", type=int, default=2000)
    g.add_argument("--soak-warmup", type=int, default=200, help="requests before the first memory snapshot")
    g.add_argument("--soak-concurrency", type=int, default=8)
    g.add_argument("--soak-abort", type=float, default=0.3, help="share of streams closed after the first chunk")
    g.add_argument("--soak-rtf", type=float, default=0.05, help="real-time factor of the synthetic engine")
    g.add_argument("--soak-stream-limit", type=int, default=0, help="tenant concurrent_streams (0: the concurrency)")
    g.add_argument("--soak-sample-every", type=int, default=100, help="requests between memory samples (plot)")


def add_realtime_options(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("realtime (also takes --no-chattts and --chattts-assets)")
    g.add_argument("--realtime-rounds", type=int, default=100, help="synthetic engine: segments per side")
    g.add_argument("--realtime-delay-ms", type=float, default=50, help="synthetic engine: request_delay_ms")
    g.add_argument("--realtime-rtf", type=float, default=0.25, help="synthetic engine: real-time factor of the pacing")
    g.add_argument("--realtime-chattts-rounds", type=int, default=10, help="ChatTTS: segments per side")
    g.add_argument("--realtime-chattts-tokens", type=int, default=16, help="ChatTTS: audio tokens per segment")
    g.add_argument(
        "--realtime-chattts-first-tokens",
        type=int,
        default=8,
        help="ChatTTS: stream_first_tokens (tokens before the first chunk, at least 8)",
    )
    # One torch thread leaves a core to the gateway's event loop and the client, so the difference measured is
    # the gateway's path rather than its fight with torch for the CPU; torch's threads also wait for each other,
    # which makes two of them erratic on a shared machine.
    g.add_argument("--realtime-chattts-threads", type=int, default=1, help="ChatTTS: torch threads of the worker")


def add_openai_realtime_options(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group(
        "openai-realtime (also takes --no-chattts, --realtime-delay-ms, --realtime-rtf and the --realtime-chattts-* "
        "token and thread options)"
    )
    g.add_argument("--openai-rounds", type=int, default=100, help="rounds per side, for each engine")
    g.add_argument("--openai-chattts-assets", type=Path, default=openai_realtime_bench.DEFAULT_TINY_ASSETS,
                   help="tiny ChatTTS assets; generated there when missing")  # fmt: skip
    g = parser.add_argument_group("elevenlabs-ws (takes the openai-realtime engine options)")
    g.add_argument("--elevenlabs-rounds", type=int, default=100, help="rounds per side, for each engine")


if __name__ == "__main__":
    main()
