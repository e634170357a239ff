"""Jobs shared by tenants (issue #47): after one tenant's quota-sized flood of jobs, how soon does another tenant's
one-sentence job start and end, and what first byte do that tenant's interactive requests get beside the flood?

    .venv/bin/python -m bench.jobs_fairness                              # 4 rounds of 8 jobs of 500,000 characters
    .venv/bin/python -m bench.jobs_fairness --chars 100000               # a lighter flood
    .venv/bin/python -m bench.jobs_fairness --low-priority-workers 0     # the jobs sharing espeak's one worker

One real gateway (``chattts-gateway serve``) as deployed by default: no Redis (each process speaks its own jobs),
espeak with its default workers (one, and one ``low_priority_workers`` for the jobs; or ``--workers``,
``--low-priority-workers``), ``jobs`` at its defaults (``concurrency`` 2 or ``--concurrency``, ``segment_chars``
1200), two tenants. ``--rounds`` rounds, idle and flood alternating, each:

1. **first byte, idle**: ``--probes`` short ``/v1/audio/speech`` requests of the bystander, one every ``--gap-s``.
2. **flood**: the flooder, a process of its own at nice 10 (the attacker must not slow the bystander by the CPU of
   its own client), creates ``--jobs`` jobs of ``--chars`` characters in ``mp3`` (8 of 500,000 is what the default
   2 GiB storage quota admits); after ``--settle-s``, the bystander creates a one-sentence job and polls it: the
   seconds until it is ``running`` (its first turn) and until it is ``completed``.
3. **first byte, beside the flood**: the same probes while the flood runs. Then the flood is cancelled.

The ratio of the medians (beside the flood over idle) is taken per round and over all rounds' probes, so that the
load of whatever else runs on the machine (its load average is recorded) weighs on both sides alike. Prints a
Markdown table and writes every figure to ``bench/results/jobs_fairness.json``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import statistics
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from auth.keys import generate_api_key, hash_api_key
from bench.jobs import book, first_bytes
from bench.servers import GatewayProcess

if TYPE_CHECKING:
    from multiprocessing.queues import Queue
    from multiprocessing.synchronize import Event

__all__ = ["main", "measure"]

RESULTS = Path(__file__).resolve().parent / "results" / "jobs_fairness.json"
JOBS = "/v1/audio/speech/jobs"
TARGET_START_S = 20.0
TARGET_RATIO = 3.0
ATTACKER_NICENESS = 10


def gateway_config(flooder: str, bystander: str, args: argparse.Namespace) -> dict[str, Any]:
    """The defaults, but for the tenants and what ``--workers``, ``--low-priority-workers`` and ``--concurrency``
    set."""
    tenants = [
        {"name": "flooder", "api_key_sha256": [hash_api_key(flooder)]},
        {"name": "bystander", "api_key_sha256": [hash_api_key(bystander)]},
    ]
    espeak: dict[str, Any] = {"kind": "espeak"}
    if args.workers is not None:
        espeak["workers"] = args.workers
    if args.low_priority_workers is not None:
        espeak["low_priority_workers"] = args.low_priority_workers
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


@dataclass(frozen=True)
class Flood:
    """What the attacker creates, and where."""

    base_url: str
    key: str
    jobs: int
    chars: int
    tag: str
    response_format: str = "mp3"


def _flooder(flood_of: Flood, signals: tuple[Event, Event], done: Queue[int]) -> None:
    """The attacker, at a lower CPU priority: creates the flood, waits to be stopped, then deletes it and reports the
    characters it had spoken."""
    os.nice(ATTACKER_NICENESS)
    flooding, stop = signals
    with httpx.Client(base_url=flood_of.base_url, timeout=600, headers=_auth(flood_of.key)) as client:
        flood = [
            create(client, book(flood_of.chars, f"{flood_of.tag}-{i}"), flood_of.response_format)
            for i in range(flood_of.jobs)
        ]
        flooding.set()
        stop.wait()
        states = [client.get(f"{JOBS}/{job_id}").json() for job_id in flood]
        for job_id in flood:
            client.delete(f"{JOBS}/{job_id}")
    done.put(sum(state["progress"]["characters_done"] for state in states))


def one_round(flood: Flood, bystander: httpx.Client, args: argparse.Namespace, number: int) -> dict[str, Any]:
    """Idle probes, then the flood (created by a niced process), the bystander's job and the probes beside it."""
    context = multiprocessing.get_context("spawn")
    flooding, stop, done = context.Event(), context.Event(), context.Queue()
    idle = first_bytes(bystander, args.probes, args.gap_s, f"idle{number}")
    attacker = context.Process(target=_flooder, args=(replace(flood, tag=f"r{number}"), (flooding, stop), done))
    attacker.start()
    try:
        if not flooding.wait(120):
            raise RuntimeError("the flooder did not create its jobs within 120 s")
        time.sleep(args.settle_s)  # the flood is under way
        started = time.perf_counter()
        short = bystander_job(bystander, timeout_s=120)
        busy = first_bytes(bystander, args.probes, args.gap_s, f"busy{number}")
        flood_s = time.perf_counter() - started + args.settle_s
    finally:
        stop.set()
    characters = done.get(timeout=120)
    attacker.join(30)
    return {
        "idle_ms": idle,
        "busy_ms": busy,
        "idle_p50_ms": statistics.median(idle),
        "busy_p50_ms": statistics.median(busy),
        "ratio": statistics.median(busy) / statistics.median(idle),
        "bystander_job": short,
        "flood_characters_done": characters,
        "flood_characters_per_s": characters / flood_s,
    }


def measure(args: argparse.Namespace) -> dict[str, Any]:
    flooder_key, bystander_key = generate_api_key(), generate_api_key()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as workdir:
        gateway = GatewayProcess(gateway_config(flooder_key, bystander_key, args), Path(workdir)).start()
        try:
            with httpx.Client(base_url=gateway.base_url, timeout=600, headers=_auth(bystander_key)) as bystander:
                flood = Flood(gateway.base_url, flooder_key, args.jobs, args.chars, "", args.format)
                rounds = [one_round(flood, bystander, args, number) for number in range(args.rounds)]
        finally:
            gateway.stop()
    idle = [ms for one in rounds for ms in one["idle_ms"]]
    busy = [ms for one in rounds for ms in one["busy_ms"]]
    return {
        "machine": platform.node(),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "flood": {
            "jobs": args.jobs,
            "chars": args.chars,
            "format": args.format,
            "attacker_niceness": ATTACKER_NICENESS,
        },
        "espeak_workers": args.workers,
        "espeak_low_priority_workers": args.low_priority_workers,
        "jobs_concurrency": args.concurrency,
        "rounds": rounds,
        "first_byte": {
            "idle_p50_ms": statistics.median(idle),
            "busy_p50_ms": statistics.median(busy),
            "ratio": statistics.median(busy) / statistics.median(idle),
            "round_ratios": [one["ratio"] for one in rounds],
        },
    }


def _cpu_model() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor()
    fields = {name.strip(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
    return f"{fields.get('model name', '')} (family {fields.get('cpu family')}, model {fields.get('model')})"


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def table(result: dict[str, Any]) -> str:
    first, flood = result["first_byte"], result["flood"]
    lines = [
        f"Flood: {flood['jobs']} jobs of {flood['chars']:,} characters (attacker at nice {flood['attacker_niceness']});"
        f" {result['cpu']}, {result['cores']} cores, load average {result['load_average_before'][0]:.1f} → "
        f"{result['load_average_after'][0]:.1f}",
        "",
        "| round | first byte p50, idle → beside the flood | bystander's job running / completed | flood chars/s |",
        "|---|---|---|---|",
    ]
    for number, one in enumerate(result["rounds"]):
        short = one["bystander_job"]
        running = "never" if short["running_s"] is None else f"{short['running_s']:.2f} s"
        completed = "not within 120 s" if short["completed_s"] is None else f"{short['completed_s']:.2f} s"
        lines.append(
            f"| {number + 1} | {one['idle_p50_ms']:.1f} → {one['busy_p50_ms']:.1f} ms ({one['ratio']:.2f}x) | "
            f"{running} / {completed} | {one['flood_characters_per_s']:,.0f} |"
        )
    lines.append(
        f"| all | {first['idle_p50_ms']:.1f} → {first['busy_p50_ms']:.1f} ms ({first['ratio']:.2f}x; target ≤ "
        f"{TARGET_RATIO:.0f}x) | target ≤ {TARGET_START_S:.0f} s running | |"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=4, help="rounds of idle, then flood")
    parser.add_argument("--jobs", type=int, default=8, help="the flood's jobs")
    parser.add_argument("--chars", type=int, default=500_000, help="characters of each of the flood's jobs")
    parser.add_argument("--format", default="mp3", help="the flood's response_format (pcm: no encoding)")
    parser.add_argument("--settle-s", type=float, default=3.0, help="how long the flood runs before the bystander")
    parser.add_argument("--probes", type=int, default=10, help="interactive requests per series")
    parser.add_argument("--gap-s", type=float, default=0.3, help="pause between interactive requests")
    parser.add_argument("--workers", type=int, default=None, help="espeak workers (default: the engine's default)")
    parser.add_argument(
        "--low-priority-workers", type=int, default=None, help="espeak's workers for jobs (default: its default)"
    )
    parser.add_argument("--concurrency", type=int, default=None, help="jobs.concurrency (default: its default)")
    args = parser.parse_args()
    result = measure(args)
    RESULTS.parent.mkdir(exist_ok=True)
    settings = {"w": args.workers, "l": args.low_priority_workers, "c": args.concurrency}
    suffix = "".join(f"_{letter}{value}" for letter, value in settings.items() if value is not None)
    RESULTS.with_stem(RESULTS.stem + suffix).write_text(json.dumps(result, indent=2) + "\n")
    print(table(result))


if __name__ == "__main__":
    main()
