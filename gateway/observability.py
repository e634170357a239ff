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
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Self

from litestar.enums import ScopeType
from litestar.status_codes import HTTP_500_INTERNAL_SERVER_ERROR
from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.registry import REGISTRY, Collector

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from litestar.plugins.prometheus import PrometheusConfig
    from litestar.types import ASGIApp, HTTPScope, Message, Receive, Scope, Send

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
_REQUEST_ID_HEADER = REQUEST_ID_HEADER.encode()
_SAFE_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_RECORD_KEY = "tts_request_record"

access_log = logging.getLogger("tts_gateway.access")


@dataclass(slots=True)
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
        # Attribute by attribute: ``dataclasses.asdict`` deep-copies every value, a cost paid on every request.
        return {name: value for name in _LOGGED_FIELDS if (value := getattr(self, name)) is not None}


_LOGGED_FIELDS = tuple(f.name for f in fields(RequestRecord) if f.name != "started")


def request_record(scope: Scope) -> RequestRecord | None:
    """The record of the request being served (None outside the middleware, e.g. in unit tests)."""
    record: RequestRecord | None = scope.get("state", {}).get(_RECORD_KEY)
    return record


def _request_id(scope: Scope) -> str:
    for name, value in scope.get("headers", ()):
        if name == _REQUEST_ID_HEADER:
            candidate = value.decode("latin-1")
            if _SAFE_REQUEST_ID.match(candidate):  # echo only what cannot inject into logs or headers
                return candidate
    return uuid.uuid4().hex


def request_tracking_middleware(prometheus: PrometheusConfig) -> Callable[[ASGIApp], ASGIApp]:
    """Litestar middleware: accept or make a request id and echo it, log one JSON line when the response is
    complete, and count the request in the ``<prefix>_request*`` metrics of Litestar's Prometheus middleware.

    One layer instead of two, and the metrics' labelled children looked up once per label set, because this runs
    on every request: the cost of a cache hit is mostly what surrounds it.
    """
    metrics = _HttpMetrics(prometheus)

    def wrap(app: ASGIApp) -> ASGIApp:
        async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] == ScopeType.HTTP:
                await _tracked(app, scope, receive, send, metrics.measure(scope, scope["method"]))
            elif scope["type"] == ScopeType.WEBSOCKET and (span := metrics.measure(scope, "websocket")) is not None:
                await _measured(app, scope, receive, send, span)
            else:
                await app(scope, receive, send)

        return middleware

    return wrap


async def _tracked(app: ASGIApp, scope: HTTPScope, receive: Receive, send: Send, span: _Span | None) -> None:
    record = RequestRecord(_request_id(scope), scope["method"], scope["path"])
    scope.setdefault("state", {})[_RECORD_KEY] = record
    tracked = _TrackedSend(send, record, span)
    try:
        await app(scope, receive, tracked.send)
    finally:
        record.duration_ms = round((time.perf_counter() - record.started) * 1000, 2)
        if span is not None:
            span.end(record.status or 200)
        _log_access(record)


async def _measured(app: ASGIApp, scope: Scope, receive: Receive, send: Send, span: _Span) -> None:
    try:
        await app(scope, receive, send)
    finally:
        span.end(200)  # as Litestar's middleware counts a WebSocket: no HTTP status, no response body


class _TrackedSend:
    """One response's ``send``: notes the status and when the body went, and adds the request id header."""

    __slots__ = ("_record", "_send", "_span")

    def __init__(self, send: Send, record: RequestRecord, span: _Span | None) -> None:
        self._send = send
        self._record = record
        self._span = span

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self._record.status = message["status"]
            headers = list(message.get("headers", ()))
            headers.append((_REQUEST_ID_HEADER, self._record.request_id.encode()))
            message = {**message, "headers": headers}
        elif message["type"] == "http.response.body" and self._span is not None:
            self._span.body_sent()
        await self._send(message)


def _log_access(record: RequestRecord) -> None:
    if not access_log.isEnabledFor(logging.INFO):
        return  # nothing to build: at ``log_level: warning`` a request costs no log line at all
    # ``handle`` a record made here rather than ``info()``, which would also walk the stack for the caller's file
    # and line, which the JSON lines never show.
    access_log.handle(access_log.makeRecord(access_log.name, logging.INFO, "", 0, "request", (), None,
                                            extra={"record": record.as_log()}))


class _Span:
    """One request in the HTTP metrics, from the middleware to the last body message, as Litestar measures it."""

    __slots__ = ("_ended_body", "_key", "_metrics", "_started")

    def __init__(self, metrics: _HttpMetrics, key: tuple[str, str]) -> None:
        self._metrics = metrics
        self._key = key
        self._started = time.perf_counter()
        self._ended_body = 0.0

    def body_sent(self) -> None:
        self._ended_body = time.perf_counter()

    def end(self, status: int) -> None:
        duration = self._ended_body - self._started if self._ended_body else 0.0
        self._metrics.observe(self._key, status, duration)


class _HttpMetrics:
    """The metrics of Litestar's ``PrometheusMiddleware``, with its names, help texts, labels (method, path
    template, status code, app name) and exclusions: only ``prefix``, ``app_name`` and ``exclude`` of the config
    are used, with ``group_path`` always on."""

    def __init__(self, config: PrometheusConfig) -> None:
        self._prefix = config.prefix
        self._app_name = config.app_name
        exclude = config.exclude
        self._exclude = None if exclude is None else re.compile(exclude if isinstance(exclude, str) else
                                                                "|".join(exclude))
        self._in_progress: dict[tuple[str, str], Gauge] = {}
        self._done: dict[tuple[str, str, int], tuple[Counter, Histogram]] = {}

    def measure(self, scope: Scope, method: str) -> _Span | None:
        """Count the request as in progress (``method``: a WebSocket's is ``websocket``); None: excluded path."""
        if self._exclude is not None and self._exclude.search(_path_for_exclusion(scope)):
            return None
        key = (method, scope["path_template"])
        gauge = self._in_progress.get(key)
        if gauge is None:
            gauge = self._in_progress[key] = _family(
                Gauge, f"{self._prefix}_requests_in_progress", "Total requests currently in progress",
                multiprocess_mode="livesum").labels(*key, 200, self._app_name)
        gauge.inc()
        return _Span(self, key)

    def observe(self, key: tuple[str, str], status: int, duration_s: float) -> None:
        self._in_progress[key].dec()
        done = self._done.get((*key, status))
        if done is None:
            labels = (*key, status, self._app_name)
            done = self._done[(*key, status)] = (
                _family(Counter, f"{self._prefix}_requests_total", "Total requests").labels(*labels),
                _family(Histogram, f"{self._prefix}_request_duration_seconds", "Request duration, in seconds")
                .labels(*labels))
        if status >= HTTP_500_INTERNAL_SERVER_ERROR:  # counted apart too, as Litestar does
            _family(Counter, f"{self._prefix}_requests_error_total", "Total errors in requests").labels(
                *key, status, self._app_name).inc()
        done[0].inc()
        done[1].observe(duration_s)


_HTTP_LABELS = ("method", "path", "status_code", "app_name")
_FAMILIES: dict[str, Any] = {}  # per process, as Litestar's: every app built in a process shares one registry


def _family(kind: type[Any], name: str, documentation: str, **options: Any) -> Any:
    family = _FAMILIES.get(name)
    if family is None:  # created on first use, as Litestar's middleware does
        family = _FAMILIES[name] = kind(name=name, documentation=documentation, labelnames=_HTTP_LABELS, **options)
    return family


def _path_for_exclusion(scope: Scope) -> str:
    # As Litestar matches exclusions: a mounted app's scope path is relative to its mount, its raw path is not.
    route_handler = scope.get("route_handler")
    return scope["raw_path"].decode() if getattr(route_handler, "is_mount", False) else scope["path"]


class JsonLogFormatter(logging.Formatter):
    """One JSON object per line; request records are flattened into it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._stamp = (-1, "")  # the last second formatted, and its text: lines come many to a second

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": self._time(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(getattr(record, "record", {}))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return _ENCODER.encode(entry)

    def _time(self, record: logging.LogRecord) -> str:
        second, text = self._stamp
        if int(record.created) != second:
            text = self.formatTime(record, "%Y-%m-%dT%H:%M:%S")
            self._stamp = (int(record.created), text)
        return text


_ENCODER = json.JSONEncoder(default=str)  # what ``json.dumps(entry, default=str)`` writes, without a new encoder


class _KnownChildren(MetricWrapperBase):
    """A metric that finds the child of a label set it has seen in a dict.

    ``labels`` of prometheus_client checks the values, converts each to a string and takes a lock every time: a
    few microseconds, paid several times on every request. The speech metrics never remove a label set, so a child
    once found stays right.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._children: dict[tuple[object, ...], Self] = {}

    def labels(self, *labelvalues: object, **labelkwargs: object) -> Self:
        if labelkwargs:
            return super().labels(*labelvalues, **labelkwargs)
        if (child := self._children.get(labelvalues)) is None:
            child = self._children[labelvalues] = super().labels(*labelvalues)
        return child


class _Counter(_KnownChildren, Counter):
    pass


class _Histogram(_KnownChildren, Histogram):
    pass


class SpeechMetrics:
    """Counters and histograms the speech path updates (labelled by engine or tenant id, never by key)."""

    def __init__(self) -> None:
        latency = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
        self.ttfb = _Histogram("tts_time_to_first_audio_seconds", "Time from request to first audio byte.",
                               ["engine"], buckets=latency)
        self.synthesis = _Histogram("tts_synthesis_seconds", "Wall time of a whole synthesis.", ["engine"],
                                    buckets=latency)
        self.rtf = _Histogram("tts_real_time_factor", "Synthesis wall time divided by audio duration.", ["engine"],
                              buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0))
        self.audio_seconds = _Counter("tts_audio_seconds", "Audio seconds produced.", ["engine"])
        self.cache = _Counter("tts_cache_requests", "Audio cache lookups.", ["result"])
        self.rejections = _Counter("tts_rate_limit_rejections", "Requests refused by a tenant limit.",
                                   ["tenant", "reason"])
        self.tenant_requests = _Counter("tts_tenant_requests", "Speech requests served, by tenant id.", ["tenant"])
        self.tenant_characters = _Counter("tts_tenant_input_characters", "Input characters, by tenant id.",
                                          ["tenant"])
        self.tenant_audio = _Counter("tts_tenant_audio_seconds", "Audio seconds produced, by tenant id.", ["tenant"])
        self.realtime_connections = Gauge("tts_realtime_connections", "Open realtime WebSocket connections.")

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
