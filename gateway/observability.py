"""Request ids, one structured log line per request, and the gateway's Prometheus metrics.

The access log line is written when the response has been sent completely (for a stream: after its last chunk), so
it can carry what only the end knows: audio seconds produced, time to first audio byte, the final status.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from litestar.enums import ScopeType
from prometheus_client import Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import REGISTRY, Collector

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from litestar.types import ASGIApp, Message, Receive, Scope, Send

    from gateway.routing import ModelRouter

__all__ = [
    "REQUEST_ID_HEADER",
    "JsonLogFormatter",
    "PoolCollector",
    "RequestRecord",
    "SpeechMetrics",
    "request_record",
    "request_tracking_middleware",
]

REQUEST_ID_HEADER = "x-request-id"
_SAFE_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_RECORD_KEY = "tts_request_record"

access_log = logging.getLogger("tts_gateway.access")


@dataclass
class RequestRecord:
    """What one request did; filled in by the handlers, logged by the middleware."""

    request_id: str
    method: str
    path: str
    started: float = field(default_factory=time.perf_counter, repr=False)
    status: int = 0
    duration_ms: float = 0.0
    tenant: str | None = None
    model: str | None = None
    engine: str | None = None
    format: str | None = None
    characters: int | None = None
    audio_seconds: float | None = None
    ttfb_ms: float | None = None
    cache: str | None = None

    def as_log(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None and k != "started"}


def request_record(scope: Scope) -> RequestRecord | None:
    """The record of the request being served (None outside the middleware, e.g. in unit tests)."""
    record: RequestRecord | None = scope.get("state", {}).get(_RECORD_KEY)
    return record


def _request_id(scope: Scope) -> str:
    for name, value in scope.get("headers", ()):
        if name == REQUEST_ID_HEADER.encode():
            candidate = value.decode("latin-1")
            if _SAFE_REQUEST_ID.match(candidate):  # echo only what cannot inject into logs or headers
                return candidate
    return uuid.uuid4().hex


def request_tracking_middleware(app: ASGIApp) -> ASGIApp:
    """Accept or make a request id, echo it, and log one JSON line when the response is complete."""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP:
            await app(scope, receive, send)
            return
        started = time.perf_counter()
        record = RequestRecord(_request_id(scope), scope["method"], scope["path"])
        scope.setdefault("state", {})[_RECORD_KEY] = record

        async def tracked_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                record.status = message["status"]
                headers = list(message.get("headers", ()))
                headers.append((REQUEST_ID_HEADER.encode(), record.request_id.encode()))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await app(scope, receive, tracked_send)
        finally:
            record.duration_ms = round((time.perf_counter() - started) * 1000, 2)
            access_log.info("request", extra={"record": record.as_log()})

    return middleware


class JsonLogFormatter(logging.Formatter):
    """One JSON object per line; request records are flattened into it."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(getattr(record, "record", {}))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class SpeechMetrics:
    """Counters and histograms the speech path updates (labelled by engine or tenant id, never by key)."""

    def __init__(self) -> None:
        latency = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
        self.ttfb = Histogram("tts_time_to_first_audio_seconds", "Time from request to first audio byte.",
                              ["engine"], buckets=latency)
        self.synthesis = Histogram("tts_synthesis_seconds", "Wall time of a whole synthesis.", ["engine"],
                                   buckets=latency)
        self.rtf = Histogram("tts_real_time_factor", "Synthesis wall time divided by audio duration.", ["engine"],
                             buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0))
        self.audio_seconds = Counter("tts_audio_seconds", "Audio seconds produced.", ["engine"])
        self.cache = Counter("tts_cache_requests", "Audio cache lookups.", ["result"])
        self.rejections = Counter("tts_rate_limit_rejections", "Requests refused by a tenant limit.",
                                  ["tenant", "reason"])
        self.tenant_requests = Counter("tts_tenant_requests", "Speech requests served, by tenant id.", ["tenant"])
        self.tenant_characters = Counter("tts_tenant_input_characters", "Input characters, by tenant id.", ["tenant"])
        self.tenant_audio = Counter("tts_tenant_audio_seconds", "Audio seconds produced, by tenant id.", ["tenant"])

    def unregister(self) -> None:
        for metric in vars(self).values():
            REGISTRY.unregister(metric)


class PoolCollector(Collector):
    """Queue depth, busy workers, ready workers and restarts of every engine pool, and the admissions made while
    the limits' storage was unreachable; read at scrape time."""

    def __init__(self, router: ModelRouter, fail_open_admissions: Callable[[], int]) -> None:
        self._router = router
        self._fail_open_admissions = fail_open_admissions

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        router = self._router
        gauges = {
            "queued": GaugeMetricFamily("tts_engine_queue_depth", "Requests waiting for a worker.", labels=["engine"]),
            "busy_workers": GaugeMetricFamily("tts_engine_busy_workers", "Workers running a request.",
                                              labels=["engine"]),
            "ready_workers": GaugeMetricFamily("tts_engine_ready_workers", "Workers ready.", labels=["engine"]),
            "active_jobs": GaugeMetricFamily("tts_engine_active_jobs", "Requests on workers.", labels=["engine"]),
        }
        restarts = CounterMetricFamily("tts_engine_worker_restarts", "Worker processes replaced.", labels=["engine"])
        batches = CounterMetricFamily("tts_engine_batches", "Batches run by batching workers, by size.",
                                      labels=["engine", "size"])
        for name, pool in router.pools.items():
            status = pool.status()
            for attribute, gauge in gauges.items():
                gauge.add_metric([name], getattr(status, attribute))
            restarts.add_metric([name], status.restarts)
            for size, count in sorted(status.batch_sizes.items()):
                batches.add_metric([name, str(size)], count)
        yield from gauges.values()
        yield restarts
        yield batches
        yield CounterMetricFamily("tts_limits_fail_open_admissions",
                                  "Requests admitted without checking limits while their storage was unreachable.",
                                  value=self._fail_open_admissions())
