"""ChatTTS served over HTTP on each decoder (issue #37): ``decoder: torch`` against ``decoder: onnxruntime``.

    .venv/bin/python -m bench.chattts_served --assets /tmp/chattts-full-onnx    # about 10 minutes on 2 cores
    .venv/bin/python -m bench.chattts_served --assets /tmp/chattts-full --decoders onnxruntime+int8 --concurrency 1
    .venv/bin/python -m bench.chattts_served --decoders onnxruntime+int8,onnxruntime+int8+stream_decode_threads=none \
        --concurrency 1 --repeat-one 5    # issue #51: the streaming decode on one torch thread, and on the worker's
    .venv/bin/python -m bench.chattts_served --decoders torch,onnxruntime,onnxruntime+int8 --concurrency 4,8 \
        --alternate --rounds 2 --profile    # issue #51: alternating on a busy machine, with the step's share

For each decoder in turn, one ``chattts-gateway serve`` with one ChatTTS worker on the same assets (``max_batch:
auto``, continuous batching on, ``--tokens`` audio tokens per request: ``min_new_token == max_new_token``, so every
request makes the same audio), an unrecorded request, then closed loops at each ``--concurrency``: N clients each
send ``--repeat`` streamed ``pcm`` requests back to back (concurrency 1: ``--repeat-one``). Per level: audio seconds
per wall second (all the audio over the time from the first send to the last byte) and the time from sending a
request to its first audio byte (median and 90th percentile). Then the ratios the issue asks for: each level's
throughput on onnxruntime over torch's, concurrency 8 over 4, and first audio at 8 over 1.

``--alternate``: every decoder's gateway is started first, then each level runs on each decoder in turn, ``--rounds``
times, the order reversed every other round: on a machine whose load drifts, the decoders share its moods.
``--profile``: the worker's engine time per part, summed over each level (``bench/served_profile.py``): prefill,
decode steps, the streaming decode and the rest; the step's share is of the engine's wall time.

Prints Markdown tables and writes every figure to ``bench/results/chattts_served.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

from bench import served_profile
from bench.servers import ROOT, GatewayProcess, gateway

__all__ = ["main", "measure_decoder"]

RESULTS = Path(__file__).resolve().parent / "results" / "chattts_served.json"
SAMPLE_RATE = 24_000
PYTHONPATH = os.environ.get("PYTHONPATH", "")
REQUEST_TIMEOUT_S = 600.0
# Distinct sentences, so that no request shares another's synthesis (the audio cache is off as well).
TEXT = "Request number %d of the served decoder benchmark, spoken in one sentence."


def gateway_config(assets: Path, decoder: str, tokens: int) -> dict[str, Any]:
    """One ChatTTS worker on ``decoder``; ``onnxruntime+int8`` names the 8-bit graph (``weights: int8``), and a
    ``+option=value`` part sets any other engine option (``none``: null), e.g. ``+stream_decode_threads=none``."""
    decoder, *parts = decoder.split("+")
    options: dict[str, Any] = {"source": "dir", "path": str(assets), "decoder": decoder, "weights": "float32",
                               "max_batch": "auto", "max_new_token": tokens, "min_new_token": tokens}  # fmt: skip
    for part in parts:
        name, equals, value = part.partition("=")
        if not equals:
            options["weights"] = name
        else:
            options[name] = None if value == "none" else json.loads(value)
    chattts = {"kind": "chattts", "workers": 1, "options": options, "queue_size": 64, "queue_timeout_s": 600,
               "start_timeout_s": 900, "stall_timeout_s": 600}  # fmt: skip
    return {"engines": {"chattts": chattts}, "cache": {"enabled": False}}


async def one_request(http: httpx.AsyncClient, number: int) -> tuple[float, float]:
    """Seconds to the first audio byte, and seconds of audio received."""
    body = {"model": "chattts", "voice": "alloy", "input": TEXT % number, "response_format": "pcm"}
    started = time.perf_counter()
    first: float | None = None
    received = 0
    async with http.stream("POST", "/v1/audio/speech", json=body, timeout=REQUEST_TIMEOUT_S) as response:
        response.raise_for_status()
        async for chunk in response.aiter_raw():
            if first is None and chunk:
                first = time.perf_counter() - started
            received += len(chunk)
    if first is None:
        raise RuntimeError(f"request {number} got no audio")
    return first, received / (2 * SAMPLE_RATE)


async def closed_loop(base_url: str, concurrency: int, repeat: int, numbers: Any) -> dict[str, Any]:
    async def client() -> list[tuple[float, float]]:
        return [await one_request(http, next(numbers)) for _ in range(repeat)]

    async with httpx.AsyncClient(base_url=base_url) as http:
        started = time.perf_counter()
        per_client = await asyncio.gather(*(client() for _ in range(concurrency)))
        wall = time.perf_counter() - started
    results = [result for client_results in per_client for result in client_results]
    firsts = sorted(first for first, _ in results)
    audio = sum(seconds for _, seconds in results)
    return {"concurrency": concurrency, "requests": len(results), "audio_s": round(audio, 2),
            "wall_s": round(wall, 2), "throughput": round(audio / wall, 3),
            "first_audio_p50_s": round(statistics.median(firsts), 3),
            "first_audio_p90_s": round(firsts[min(len(firsts) - 1, int(0.9 * len(firsts)))], 3)}  # fmt: skip


def measure_decoder(assets: Path, decoder: str, args: argparse.Namespace) -> dict[str, Any]:
    numbers = iter(range(10**6))
    with tempfile.TemporaryDirectory(prefix=f"served-{decoder}-") as workdir:
        started = time.perf_counter()
        config = gateway_config(assets, decoder, args.tokens)
        served = gateway(config, Path(workdir), None, timeout_s=900)  # a busy CPU loads the model slowly
        try:
            ready_s = time.perf_counter() - started
            details = served.engine("chattts").get("details", {})
            print(f"{decoder}: ready in {ready_s:.0f} s, engine details {details}", flush=True)
            asyncio.run(closed_loop(served.base_url, 1, 1, numbers))  # unrecorded: a fresh worker's first request
            assert served.process is not None
            workers_mb = sum(child.memory_info().rss for child in psutil.Process(served.process.pid).children(True))
            print(f"  {decoder}: processes under the gateway {workers_mb / 2**20:.0f} MiB resident", flush=True)
            levels = []
            for concurrency in args.concurrency:
                repeat = args.repeat_one if concurrency == 1 else args.repeat
                level = asyncio.run(closed_loop(served.base_url, concurrency, repeat, numbers))
                print(f"  {decoder} c={concurrency}: {level}", flush=True)
                levels.append(level)
        finally:
            served.stop()
    return {"decoder": decoder, "ready_s": round(ready_s, 1), "details": details, "levels": levels}


def with_profile(directory: Path | None, level: Any) -> dict[str, Any]:
    """Run ``level()``; with ``directory``, add the worker's engine time per part over it (seconds, and shares of
    the engine's wall time)."""
    if directory is None:
        found: dict[str, Any] = level()
        return found
    before = served_profile.read_totals(directory)
    found = level()
    time.sleep(1.0)  # the batch ends (and its totals are written) just after the last byte
    after = served_profile.read_totals(directory)
    wall = {part: after["wall"][part] - before["wall"][part] for part in served_profile.PARTS}
    cpu = {part: after["cpu"][part] - before["cpu"][part] for part in served_profile.PARTS}
    steps = wall["step"] + wall["step+prefill"]
    engine = max(wall["engine"], 1e-9)
    found["engine_s"] = {part: round(value, 2) for part, value in wall.items()}
    found["engine_cpu_s"] = {part: round(value, 2) for part, value in cpu.items()}
    found["step_share"] = round(steps / engine, 3)
    found["shares"] = {"prefill": round(wall["prefill"] / engine, 3), "steps": round(steps / engine, 3),
                       "decode": round(wall["decode"] / engine, 3),
                       "rest": round(1 - (steps + wall["prefill"] + wall["decode"]) / engine, 3)}  # fmt: skip
    return found


def measure_alternating(assets: Path, decoders: list[str], args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Every decoder's gateway up at once (started together: on a busy machine one after another takes minutes
    each); each level on each in turn, ``args.rounds`` times."""
    numbers = iter(range(10**6))
    runs: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="served-alternating-") as workdir:
        profiles = {decoder: Path(workdir) / f"profile-{decoder}" if args.profile else None for decoder in decoders}
        if args.profile:
            served_profile.write_hook(Path(workdir))
        started = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(len(decoders)) as pool:
            starting = {
                decoder: pool.submit(start_gateway, assets, decoder, args.tokens, Path(workdir), profiles[decoder])
                for decoder in decoders
            }
        served = {decoder: future.result() for decoder, future in starting.items() if future.exception() is None}
        try:
            for decoder, future in starting.items():
                if (error := future.exception()) is not None:
                    raise RuntimeError(f"{decoder} did not start") from error
                details = served[decoder].engine("chattts").get("details", {})
                print(
                    f"{decoder}: ready in {time.perf_counter() - started:.0f} s, engine details {details}", flush=True
                )
                runs[decoder] = {"decoder": decoder, "details": details, "levels": []}
            for decoder in decoders:  # unrecorded: a fresh worker's first request
                asyncio.run(closed_loop(served[decoder].base_url, 1, 1, numbers))
            for round_number in range(args.rounds):
                order = decoders if round_number % 2 == 0 else decoders[::-1]
                for concurrency in args.concurrency:
                    repeat = args.repeat_one if concurrency == 1 else args.repeat
                    for decoder in order:
                        url = served[decoder].base_url
                        level = with_profile(profiles[decoder],
                                             lambda: asyncio.run(closed_loop(url, concurrency, repeat, numbers)))  # noqa: B023  # fmt: skip
                        level["round"] = round_number
                        print(f"  round {round_number} {decoder} c={concurrency}: {level}", flush=True)
                        runs[decoder]["levels"].append(level)
        finally:
            for server in served.values():
                server.stop()
    return runs


def start_gateway(assets: Path, decoder: str, tokens: int, workdir: Path, profile: Path | None) -> GatewayProcess:
    """One decoder's gateway in a folder of its own; with ``profile``, its processes write their engine time there
    (``bench/served_profile.py``)."""
    env: dict[str, str] = {}
    if profile is not None:
        profile.mkdir()
        hook = workdir / "hook"  # served_profile.write_hook's
        env["PYTHONPATH"] = os.pathsep.join([str(hook), str(ROOT), *PYTHONPATH.split(os.pathsep)]).rstrip(os.pathsep)
        env[served_profile.ENV] = str(profile)
    folder = workdir / decoder
    folder.mkdir()
    return GatewayProcess(gateway_config(assets, decoder, tokens), folder, env).start(900)


def ratios(runs: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Each decoder's throughput over the first one's (``torch`` first by default) per level (and per round where
    alternating: ``r1`` the second), 8 over 4, 8 over 1."""
    by_level: dict[str, dict[str, dict[str, Any]]] = {}
    for run in runs.values():
        for level in run["levels"]:
            suffix = f" r{level['round']}" if "round" in level else ""
            by_level.setdefault(run["decoder"], {})[f"c={level['concurrency']}{suffix}"] = level
    found: dict[str, float] = {}
    first = next(iter(by_level), "")
    baseline = by_level.get(first, {})
    for decoder, levels in by_level.items():
        for key in sorted(set(levels) & set(baseline)) if decoder != first else ():
            found[f"{decoder}/{first} throughput {key}"] = round(
                levels[key]["throughput"] / baseline[key]["throughput"], 3
            )
        for key in levels:
            if key.startswith("c=4") and (eight := levels.get(key.replace("c=4", "c=8"))):
                found[f"{decoder}: throughput c=8 / c=4{key[3:]}"] = round(
                    eight["throughput"] / levels[key]["throughput"], 3
                )
            if key.startswith("c=1") and (eight := levels.get(key.replace("c=1", "c=8"))):
                found[f"{decoder}: first audio p50 c=8 / c=1{key[3:]}"] = round(
                    eight["first_audio_p50_s"] / levels[key]["first_audio_p50_s"], 3
                )
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--assets", type=Path, default=Path("/tmp/chattts-full"), help="full-size assets")
    parser.add_argument("--tokens", type=int, default=128, help="audio tokens per request")
    parser.add_argument("--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[1, 4, 8])
    parser.add_argument("--repeat", type=int, default=2, help="requests per client at concurrency > 1")
    parser.add_argument("--repeat-one", type=int, default=3, help="requests at concurrency 1")
    parser.add_argument("--decoders", default="torch,onnxruntime")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--alternate", action="store_true", help="every gateway up at once, levels in turn")
    parser.add_argument("--rounds", type=int, default=1, help="with --alternate: times each level runs")
    parser.add_argument("--profile", action="store_true", help="the worker's engine time per part")
    args = parser.parse_args()
    load = os.getloadavg()
    decoders = args.decoders.split(",")
    if args.alternate:
        runs = measure_alternating(args.assets, decoders, args)
    else:
        runs = {decoder: measure_decoder(args.assets, decoder, args) for decoder in decoders}
    found = ratios(runs)
    print(f"\n1-minute load average {load[0]:.2f} at the start, {os.getloadavg()[0]:.2f} at the end")
    print("\n| decoder | concurrency | requests | audio s per s | first audio p50 / p90 s | step share |")
    print("|---|---|---|---|---|---|")
    for run in runs.values():
        for level in run["levels"]:
            share = level.get("shares", "")
            print(f"| {run['decoder']} | {level['concurrency']} | {level['requests']} | {level['throughput']} | "
                  f"{level['first_audio_p50_s']} / {level['first_audio_p90_s']} | {share} |")  # fmt: skip
    print()
    for name, value in found.items():
        print(f"- {name}: {value}x")
    report = {"python": platform.python_version(), "tokens": args.tokens, "runs": runs, "ratios": found,
              "load_start_end": [load[0], os.getloadavg()[0]]}  # fmt: skip
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
