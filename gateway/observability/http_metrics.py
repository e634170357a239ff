"""The HTTP metrics of Litestar's Prometheus middleware, measured by the request-tracking middleware."""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Any

from litestar.status_codes import HTTP_500_INTERNAL_SERVER_ERROR
from prometheus_client import Counter, Gauge, Histogram

if TYPE_CHECKING:
    from litestar.plugins.prometheus import PrometheusConfig
    from litestar.types import Scope

__all__ = ["HttpMetrics", "Span"]


class Span:
    """One request in the HTTP metrics, from the middleware to the last body message, as Litestar measures it."""

    __slots__ = ("_ended_body", "_key", "_metrics", "_started")

    def __init__(self, metrics: HttpMetrics, key: tuple[str, str]) -> None:
        self._metrics = metrics
        self._key = key
        self._started = time.perf_counter()
        self._ended_body = 0.0

    def body_sent(self) -> None:
        self._ended_body = time.perf_counter()

    def end(self, status: int) -> None:
        duration = self._ended_body - self._started if self._ended_body else 0.0
        self._metrics.observe(self._key, status, duration)


class HttpMetrics:
    """The metrics of Litestar's ``PrometheusMiddleware``, with its names, help texts, labels (method, path
    template, status code, app name) and exclusions: only ``prefix``, ``app_name`` and ``exclude`` of the config
    are used, with ``group_path`` always on."""

    def __init__(self, config: PrometheusConfig) -> None:
        self._prefix = config.prefix
        self._app_name = config.app_name
        exclude = config.exclude
        self._exclude = (
            None if exclude is None else re.compile(exclude if isinstance(exclude, str) else "|".join(exclude))
        )
        self._in_progress: dict[tuple[str, str], Gauge] = {}
        self._done: dict[tuple[str, str, int], tuple[Counter, Histogram]] = {}

    def measure(self, scope: Scope, method: str) -> Span | None:
        """Count the request as in progress (``method``: a WebSocket's is ``websocket``); None: excluded path."""
        if self._exclude is not None and self._exclude.search(_path_for_exclusion(scope)):
            return None
        key = (method, scope["path_template"])
        gauge = self._in_progress.get(key)
        if gauge is None:
            gauge = self._in_progress[key] = _family(
                Gauge,
                f"{self._prefix}_requests_in_progress",
                "Total requests currently in progress",
                multiprocess_mode="livesum",
            ).labels(*key, 200, self._app_name)
        gauge.inc()
        return Span(self, key)

    def observe(self, key: tuple[str, str], status: int, duration_s: float) -> None:
        self._in_progress[key].dec()
        done = self._done.get((*key, status))
        if done is None:
            labels = (*key, status, self._app_name)
            done = self._done[(*key, status)] = (
                _family(Counter, f"{self._prefix}_requests_total", "Total requests").labels(*labels),
                _family(Histogram, f"{self._prefix}_request_duration_seconds", "Request duration, in seconds").labels(
                    *labels
                ),
            )
        if status >= HTTP_500_INTERNAL_SERVER_ERROR:  # counted apart too, as Litestar does
            _family(Counter, f"{self._prefix}_requests_error_total", "Total errors in requests").labels(
                *key, status, self._app_name
            ).inc()
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
