"""A closed-loop async httpx load generator, bounded by request count and duration.

``concurrency`` tasks each send one request, read the whole response, and send the next, until the duration has
passed or the request budget is spent. Latency is from sending the request to having read the last body byte.
A ``503`` is recorded separately (with its latency); the task then pauses ``reject_pause_s`` before its next request,
as a client backing off would, so a full queue does not turn into a busy loop of rejections.
"""

from __future__ import annotations

import asyncio
import functools
import resource
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np
import psutil

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["LoadResult", "ProcessTreeCPU", "run_load"]


@dataclass
class LoadResult:
    """What one load run measured. Throughput counts only ``200`` responses."""

    label: str
    concurrency: int
    wall_s: float = 0.0
    ok_latencies: list[float] = field(default_factory=list)
    rejected_latencies: list[float] = field(default_factory=list)
    errors: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    cache_hits: int = 0
    body_sizes: set[int] = field(default_factory=set)
    client_cpu_s: float = 0.0
    server_cpu_s: float | None = None

    @property
    def requests(self) -> int:
        return len(self.ok_latencies) + len(self.rejected_latencies) + self.errors

    @property
    def rps(self) -> float:
        return len(self.ok_latencies) / self.wall_s if self.wall_s else 0.0

    def summary(self) -> dict[str, Any]:
        ok = np.array(self.ok_latencies) * 1000
        rejected = np.array(self.rejected_latencies) * 1000
        total = max(1, self.requests)
        return {
            "label": self.label,
            "concurrency": self.concurrency,
            "requests": self.requests,
            "ok": len(ok),
            "wall_s": round(self.wall_s, 3),
            "rps": round(self.rps, 2),
            "mean_ms": round(float(ok.mean()), 3) if ok.size else None,
            "median_ms": round(float(np.median(ok)), 3) if ok.size else None,
            "p99_ms": round(float(np.percentile(ok, 99)), 3) if ok.size else None,
            "rejected": len(rejected),
            "rejected_share": round(len(rejected) / total, 4),
            "rejected_median_ms": round(float(np.median(rejected)), 3) if rejected.size else None,
            "rejected_p99_ms": round(float(np.percentile(rejected, 99)), 3) if rejected.size else None,
            "errors": self.errors,
            "error_rate": round(self.errors / total, 4),
            "statuses": dict(self.statuses),
            "cache_hits": self.cache_hits,
            "body_sizes": sorted(self.body_sizes),
            "client_cpu_share": round(self.client_cpu_s / self.wall_s, 3) if self.wall_s else None,
            "server_cpu_ms_per_ok": (round(self.server_cpu_s * 1000 / len(ok), 4)
                                     if self.server_cpu_s is not None and ok.size else None),
        }  # fmt: skip


class ProcessTreeCPU:
    """CPU seconds (user + system) used so far by a process and all its descendants."""

    def __init__(self, pid: int) -> None:
        self.root = psutil.Process(pid)

    def seconds(self) -> float:
        total = 0.0
        for process in [self.root, *self.root.children(recursive=True)]:
            try:
                times = process.cpu_times()
            except psutil.NoSuchProcess:
                continue
            total += times.user + times.system
        return total


def _client_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _phase(
    client: httpx.AsyncClient,
    url: str,
    body: bytes | Callable[[], bytes],
    result: LoadResult | None,
    *,
    concurrency: int,
    duration_s: float,
    max_requests: int,
    reject_pause_s: float,
) -> float:
    """Runs the closed loop; records into ``result`` (None: warm-up). Returns the start time."""
    started = time.perf_counter()
    deadline = started + duration_s
    issued = 0
    last_end = started
    headers = {"content-type": "application/json"}

    async def task() -> None:
        nonlocal issued, last_end
        while time.perf_counter() < deadline and issued < max_requests:
            issued += 1
            sent = time.perf_counter()
            status: int | str  # the HTTP status, or the name of the error that left none
            try:
                content = body() if callable(body) else body
                response = await client.post(url, content=content, headers=headers)
                status = response.status_code
                size = len(response.content)
            except httpx.HTTPError as exc:
                status, size = type(exc).__name__, -1
                response = None
            ended = time.perf_counter()
            last_end = max(last_end, ended)
            if result is not None:
                result.statuses[str(status)] += 1
                if status == 200:
                    result.ok_latencies.append(ended - sent)
                    result.body_sizes.add(size)
                    if response is not None and response.headers.get("x-cache") == "hit":
                        result.cache_hits += 1
                elif status == 503:
                    result.rejected_latencies.append(ended - sent)
                else:
                    result.errors += 1
            if status == 503:
                await asyncio.sleep(reject_pause_s)
            elif status != 200:
                await asyncio.sleep(0.01)  # an error must not become a busy loop

    await asyncio.gather(*(task() for _ in range(concurrency)))
    if result is not None:
        result.wall_s = last_end - started
    return started


async def _run(
    url: str,
    body: bytes | Callable[[], bytes],
    result: LoadResult,
    *,
    duration_s: float,
    max_requests: int,
    warmup_s: float,
    reject_pause_s: float,
    server_pid: int | None,
    timeout_s: float,
) -> None:
    limits = httpx.Limits(max_connections=result.concurrency, max_keepalive_connections=result.concurrency)
    phase = functools.partial(_phase, concurrency=result.concurrency, reject_pause_s=reject_pause_s)
    async with httpx.AsyncClient(limits=limits, timeout=timeout_s) as client:
        if warmup_s > 0:
            await phase(client, url, body, None, duration_s=warmup_s, max_requests=max_requests)
        server = ProcessTreeCPU(server_pid) if server_pid is not None else None
        server_before = server.seconds() if server else 0.0
        client_before = _client_cpu()
        await phase(client, url, body, result, duration_s=duration_s, max_requests=max_requests)
        result.client_cpu_s = _client_cpu() - client_before
        if server is not None:
            result.server_cpu_s = server.seconds() - server_before


def run_load(
    url: str,
    body: bytes | Callable[[], bytes],
    *,
    label: str,
    concurrency: int,
    duration_s: float,
    max_requests: int,
    warmup_s: float = 0.0,
    reject_pause_s: float = 0.05,
    server_pid: int | None = None,
    timeout_s: float = 30.0,
) -> LoadResult:
    """One bounded closed-loop run (after an unrecorded warm-up of ``warmup_s``) against ``url``.

    ``body`` is the request body, or a function that makes each one (unique texts defeat the gateway's coalescing
    of identical in-flight requests).
    """
    result = LoadResult(label, concurrency)
    asyncio.run(
        _run(
            url,
            body,
            result,
            duration_s=duration_s,
            max_requests=max_requests,
            warmup_s=warmup_s,
            reject_pause_s=reject_pause_s,
            server_pid=server_pid,
            timeout_s=timeout_s,
        )
    )
    return result
