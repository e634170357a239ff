"""ChatTTS served over HTTP on each decoder (issue #37): ``decoder: torch`` against ``decoder: onnxruntime``.

    .venv/bin/python -m bench.chattts_served --assets /tmp/chattts-full-onnx    # about 10 minutes on 2 cores
    .venv/bin/python -m bench.chattts_served --assets /tmp/chattts-full --decoders onnxruntime+int8 --concurrency 1
    .venv/bin/python -m bench.chattts_served --decoders onnxruntime+int8,onnxruntime+int8+stream_decode_threads=none \
        --concurrency 1 --repeat-one 5    # issue #51: the streaming decode on one torch thread, and on the worker's

For each decoder in turn, one ``chattts-gateway serve`` with one ChatTTS worker on the same assets (``max_batch:
auto``, continuous batching on, ``--tokens`` audio tokens per request: ``min_new_token == max_new_token``, so every
request makes the same audio), an unrecorded request, then closed loops at each ``--concurrency``: N clients each
send ``--repeat`` streamed ``pcm`` requests back to back (concurrency 1: ``--repeat-one``). Per level: audio seconds
per wall second (all the audio over the time from the first send to the last byte) and the time from sending a
request to its first audio byte (median and 90th percentile). Then the ratios the issue asks for: each level's
throughput on onnxruntime over torch's, concurrency 8 over 4, and first audio at 8 over 1.

Prints Markdown tables and writes every figure to ``bench/results/chattts_served.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.servers import gateway

__all__ = ["main", "measure_decoder"]

RESULTS = Path(__file__).resolve().parent / "results" / "chattts_served.json"
SAMPLE_RATE = 24_000
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
            levels = []
            for concurrency in args.concurrency:
                repeat = args.repeat_one if concurrency == 1 else args.repeat
                level = asyncio.run(closed_loop(served.base_url, concurrency, repeat, numbers))
                print(f"  {decoder} c={concurrency}: {level}", flush=True)
                levels.append(level)
        finally:
            served.stop()
    return {"decoder": decoder, "ready_s": round(ready_s, 1), "details": details, "levels": levels}


def ratios(runs: dict[str, dict[str, Any]]) -> dict[str, float]:
    by_level = {run["decoder"]: {level["concurrency"]: level for level in run["levels"]} for run in runs.values()}
    found: dict[str, float] = {}
    torch, onnx = by_level.get("torch", {}), by_level.get("onnxruntime", {})
    for concurrency in sorted(set(torch) & set(onnx)):
        found[f"onnxruntime/torch throughput c={concurrency}"] = round(
            onnx[concurrency]["throughput"] / torch[concurrency]["throughput"], 3
        )
    for decoder, levels in by_level.items():
        if 4 in levels and 8 in levels:
            found[f"{decoder}: throughput c=8 / c=4"] = round(levels[8]["throughput"] / levels[4]["throughput"], 3)
        if 1 in levels and 8 in levels:
            found[f"{decoder}: first audio p50 c=8 / c=1"] = round(
                levels[8]["first_audio_p50_s"] / levels[1]["first_audio_p50_s"], 3
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
    args = parser.parse_args()
    runs = {decoder: measure_decoder(args.assets, decoder, args) for decoder in args.decoders.split(",")}
    found = ratios(runs)
    print("\n| decoder | concurrency | requests | audio s per s | first audio p50 / p90 s |")
    print("|---|---|---|---|---|")
    for run in runs.values():
        for level in run["levels"]:
            print(f"| {run['decoder']} | {level['concurrency']} | {level['requests']} | {level['throughput']} | "
                  f"{level['first_audio_p50_s']} / {level['first_audio_p90_s']} |")  # fmt: skip
    print()
    for name, value in found.items():
        print(f"- {name}: {value}x")
    report = {"python": platform.python_version(), "tokens": args.tokens, "runs": runs, "ratios": found}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
