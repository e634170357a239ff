"""What hostile uploads (issue #39) cost a live gateway, and what they cost another tenant meanwhile.

    .venv/bin/python -m bench.hostile_uploads                        # a minute or two on a fixed gateway
    .venv/bin/python -m bench.hostile_uploads --rounds 5             # more timed uploads per file and route
    .venv/bin/python -m bench.hostile_uploads --only wav_380mhz      # some files only (repeat --only)
    .venv/bin/python -m bench.hostile_uploads --bystander-model espeak --output bench/results/hostile_espeak.json
    .venv/bin/python -m bench.hostile_uploads --decoder-priority low  # decoders at niceness +10, not SCHED_IDLE

One ``chattts-gateway serve`` (``harness.hostile_uploads.upload_gateway_config``: the synthetic engine, no Redis) with
four attacking tenants and a bystander. Two parts:

- **uploads**: every file of ``HOSTILE_UPLOADS`` through both upload routes, ``--rounds`` times each: the median
  time from sending it to the answer, the answer's status and code, the server's resident memory then (now, and its
  peak: Linux's VmHWM, which still shows a decoding freed since) over its level after warm-up, and whether it is
  still the same process. A server that died is started again and the row says so, so that the same bench measures
  a gateway before the fix.
- **bystander**: the other tenant's speech (a short ``pcm`` request, streamed, from the synthetic engine or, with
  ``--bystander-model espeak``, from espeak, whose speech takes real work), ``--speech`` requests one after
  another: its time to first byte when idle; while one attacker sends the hostile files back to back; while eight
  do at once (two per attacking tenant, within a tenant's uploads in flight). The attackers run in a process of their
  own, so that their threads do not slow the bench's own timing of the bystander. Percentiles, and the median over
  idle's median: what the attack costs a tenant who is not attacking.

Prints Markdown tables and writes every figure to ``bench/results/hostile_uploads.json`` (``--output`` elsewhere).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import multiprocessing
import os
import platform
import statistics
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import numpy as np
import psutil

from auth.keys import generate_api_key
from harness.gateway_process import GatewayProcess
from harness.hostile_uploads import (
    CLONING_MODEL,
    HOSTILE_UPLOADS,
    UPLOAD_ROUTES,
    ServerFootprint,
    UploadClient,
    UploadRoute,
    upload_gateway_config,
)
from harness.recordings import recording

if TYPE_CHECKING:
    from collections.abc import Iterator
    from multiprocessing.queues import Queue
    from multiprocessing.synchronize import Event

__all__ = ["Answer", "Arena", "BystanderRow", "UploadRow", "main", "measure_bystander", "measure_uploads"]

RESULTS = Path(__file__).resolve().parent / "results" / "hostile_uploads.json"
ROUTES: list[UploadRoute] = sorted(UPLOAD_ROUTES)
ATTACKERS = 4
VOLLEY = 8
# Fixed length, so every clip lasts the same, and a number in each, so that no request shares another's synthesis.
SPEECH_TEXT = "Bystander request %06d."
MB = 1e6
PERCENTILES = (50, 90, 99)


@dataclass(frozen=True, slots=True)
class Answer:
    """What one upload got: seconds to the answer, its status and error code (``None``: no answer, the connection
    dropped or was refused)."""

    seconds: float
    status: int | None
    code: str | None


@dataclass(frozen=True, slots=True)
class UploadRow:
    file: str
    route: str
    upload_bytes: int
    status: int | None
    """The last answer's status (``None``: none came, the server had died)."""
    code: str | None
    answer_ms: float
    """Median over the rounds, from sending the upload to its whole answer."""
    rss_growth_mb: float | None
    """Resident memory afterwards over its level after warm-up (``None``: the server had died)."""
    peak_rss_growth_mb: float | None
    """The most resident memory the server ever had over that level (Linux's VmHWM)."""
    same_process: bool
    """The server answering afterwards is the one that was warmed up."""


@dataclass(frozen=True, slots=True)
class BystanderRow:
    load: str
    attackers: int
    requests: int
    served: int
    """Requests answered 200 with audio."""
    first_byte_ms: dict[str, float | None]
    ratio_to_idle: float | None
    """This load's median time to first byte over idle's."""
    upload_statuses: dict[str, int]
    """What the hostile uploads sent while the bystander was measured got, by status (``none``: no answer)."""


class Arena:
    """The gateway under attack, with its attacking tenants' clients and the bystander's; started again when an upload
    kills it (a gateway without the fix)."""

    def __init__(self, workdir: Path, bystander_model: str, decoder_priority: str) -> None:
        self.workdir = workdir
        self.bystander_model = bystander_model
        self.decoder_priority = decoder_priority
        self.keys = {"bystander": generate_api_key()} | {f"attacker-{i}": generate_api_key() for i in range(ATTACKERS)}
        self.restarts = 0
        self.speech_numbers = itertools.count()
        self._start()

    def _start(self) -> None:
        run = self.workdir / f"run{self.restarts}"
        run.mkdir(parents=True)
        config = upload_gateway_config(self.keys, espeak=self.bystander_model == "espeak")
        config["uploads"] = {"decoder_priority": self.decoder_priority}
        self.gateway = GatewayProcess(config, run).start()
        self.attackers = [UploadClient(self.gateway.base_url, self.keys[f"attacker-{i}"]) for i in range(ATTACKERS)]
        headers = {"authorization": f"Bearer {self.keys['bystander']}"}
        self.bystander = httpx.Client(base_url=self.gateway.base_url, headers=headers, timeout=120)
        self.warm = self._warm_up()

    def _warm_up(self) -> ServerFootprint:
        """An ordinary upload on each route and a speech request (each loads what it needs once), then the footprint
        every later one is compared with."""
        for route in ROUTES:
            accepted = self.attackers[0].upload(route, recording("wav"), "warm-up.wav")
            accepted.raise_for_status()
            self.attackers[0].forget(route, accepted)
        if self.first_byte_s() is None:
            raise RuntimeError(f"the bystander's speech failed after start:\n{self.gateway.log()[-4000:]}")
        assert self.gateway.process is not None
        return ServerFootprint.of(self.gateway.process.pid)

    def first_byte_s(self) -> float | None:
        """The bystander's next speech request: see :func:`first_byte_s`."""
        return first_byte_s(self.bystander, next(self.speech_numbers), self.bystander_model)

    def alive(self) -> bool:
        """Running and answering: a server that dropped a connection as it crashed may not have exited yet."""
        if self.gateway.process is None or self.gateway.process.poll() is not None:
            return False
        try:
            return httpx.get(f"{self.gateway.base_url}/healthz", timeout=10).status_code == httpx.codes.OK
        except httpx.TransportError:
            return False

    def footprint(self) -> ServerFootprint | None:
        """The server's footprint, ``None`` once it has died (or is dying: a zombie shows no memory)."""
        try:
            return ServerFootprint.of(self.warm.pid) if self.alive() else None
        except (psutil.Error, FileNotFoundError):
            return None

    def revive(self) -> None:
        """Start the gateway again if it died."""
        if self.alive():
            return
        returncode = self.gateway.stop()  # reaps it, or ends what is left of it
        print(f"  the gateway died ({returncode}); starting it again", flush=True)
        self._close_clients()
        self.restarts += 1
        self._start()

    def _close_clients(self) -> None:
        for attacker in self.attackers:
            attacker.close()
        self.bystander.close()

    def close(self) -> None:
        self._close_clients()
        self.gateway.stop()


# -------------------------------------------------------------------------------------------------------- uploads
def send(client: UploadClient, route: UploadRoute, data: bytes) -> Answer:
    """One upload, timed to its whole answer; whatever it made is deleted."""
    started = time.perf_counter()
    try:
        response = client.upload(route, data, "hostile.bin")
    except httpx.TransportError:
        return Answer(time.perf_counter() - started, None, None)
    seconds = time.perf_counter() - started
    code = None
    if response.is_error and response.headers.get("content-type", "").startswith("application/json"):
        code = response.json()["error"]["code"]
    client.forget(route, response)
    return Answer(seconds, response.status_code, code)


def _upload_row(arena: Arena, name: str, route: UploadRoute, rounds: int) -> UploadRow:
    data = HOSTILE_UPLOADS[name]()
    answers: list[Answer] = []
    for _ in range(rounds):
        answers.append(send(arena.attackers[0], route, data))
        if answers[-1].status is None:
            break  # the server is gone: later rounds would time a refused connection
    now = arena.footprint()
    warm = arena.warm
    return UploadRow(
        file=name,
        route=route,
        upload_bytes=len(data),
        status=answers[-1].status,
        code=answers[-1].code,
        answer_ms=statistics.median(answer.seconds for answer in answers) * 1000,
        rss_growth_mb=None if now is None else (now.rss - warm.rss) / MB,
        peak_rss_growth_mb=None if now is None else (now.peak_rss - warm.peak_rss) / MB,
        same_process=now is not None and now.same_process(warm),
    )


def measure_uploads(arena: Arena, names: list[str], rounds: int) -> list[UploadRow]:
    """A row per hostile file and route; the gateway is started again after one that killed it."""
    rows = []
    for name in names:
        for route in ROUTES:
            rows.append(row := _upload_row(arena, name, route, rounds))
            print(f"  {name} -> {route}: {row.status} {row.code} in {row.answer_ms:.0f} ms", flush=True)
            arena.revive()
    return rows


# -------------------------------------------------------------------------------------------------------- bystander
def percentiles(values_ms: list[float]) -> dict[str, float | None]:
    """The shape of ``bench.ttfb.percentiles``, written again: importing that module needs matplotlib (the bench
    extra), which this bench does not."""
    if not values_ms:
        return {f"p{p}": None for p in PERCENTILES}
    return {f"p{p}": round(float(np.percentile(values_ms, p)), 2) for p in PERCENTILES}


def first_byte_s(client: httpx.Client, number: int, model: str) -> float | None:
    """Seconds to the first byte of a short speech request's audio, read to its end; ``None`` if it was not served."""
    body = {"model": model, "input": SPEECH_TEXT % number, "voice": "alloy", "response_format": "pcm"}
    started = time.perf_counter()
    try:
        with client.stream("POST", "/v1/audio/speech", json=body) as response:
            if response.status_code != httpx.codes.OK:
                return None
            chunks = response.iter_raw()
            next(chunks)
            first = time.perf_counter() - started
            for _ in chunks:
                pass
    except (httpx.TransportError, StopIteration):
        return None
    return first


def _attack(client: UploadClient, files: list[bytes], start: int, stop: Event, answers: list[Answer]) -> None:
    """The hostile files back to back, both routes in turn, until ``stop``."""
    for index in itertools.count(start):
        if stop.is_set():
            return
        answers.append(send(client, ROUTES[index % len(ROUTES)], files[index % len(files)]))


def _attackers(
    *,
    base_url: str,
    keys: list[str],
    names: list[str],
    count: int,
    ready: Event,
    stop: Event,
    out: Queue[list[tuple[float, int | None, str | None]]],
) -> None:
    """The attacking process: ``count`` threads over the attacking tenants' clients until ``stop``; the answers
    they got are put on ``out``. Apart from the bench's process, so that the attackers' Python threads do not hold the
    GIL the bystander's timing needs: the server's cost is what is measured, not the client's. At the lowest CPU
    priority, for the same reason: on a real server the attackers' clients run on other machines, not on its cores."""
    os.nice(19)
    files = [HOSTILE_UPLOADS[name]() for name in names]
    clients = [UploadClient(base_url, key) for key in keys]
    answers: list[Answer] = []
    threads = [
        threading.Thread(target=_attack, args=(clients[i % len(clients)], files, i, stop, answers))
        for i in range(count)
    ]
    for thread in threads:
        thread.start()
    ready.set()
    for thread in threads:
        thread.join()
    for client in clients:
        client.close()
    out.put([(answer.seconds, answer.status, answer.code) for answer in answers])  # plain tuples: run as __main__,
    # this module's classes would not unpickle by name in the other process


@contextlib.contextmanager
def attacked(arena: Arena, attackers: int, names: list[str]) -> Iterator[list[Answer]]:
    """``attackers`` threads, in a process of their own, sending the files ``names`` for as long as the block runs,
    spread over the attacking tenants; the answers they got, once the block has ended."""
    answers: list[Answer] = []
    if attackers == 0:
        yield answers
        return
    context = multiprocessing.get_context("spawn")
    ready, stop, out = context.Event(), context.Event(), context.Queue()
    keys = [arena.keys[f"attacker-{i}"] for i in range(ATTACKERS)]
    plan = {"base_url": arena.gateway.base_url, "keys": keys, "names": names, "count": attackers}
    process = context.Process(target=_attackers, kwargs={**plan, "ready": ready, "stop": stop, "out": out})
    process.start()
    try:
        if not ready.wait(120):
            raise RuntimeError("the attackers never started")
        yield answers
    finally:
        stop.set()
        answers += [Answer(*answer) for answer in out.get(timeout=300)]
        process.join(30)


def measure_bystander(arena: Arena, names: list[str], requests: int) -> list[BystanderRow]:
    """The bystander's time to first byte idle, under one attacker, under :data:`VOLLEY` at once."""
    rows: list[BystanderRow] = []
    for load, attackers in (("idle", 0), ("back to back", 1), ("at once", VOLLEY)):
        with attacked(arena, attackers, names) as answers:
            firsts = [arena.first_byte_s() for _ in range(requests)]
        statuses = Counter(str(answer.status).lower() for answer in answers)
        served = [first * 1000 for first in firsts if first is not None]
        figures = percentiles(served)
        idle = rows[0].first_byte_ms["p50"] if rows else figures["p50"]
        median = figures["p50"]
        ratio = median / idle if median is not None and idle else None
        rows.append(BystanderRow(load, attackers, requests, len(served), figures, ratio, dict(statuses)))
        print(f"  bystander, {load}: p50 {median} ms, {len(served)}/{requests} served", flush=True)
        arena.revive()
    return rows


# -------------------------------------------------------------------------------------------------------- report
def _mb(value: float | None) -> str:
    return "died" if value is None else f"{value:+.1f}"


def _statuses(counts: dict[str, int]) -> str:
    return ", ".join(f"{count} x {status}" for status, count in sorted(counts.items())) or "none sent"


def print_tables(uploads: list[UploadRow], bystander: list[BystanderRow], restarts: int) -> None:
    print("\n| file | route | bytes | status | code | answer ms | RSS MB | peak RSS MB | same process |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in uploads:
        print(
            f"| {row.file} | {row.route} | {row.upload_bytes:,} | {row.status or 'none'} | {row.code or ''} | "
            f"{row.answer_ms:.0f} | {_mb(row.rss_growth_mb)} | {_mb(row.peak_rss_growth_mb)} | "
            f"{'yes' if row.same_process else 'NO'} |"
        )
    print("\nThe other tenant's speech, time to first byte (ms):\n")
    print("| load | attackers | served | p50 | p90 | p99 | p50 / idle p50 | hostile uploads, by status |")
    print("|---|---|---|---|---|---|---|---|")
    for b in bystander:
        ms = b.first_byte_ms
        ratio = "" if b.ratio_to_idle is None else f"{b.ratio_to_idle:.2f}"
        print(f"| {b.load} | {b.attackers} | {b.served}/{b.requests} | {ms['p50']} | {ms['p90']} | {ms['p99']} | "
              f"{ratio} | {_statuses(b.upload_statuses)} |")  # fmt: skip
    print(f"\nThe gateway was started again {restarts} times (after an upload killed it).")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="timed uploads per file and route")
    parser.add_argument("--speech", type=int, default=50, help="the bystander's speech requests per load")
    parser.add_argument("--only", action="append", choices=sorted(HOSTILE_UPLOADS), help="this file only (repeat)")
    parser.add_argument("--output", type=Path, default=RESULTS, help="where the JSON goes")
    parser.add_argument(
        "--bystander-model",
        choices=[CLONING_MODEL, "espeak"],
        default=CLONING_MODEL,
        help="the engine the other tenant's speech asks for (espeak: the embedded default's, real work per request)",
    )
    parser.add_argument(
        "--decoder-priority",
        choices=["idle", "low"],
        default="idle",
        help="the gateway's uploads.decoder_priority (idle: its default)",
    )
    args = parser.parse_args()
    names: list[str] = args.only or list(HOSTILE_UPLOADS)
    with tempfile.TemporaryDirectory(prefix="hostile-uploads-") as workdir:
        arena = Arena(Path(workdir), args.bystander_model, args.decoder_priority)
        try:
            uploads = measure_uploads(arena, names, args.rounds)
            bystander = measure_bystander(arena, names, args.speech)
        finally:
            arena.close()
    print_tables(uploads, bystander, arena.restarts)
    report = {
        "python": platform.python_version(),
        "rounds": args.rounds,
        "speech_requests": args.speech,
        "restarts": arena.restarts,
        "bystander_model": args.bystander_model,
        "decoder_priority": args.decoder_priority,
        "uploads": [asdict(row) for row in uploads],
        "bystander": [asdict(row) for row in bystander],
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
