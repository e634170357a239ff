"""A circuit breaker: stop sending work to something that keeps failing, and try it again after a pause.

Closed, it lets everything through and counts failures; ``failures`` of them within ``window_s`` open it. Open, it
refuses everything for ``open_s``, then turns half-open: up to ``half_open_probes`` trial requests go through at a
time. A trial that succeeds closes it; one that fails opens it again for another ``open_s``.

Used per upstream endpoint by the remote engine and per local engine by the gateway. Not thread-safe: one event loop
owns each breaker (every method is synchronous and short, so no await can interleave inside one).
"""

from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["BREAKER_STATE_CODES", "BreakerSettings", "BreakerState", "CircuitBreaker"]

BreakerState: TypeAlias = Literal["closed", "open", "half_open"]

BREAKER_STATE_CODES: dict[BreakerState, int] = {"closed": 0, "half_open": 1, "open": 2}
"""The number a metric gauge shows for each state."""


class BreakerSettings(BaseModel):
    """When a circuit breaker opens, how long it stays open, and how carefully it tries again."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    failures: int = Field(default=5, ge=1)
    """Failed jobs within ``window_s`` that open the breaker."""
    window_s: float = Field(default=30.0, gt=0)
    """The sliding window, in seconds, over which failures are counted."""
    open_s: float = Field(default=10.0, gt=0)
    """How long the breaker stays open (refusing everything) before it turns half-open."""
    half_open_probes: int = Field(default=1, ge=1)
    """Trial requests allowed in flight at once while half-open."""


class CircuitBreaker:
    """One breaker's state machine. The caller asks ``allow()`` before each request and reports its outcome."""

    def __init__(self, settings: BreakerSettings, clock: Callable[[], float] = time.monotonic) -> None:
        self._settings = settings
        self._clock = clock
        self._state: BreakerState = "closed"
        self._failure_times: deque[float] = deque()
        self._opened_at = 0.0
        self._trials_in_flight = 0

    @property
    def settings(self) -> BreakerSettings:
        return self._settings

    @property
    def state(self) -> BreakerState:
        """The current state; an open breaker whose ``open_s`` has passed reads as half-open."""
        if self._state == "open" and self._clock() - self._opened_at >= self._settings.open_s:
            self._state = "half_open"
            self._trials_in_flight = 0
        return self._state

    @property
    def open_remaining_s(self) -> float:
        """Seconds until an open breaker turns half-open (0 when it is not open): a fair Retry-After."""
        if self.state != "open":
            return 0.0
        return max(0.0, self._opened_at + self._settings.open_s - self._clock())

    def would_allow(self) -> bool:
        """Whether :meth:`allow` would say yes now, without counting a trial."""
        state = self.state
        return state == "closed" or (state == "half_open" and self._trials_in_flight < self._settings.half_open_probes)

    def allow(self) -> bool:
        """Whether a request may go now. While half-open, a True counts as a trial until its outcome is recorded."""
        state = self.state
        if state == "closed":
            return True
        if state == "open":
            return False
        if self._trials_in_flight >= self._settings.half_open_probes:
            return False
        self._trials_in_flight += 1
        return True

    def record_success(self) -> None:
        """A request succeeded: a half-open breaker closes and forgets past failures."""
        if self.state == "half_open":
            self._state = "closed"
            self._failure_times.clear()
            self._trials_in_flight = 0

    def record_failure(self) -> None:
        """A request failed: a half-open breaker opens again; a closed one opens once failures reach the limit."""
        state = self.state
        if state == "half_open":
            self._open()
        elif state == "closed":
            now = self._clock()
            self._failure_times.append(now)
            self._forget_failures_before(now - self._settings.window_s)
            if len(self._failure_times) >= self._settings.failures:
                self._open()
        # Open: a late failure of a request let through before it opened changes nothing (no extension).

    def release(self) -> None:
        """A request let through ended with no verdict (e.g. its client went away): free its half-open trial slot."""
        if self.state == "half_open" and self._trials_in_flight > 0:
            self._trials_in_flight -= 1

    def _open(self) -> None:
        self._state = "open"
        self._opened_at = self._clock()
        self._failure_times.clear()
        self._trials_in_flight = 0

    def _forget_failures_before(self, cutoff: float) -> None:
        while self._failure_times and self._failure_times[0] <= cutoff:
            self._failure_times.popleft()
