"""Speech jobs (issue #36): a long job's throughput against the same text sent in pieces, and an interactive request's
first byte while the tenant's job runs.

    .venv/bin/python -m bench.jobs                      # 100,000 characters, about 2 minutes on 2 busy cores
    .venv/bin/python -m bench.jobs --chars 10000        # a smoke run
    .venv/bin/python -m bench.jobs --runner dedicated   # the jobs spoken by a second gateway at nice 10

A ``redis-server`` of its own and one real gateway (``chattts-gateway serve``) with espeak (``--workers`` worker
processes, 2 by default), its audio cache off (the pieces must be spoken, not found), ``jobs.concurrency`` 1.

1. **throughput**: ``--chars`` characters of distinct sentences as one job (created, then its content fetched, which
   follows the job to its end), then the same text through ``POST /v1/audio/speech`` in 4,096-character pieces, one
   after the other (the job's concurrency: it speaks one segment at a time). Audio seconds per wall second of each;
   target: the job ≥ 0.95x the pieces.
2. **first byte**: ``--probes`` short interactive requests of the same tenant, one every ``--gap-s``, timed to their
   first byte: alone, then while a job of the tenant runs. Target: p50 within 1.5x of idle. Job segments wait in the
   engines' ``low`` class, so an interactive request takes the next free worker first; but a segment on a worker runs
   to its end (no preemption): with one worker, a request that arrives while a segment runs waits for it.

``--runner dedicated`` measures the chart's ``jobs.runner: dedicated`` on one machine: the gateway the bench talks to
accepts jobs and serves their audio (``jobs.run: false``), and a second gateway on the same Redis speaks them
(``--runner-workers`` espeak workers, 1 by default), started under ``nice -n --runner-niceness`` (10): the CPU the
separate pods of a cluster would give each, one machine can give only by priority.

Prints a Markdown table and writes every figure to ``bench/results/jobs.json`` (``jobs_dedicated.json`` for
``--runner dedicated``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from bench.held_connections import RedisProcess
from bench.servers import GatewayProcess
from gateway.schemas import MAX_INPUT_CHARS
from gateway.speech.segments import split_text

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["main", "measure"]

RESULTS = Path(__file__).resolve().parent / "results" / "jobs.json"
JOBS = "/v1/audio/speech/jobs"
TARGET_THROUGHPUT = 0.95
TARGET_FIRST_BYTE = 1.5
# Closing the loop on the espeak PCM: 24 kHz, 16 bits.
PCM_BYTES_PER_S = 48_000


def book(chars: int, tag: str) -> str:
    """``chars`` characters of sentences that never repeat (``tag`` keeps two books apart)."""
    sentences, total, i = [], 0, 0
    while total < chars:
        sentence = f"Sentence {i} of book {tag} tells of a fox that ran {i * 7 % 101} miles to find the river. "
        sentences.append(sentence)
        total += len(sentence)
        i += 1
    return "".join(sentences)[:chars].strip()


def job_throughput(client: httpx.Client, text: str) -> dict[str, float]:
    started = time.perf_counter()
    created = client.post(JOBS, json={"model": "espeak", "voice": "alloy", "input": text, "response_format": "pcm"})
    created.raise_for_status()
    job_id = created.json()["id"]
    audio = client.get(f"{JOBS}/{job_id}/content").content
    wall = time.perf_counter() - started
    job = client.get(f"{JOBS}/{job_id}").json()
    assert job["status"] == "completed", job
    seconds = len(audio) / PCM_BYTES_PER_S
    return {"wall_s": wall, "audio_s": seconds, "audio_s_per_s": seconds / wall}


def pieces_throughput(client: httpx.Client, text: str) -> dict[str, float]:
    started, seconds = time.perf_counter(), 0.0
    for piece in split_text(text, MAX_INPUT_CHARS):
        body = {"model": "espeak", "voice": "alloy", "input": piece, "response_format": "pcm"}
        response = client.post("/v1/audio/speech", json=body)
        response.raise_for_status()
        seconds += len(response.content) / PCM_BYTES_PER_S
    wall = time.perf_counter() - started
    return {"wall_s": wall, "audio_s": seconds, "audio_s_per_s": seconds / wall}


def first_bytes(client: httpx.Client, probes: int, gap_s: float, tag: str) -> list[float]:
    """Time to first byte of ``probes`` short requests, one every ``gap_s`` (each text new: no cache, no sharing)."""
    times: list[float] = []
    for i in range(probes):
        text = f"Probe {tag} {i}: are you there?"
        body = {"model": "espeak", "voice": "alloy", "input": text, "response_format": "pcm"}
        started = time.perf_counter()
        with client.stream("POST", "/v1/audio/speech", json=body) as response:
            response.raise_for_status()
            for _ in response.iter_bytes():  # the first chunk's time, then the rest drained
                if len(times) <= i:
                    times.append((time.perf_counter() - started) * 1000)
        time.sleep(gap_s)
    return times


def first_byte_under_a_job(client: httpx.Client, args: argparse.Namespace) -> dict[str, Any]:
    idle = first_bytes(client, args.probes, args.gap_s, "idle")
    text = book(args.chars, "background")
    job = client.post(JOBS, json={"model": "espeak", "voice": "alloy", "input": text, "response_format": "pcm"}).json()
    time.sleep(1.0)  # under way
    busy = first_bytes(client, args.probes, args.gap_s, "busy")
    running = client.get(f"{JOBS}/{job['id']}").json()["status"]
    client.delete(f"{JOBS}/{job['id']}")
    return {
        "idle_ms": idle,
        "busy_ms": busy,
        "job_status_after": running,
        "idle_p50_ms": statistics.median(idle),
        "busy_p50_ms": statistics.median(busy),
        "ratio": statistics.median(busy) / statistics.median(idle),
    }


def gateway_config(redis_url: str, workers: int, *, runs_jobs: bool) -> dict[str, Any]:
    return {
        "redis_url": redis_url,
        "cache": {"enabled": False},
        "engines": {"espeak": {"kind": "espeak", "workers": workers}},
        "aliases": {},
        "jobs": {"concurrency": 1, "run": runs_jobs},
    }


@contextlib.contextmanager
def gateways(args: argparse.Namespace, workdir: Path, redis_url: str) -> Iterator[GatewayProcess]:
    """The gateway the bench talks to; with ``--runner dedicated``, a second one beside it speaks the jobs (what
    the chart's ``jobs.runner: dedicated`` deploys), started under ``nice -n --runner-niceness``."""
    fronts_run_jobs = args.runner == "fronts"
    (workdir / "front").mkdir()
    front = GatewayProcess(gateway_config(redis_url, args.workers, runs_jobs=fronts_run_jobs), workdir / "front")
    with contextlib.ExitStack() as stack:
        if not fronts_run_jobs:
            (workdir / "runner").mkdir()
            config = gateway_config(redis_url, args.runner_workers, runs_jobs=True)
            stack.enter_context(GatewayProcess(config, workdir / "runner", niceness=args.runner_niceness))
        yield stack.enter_context(front)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as workdir:
        redis = RedisProcess(Path(workdir))
        try:
            with (
                gateways(args, Path(workdir), redis.url) as gateway,
                httpx.Client(base_url=gateway.base_url, timeout=3600) as client,
            ):
                text = book(args.chars, "measured")
                job = job_throughput(client, text)
                pieces = pieces_throughput(client, text)
                under_job = first_byte_under_a_job(client, args)
        finally:
            redis.stop()
    return {
        "machine": platform.node(),
        "chars": args.chars,
        "workers": args.workers,
        "runner": args.runner,
        "runner_workers": args.runner_workers if args.runner == "dedicated" else None,
        "runner_niceness": args.runner_niceness if args.runner == "dedicated" else None,
        "job": job,
        "pieces": pieces,
        "throughput_ratio": job["audio_s_per_s"] / pieces["audio_s_per_s"],
        "first_byte": under_job,
    }


def table(result: dict[str, Any]) -> str:
    job, pieces, first = result["job"], result["pieces"], result["first_byte"]
    return "\n".join(
        [
            "| measure | job | pieces / idle | ratio | target |",
            "|---|---|---|---|---|",
            f"| audio s per s, {result['chars']:,} characters | {job['audio_s_per_s']:.1f} "
            f"({job['audio_s']:.0f} s in {job['wall_s']:.1f} s) | {pieces['audio_s_per_s']:.1f} "
            f"({pieces['audio_s']:.0f} s in {pieces['wall_s']:.1f} s) | {result['throughput_ratio']:.3f} "
            f"| ≥ {TARGET_THROUGHPUT} |",
            f"| interactive first byte p50 (ms) | {first['busy_p50_ms']:.1f} while the job runs "
            f"| {first['idle_p50_ms']:.1f} idle | {first['ratio']:.2f} | ≤ {TARGET_FIRST_BYTE} |",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chars", type=int, default=100_000, help="characters of the measured job")
    parser.add_argument("--workers", type=int, default=2, help="espeak worker processes")
    parser.add_argument("--probes", type=int, default=20, help="interactive requests per series")
    parser.add_argument("--gap-s", type=float, default=0.5, help="pause between interactive requests")
    parser.add_argument(
        "--runner",
        choices=("fronts", "dedicated"),
        default="fronts",
        help="fronts: the measured gateway speaks the jobs; dedicated: a second gateway (jobs.run) speaks them",
    )
    parser.add_argument("--runner-workers", type=int, default=1, help="the dedicated runner's espeak workers")
    parser.add_argument("--runner-niceness", type=int, default=10, help="the dedicated runner's nice -n")
    args = parser.parse_args()
    result = measure(args)
    results = RESULTS if args.runner == "fronts" else RESULTS.with_name("jobs_dedicated.json")
    results.parent.mkdir(exist_ok=True)
    results.write_text(json.dumps(result, indent=2) + "\n")
    print(table(result))


if __name__ == "__main__":
    main()
