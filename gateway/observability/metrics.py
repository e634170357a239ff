"""The speech path's Prometheus metrics, and the engine pools' gauges read at scrape time."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.registry import REGISTRY, Collector

from engines.breaker import BREAKER_STATE_CODES

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from gateway.speech.routing import ModelRouter
    from storage.pressure import WriteRefusals

__all__ = ["CacheWriteCollector", "PoolCollector", "SpeechMetrics", "WriteRefusalCollector"]


class _KnownChildren(MetricWrapperBase):
    """A metric that finds the child of a label set it has seen in a dict.

    ``labels`` of prometheus_client checks the values, converts each to a string and takes a lock every time: a
    few microseconds, paid several times on every request. A label set is removed only through :meth:`forget`, which
    forgets its child too, so a child once found stays right.
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


class _Gauge(_KnownChildren, Gauge):
    def forget(self, first_label: str) -> None:
        """Remove every label set whose first value is ``first_label`` (a deleted tenant's)."""
        for labelvalues in [values for values in self._children if values[0] == first_label]:
            del self._children[labelvalues]
            self.remove(*labelvalues)


class SpeechMetrics:
    """Counters and histograms the speech path updates (labelled by engine or tenant id, never by key)."""

    def __init__(self) -> None:
        latency = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
        self.ttfb = _Histogram(
            "tts_time_to_first_audio_seconds", "Time from request to first audio byte.", ["engine"], buckets=latency
        )
        self.synthesis = _Histogram(
            "tts_synthesis_seconds", "Wall time of a whole synthesis.", ["engine"], buckets=latency
        )
        self.rtf = _Histogram(
            "tts_real_time_factor",
            "Synthesis wall time divided by audio duration.",
            ["engine"],
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0),
        )
        self.audio_seconds = _Counter("tts_audio_seconds", "Audio seconds produced.", ["engine"])
        self.cache = _Counter("tts_cache_requests", "Audio cache lookups.", ["result"])
        self.retries = _Counter(
            "tts_engine_retries",
            "Tries repeated after one failed before the first audio, by the engine that failed and why.",
            ["engine", "reason"],
        )
        self.fallbacks = _Counter(
            "tts_alias_fallbacks",
            "Requests and realtime segments to an alias answered by another engine than its first, by alias and the "
            "engine that answered.",
            ["alias", "engine"],
        )
        self.truncations = _Counter(
            "tts_responses_truncated",
            "Speech responses that began and ended short (the engine failed or its stream was cut), by engine.",
            ["engine"],
        )
        self.rejections = _Counter(
            "tts_rate_limit_rejections", "Requests refused by a tenant limit.", ["tenant", "reason"]
        )
        self.tenant_requests = _Counter("tts_tenant_requests", "Speech requests served, by tenant id.", ["tenant"])
        self.tenant_characters = _Counter("tts_tenant_input_characters", "Input characters, by tenant id.", ["tenant"])
        self.tenant_audio = _Counter("tts_tenant_audio_seconds", "Audio seconds produced, by tenant id.", ["tenant"])
        self.budget_used = _Gauge(
            "tts_tenant_budget_used_ratio",
            "Share of a tenant's monthly budget spent (1: all of it; audio may pass it), by tenant and budget "
            "(characters_per_month, audio_seconds_per_month), as this replica last saw it admitting the tenant; "
            "gone once the tenant is deleted or its settings change, until it is admitted again.",
            ["tenant", "budget"],
        )
        self.queue_wait = _Histogram(
            "tts_engine_queue_wait_seconds",
            "Time a synthesis waited for an engine worker (also when it then got a 503).",
            ["engine", "tenant"],
            buckets=(0.001, *latency),
        )
        self.realtime_connections = Gauge("tts_realtime_connections", "Open realtime WebSocket connections.")
        self.write_refusals = WriteRefusalCollector()
        REGISTRY.register(self.write_refusals)
        self.cache_writes = CacheWriteCollector()
        REGISTRY.register(self.cache_writes)

    def unregister(self) -> None:
        for metric in vars(self).values():
            REGISTRY.unregister(metric)


class WriteRefusalCollector(Collector):
    """Writes refused by a Redis that answers (``storage/pressure.py``), by store; read at scrape time."""

    def __init__(self) -> None:
        self._latches: list[WriteRefusals] = []

    def watch(self, *latches: WriteRefusals) -> None:
        self._latches.extend(latches)

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        refusals = CounterMetricFamily(
            "tts_redis_write_refusals",
            "Writes a Redis refused while it answered (out of memory, read-only replica), by store.",
            labels=["store"],
        )
        refusing = GaugeMetricFamily(
            "tts_redis_refusing_writes",
            "1 while a store's Redis refuses its writes (from the first refusal to the next write that works).",
            labels=["store"],
        )
        for latch in self._latches:
            refusals.add_metric([latch.store], latch.refusals)
            refusing.add_metric([latch.store], 1 if latch.refusing else 0)
        yield refusals
        yield refusing


class CacheWriteCollector(Collector):
    """The audio cache's writes under way (a reply ends at most ``STORE_BEFORE_END_S`` after its audio, while its
    write may go on); read at scrape time. A number that stays up says the cache's Redis is slow."""

    def __init__(self) -> None:
        self._in_flight: Callable[[], int] = lambda: 0

    def watch(self, in_flight: Callable[[], int]) -> None:
        self._in_flight = in_flight

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(
            "tts_cache_writes_in_flight",
            "Audio cache writes sent to the store and not yet answered (replies may end before them).",
            value=self._in_flight(),
        )


class PoolCollector(Collector):
    """Queue depth, busy workers, ready workers and restarts of every engine pool, and the admissions made while
    the limits' storage was unreachable; read at scrape time."""

    def __init__(
        self,
        router: ModelRouter,
        fail_open_admissions: Callable[[], int],
        redis_pool_exhaustions: Callable[[], int] = lambda: 0,
    ) -> None:
        self._router = router
        self._fail_open_admissions = fail_open_admissions
        self._redis_pool_exhaustions = redis_pool_exhaustions

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        router = self._router
        gauges = {
            "queued": GaugeMetricFamily("tts_engine_queue_depth", "Requests waiting for a worker.", labels=["engine"]),
            "busy_workers": GaugeMetricFamily(
                "tts_engine_busy_workers", "Workers running a request.", labels=["engine"]
            ),
            "ready_workers": GaugeMetricFamily("tts_engine_ready_workers", "Workers ready.", labels=["engine"]),
            "active_jobs": GaugeMetricFamily("tts_engine_active_jobs", "Requests on workers.", labels=["engine"]),
        }
        restarts = CounterMetricFamily("tts_engine_worker_restarts", "Worker processes replaced.", labels=["engine"])
        batches = CounterMetricFamily(
            "tts_engine_batches", "Batches run by batching workers, by size.", labels=["engine", "size"]
        )
        tenant_queued = GaugeMetricFamily(
            "tts_engine_tenant_queue_depth", "Requests waiting for a worker, by tenant.", labels=["engine", "tenant"]
        )
        for name, pool in router.pools.items():
            status = pool.status()
            for attribute, gauge in gauges.items():
                gauge.add_metric([name], getattr(status, attribute))
            restarts.add_metric([name], status.restarts)
            for size, count in sorted(status.batch_sizes.items()):
                batches.add_metric([name, str(size)], count)
            for tenant, count in sorted(status.queued_by_tenant.items()):
                tenant_queued.add_metric([name, tenant], count)
        breakers = GaugeMetricFamily(
            "tts_engine_breaker_state",
            "Each local engine's circuit breaker: 0 closed, 1 half-open, 2 open.",
            labels=["engine"],
        )
        for name, code in router.breaker_codes().items():
            breakers.add_metric([name], code)
        yield from gauges.values()
        yield breakers
        yield restarts
        yield batches
        yield tenant_queued
        yield from _endpoint_families(router)
        yield CounterMetricFamily(
            "tts_limits_fail_open_admissions",
            "Requests admitted without checking limits while their storage was unreachable.",
            value=self._fail_open_admissions(),
        )
        yield CounterMetricFamily(
            "tts_redis_pool_exhausted",
            "Redis commands that found every connection of the pool in use for all of redis_pool.wait_s, and failed.",
            value=self._redis_pool_exhaustions(),
        )


def _endpoint_families(router: ModelRouter) -> list[GaugeMetricFamily]:
    """Per upstream address of remote engines: requests in flight, health, breaker. Labels are the configured URL
    and the address (URLs with credentials are refused at load: nothing secret reaches a label)."""
    labels = ["engine", "endpoint", "address"]
    in_flight = GaugeMetricFamily(
        "tts_engine_endpoint_in_flight", "Requests in flight to a remote engine's endpoint.", labels=labels
    )
    healthy = GaugeMetricFamily(
        "tts_engine_endpoint_healthy",
        "1 when a remote engine's endpoint answered its last probe, else 0.",
        labels=labels,
    )
    breaker = GaugeMetricFamily(
        "tts_engine_endpoint_breaker_state",
        "A remote engine endpoint's circuit breaker: 0 closed, 1 half-open, 2 open.",
        labels=labels,
    )
    for name, pool in router.pools.items():
        for endpoint in pool.status().endpoints or ():
            values = [name, endpoint.url, endpoint.address or ""]
            in_flight.add_metric(values, endpoint.in_flight)
            healthy.add_metric(values, 1 if endpoint.state == "healthy" else 0)
            breaker.add_metric(values, BREAKER_STATE_CODES[endpoint.breaker])
    return [in_flight, healthy, breaker]
