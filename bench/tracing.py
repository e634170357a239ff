"""What tracing costs a request's first byte: off (the default), off with a caller's ``traceparent``, and spans
exported over OTLP/HTTP to a receiver on loopback.

    python -m bench.tracing [--rounds 300]

Two gateways on the synthetic engine (no real-time pacing, so the figure is the gateway's own path): one with
``tracing`` unset, one with ``tracing.otlp_endpoint`` set. Each round sends an untraced request and a traced one to
the first and a traced one to the second, one at a time and in a rotating order, each a text of its own (the cache
never answers); the first byte's percentiles per variant, and their ratios to the untraced default from the same run.
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from harness.gateway_process import GatewayProcess
from harness.otlp_receiver import OtlpReceiver

VARIANTS = ("off", "off + traceparent", "exported")


def first_byte_s(client: httpx.Client, base_url: str, headers: dict[str, str], index: int) -> float:
    body = {"model": "tones", "input": f"Tracing round {index:06d}.", "voice": "alloy", "response_format": "pcm"}
    started = time.perf_counter()
    with client.stream("POST", f"{base_url}/v1/audio/speech", json=body, headers=headers) as response:
        chunks = response.iter_raw()
        next(chunks)
        elapsed = time.perf_counter() - started
        assert response.status_code == 200, response.status_code
        for _ in chunks:
            pass
    return elapsed


def traceparent() -> dict[str, str]:
    return {"traceparent": f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"}


def measure(rounds: int, workdir: Path, receiver: OtlpReceiver) -> dict[str, list[float]]:
    engines = {"tones": {"kind": "synthetic", "workers": 1}}
    (workdir / "off").mkdir()
    (workdir / "on").mkdir()
    off = GatewayProcess({"engines": engines}, workdir / "off")
    on = GatewayProcess({"engines": engines, "tracing": {"otlp_endpoint": receiver.url}}, workdir / "on")
    samples: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    with off, on, httpx.Client(timeout=30) as client:
        for index in range(20):  # warm both: connections, the engine's first job
            first_byte_s(client, off.base_url, {}, 10_000_000 + index)
            first_byte_s(client, on.base_url, traceparent(), 20_000_000 + index)
        requests = {
            "off": lambda index: first_byte_s(client, off.base_url, {}, index),
            "off + traceparent": lambda index: first_byte_s(client, off.base_url, traceparent(), index),
            "exported": lambda index: first_byte_s(client, on.base_url, traceparent(), index),
        }
        for index in range(rounds):
            order = VARIANTS[index % 3 :] + VARIANTS[: index % 3]  # each variant first in a third of the rounds
            for offset, variant in enumerate(order):
                samples[variant].append(requests[variant](3 * index + offset))
    return samples


def markdown(samples: dict[str, list[float]], spans: int) -> str:
    base = statistics.median(samples["off"])
    lines = ["| tracing | first byte p50 | p90 | p50 / off |", "|---|---|---|---|"]
    for variant, values in samples.items():
        p50, p90 = statistics.median(values), statistics.quantiles(values, n=10)[-1]
        lines.append(f"| {variant} | {p50 * 1000:.2f} ms | {p90 * 1000:.2f} ms | {p50 / base:.3f}x |")
    lines.append(f"\n{len(samples['off'])} rounds; {spans} spans received by the OTLP receiver.")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir, OtlpReceiver() as receiver:
        samples = measure(args.rounds, Path(workdir), receiver)
        time.sleep(6)  # the batch processor's last export (5 s by default)
        print(markdown(samples, len(receiver.spans)))


if __name__ == "__main__":
    main()
