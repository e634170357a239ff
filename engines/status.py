"""What every engine backend reports about itself, for ``/readyz`` and the metrics."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, TypeAlias

if TYPE_CHECKING:
    from engines.base import EngineInfo

__all__ = ["EndpointStatus", "PoolState", "PoolStatus"]

PoolState: TypeAlias = Literal["starting", "ready", "unavailable", "stopped"]


@dataclass(frozen=True, slots=True)
class EndpointStatus:
    """One upstream address of a remote engine, for ``/readyz`` and metrics (no credentials in any field)."""

    url: str
    """The configured base URL."""
    address: str | None
    """The IP address it resolved to (``None`` when it does not resolve)."""
    state: Literal["healthy", "unhealthy"]
    in_flight: int
    breaker: Literal["closed", "open", "half_open"]
    reason: str | None
    """Why it is unhealthy (its probe's failure, an unreachable request, an unresolvable name); ``None`` while
    healthy."""
    last_error: str | None
    """The last failure of a request sent to it (what its breaker counts), kept after a recovery; probes never
    replace it."""


@dataclass(frozen=True, slots=True)
class PoolStatus:
    """A snapshot of one engine's pool, for ``/readyz`` and metrics."""

    engine: str
    kind: str
    state: PoolState
    reason: str | None
    workers: int
    ready_workers: int
    busy_workers: int
    active_jobs: int
    queued: int
    restarts: int
    pids: tuple[int, ...]
    """Process ids of the live workers (for operators, and for tests that kill one)."""
    batch_sizes: dict[int, int]
    """How many batches of each size batching workers have run."""
    info: EngineInfo | None
    queued_by_tenant: dict[str, int] = field(default_factory=dict)
    """Requests waiting for a worker now, by tenant name (tenants with none left out)."""
    endpoints: tuple[EndpointStatus, ...] | None = None
    """The upstream endpoint addresses of a remote engine (``engines.remote``); ``None`` for worker pools."""
