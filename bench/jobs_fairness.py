"""Jobs shared by tenants (issue #47): after one tenant's quota-sized flood of jobs, how soon does another tenant's
one-sentence job start and end, and what first byte do that tenant's interactive requests get beside the flood?

    .venv/bin/python -m bench.jobs_fairness                  # 8 jobs of 500,000 characters, about a minute
    .venv/bin/python -m bench.jobs_fairness --chars 100000   # a lighter flood

One real gateway (``chattts-gateway serve``) as deployed by default: no Redis (each process speaks its own jobs),
espeak with its default worker (or ``--workers``), ``jobs`` at its defaults (``concurrency`` 2 or ``--concurrency``,
``segment_chars`` 1200), two tenants.

1. **first byte, idle**: ``--probes`` short ``/v1/audio/speech`` requests of the bystander, one every ``--gap-s``.
2. **flood**: the flooder creates ``--jobs`` jobs of ``--chars`` characters in ``mp3`` (8 of 500,000 is what the
   default 2 GiB storage quota admits); after ``--settle-s``, the bystander creates a one-sentence job and polls it:
   the seconds until it is ``running`` (its first turn) and until it is ``completed``.
3. **first byte, beside the flood**: the same probes while the flood runs. Then the flood is cancelled.

Prints a Markdown table and writes every figure to ``bench/results/jobs_fairness.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from auth.keys import generate_api_key, hash_api_key
from bench.jobs import book, first_bytes
from bench.servers import GatewayProcess

__all__ = ["main", "measure"]

RESULTS = Path(__file__).resolve().parent / "results" / "jobs_fairness.json"
JOBS = "/v1/audio/speech/jobs"
TARGET_START_S = 20.0


def gateway_config(flooder: str, bystander: str, args: argparse.Namespace) -> dict[str, Any]:
    """The defaults, but for the tenants and what ``--workers`` and ``--concurrency`` set."""
    tenants = [
        {"name": "flooder", "api_key_sha256": [hash_api_key(flooder)]},
        {"name": "bystander", "api_key_sha256": [hash_api_key(bystander)]},
    ]
    espeak: dict[str, Any] = {"kind": "espeak"}
    if args.workers is not None:
        espeak["workers"] = args.workers
    config: dict[str, Any] = {"auth": {"tenants": tenants}, "engines": {"espeak": espeak}, "aliases": {}}
    if args.concurrency is not None:
        config["jobs"] = {"concurrency": args.concurrency}
    return config


def create(client: httpx.Client, text: str, response_format: str) -> str:
    body = {"model": "espeak", "voice": "alloy", "input": text, "response_format": response_format}
    response = client.post(JOBS, json=body)
    response.raise_for_status()
    return str(response.json()["id"])


def bystander_job(client: httpx.Client, timeout_s: float) -> dict[str, float | None]:
    """Seconds from creating a one-sentence job to its ``running`` and to its ``completed``."""
    started = time.perf_counter()
    job_id = create(client, "The bystander asks for one short sentence, spoken now.", "mp3")
    running_s = None
    while time.perf_counter() - started < timeout_s:
        status = client.get(f"{JOBS}/{job_id}").json()["status"]
        if status != "queued" and running_s is None:
            running_s = time.perf_counter() - started
        if status == "completed":
            return {"running_s": running_s, "completed_s": time.perf_counter() - started}
        time.sleep(0.02)
    return {"running_s": running_s, "completed_s": None}


def measure(args: argparse.Namespace) -> dict[str, Any]:
    flooder_key, bystander_key = generate_api_key(), generate_api_key()
    with tempfile.TemporaryDirectory() as workdir:
        gateway = GatewayProcess(gateway_config(flooder_key, bystander_key, args), Path(workdir)).start()
        try:
            with (
                httpx.Client(base_url=gateway.base_url, timeout=600, headers=_auth(flooder_key)) as flooder,
                httpx.Client(base_url=gateway.base_url, timeout=600, headers=_auth(bystander_key)) as bystander,
            ):
                idle = first_bytes(bystander, args.probes, args.gap_s, "idle")
                flood = [create(flooder, book(args.chars, f"flood{i}"), "mp3") for i in range(args.jobs)]
                time.sleep(args.settle_s)  # the flood is under way
                short = bystander_job(bystander, timeout_s=120)
                busy = first_bytes(bystander, args.probes, args.gap_s, "busy")
                states = [flooder.get(f"{JOBS}/{job_id}").json() for job_id in flood]
                for job_id in flood:
                    flooder.delete(f"{JOBS}/{job_id}")
        finally:
            gateway.stop()
    return {
        "machine": platform.node(),
        "flood": {"jobs": args.jobs, "chars": args.chars},
        "espeak_workers": args.workers,
        "jobs_concurrency": args.concurrency,
        "bystander_job": short,
        "flood_characters_done": sum(state["progress"]["characters_done"] for state in states),
        "first_byte": {
            "idle_ms": idle,
            "busy_ms": busy,
            "idle_p50_ms": statistics.median(idle),
            "busy_p50_ms": statistics.median(busy),
            "ratio": statistics.median(busy) / statistics.median(idle),
        },
    }


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def table(result: dict[str, Any]) -> str:
    short, first, flood = result["bystander_job"], result["first_byte"], result["flood"]
    running = "never" if short["running_s"] is None else f"{short['running_s']:.2f} s"
    completed = "not within 120 s" if short["completed_s"] is None else f"{short['completed_s']:.2f} s"
    return "\n".join(
        [
            f"Flood: {flood['jobs']} jobs of {flood['chars']:,} characters; bystander's one-sentence job:",
            "",
            "| measure | value | target |",
            "|---|---|---|",
            f"| bystander's job running after | {running} | ≤ {TARGET_START_S:.0f} s |",
            f"| bystander's job completed after | {completed} | |",
            f"| interactive first byte p50, idle → beside the flood | {first['idle_p50_ms']:.1f} → "
            f"{first['busy_p50_ms']:.1f} ms ({first['ratio']:.2f}x) | |",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=8, help="the flood's jobs")
    parser.add_argument("--chars", type=int, default=500_000, help="characters of each of the flood's jobs")
    parser.add_argument("--settle-s", type=float, default=3.0, help="how long the flood runs before the bystander")
    parser.add_argument("--probes", type=int, default=10, help="interactive requests per series")
    parser.add_argument("--gap-s", type=float, default=0.3, help="pause between interactive requests")
    parser.add_argument("--workers", type=int, default=None, help="espeak workers (default: the engine's default)")
    parser.add_argument("--concurrency", type=int, default=None, help="jobs.concurrency (default: its default)")
    args = parser.parse_args()
    result = measure(args)
    RESULTS.parent.mkdir(exist_ok=True)
    suffix = "" if args.workers is None and args.concurrency is None else f"_w{args.workers}_c{args.concurrency}"
    RESULTS.with_stem(RESULTS.stem + suffix).write_text(json.dumps(result, indent=2) + "\n")
    print(table(result))


if __name__ == "__main__":
    main()
