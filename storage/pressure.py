"""Writes that a Redis refuses while it still answers, told apart from an outage, and a latch that makes each episode of
them one warning, a metric and a line of ``/readyz``.

A Redis at ``maxmemory`` under ``noeviction`` answers ``OOM command not allowed when used memory > 'maxmemory'`` to
every write and still serves reads; so does a replica (``READONLY``, until a client follows a failover) and a Redis
whose last save failed (``MISCONF``). To an :class:`~storage.outage.OutageLatch` a store that reads and writes on
every request would then see an outage start (the write) and end (the read) on every request: one warning pair per
request, 1,116 pairs in 25 s in issue #26. A :class:`WriteRefusals` latch counts such an episode once.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from redis.exceptions import OutOfMemoryError, ReadOnlyError, ResponseError

if TYPE_CHECKING:
    import logging
    from collections.abc import Callable

__all__ = ["WriteRefusals", "out_of_memory", "refuses_writes"]

#: Error codes of a Redis that answers but refuses writes (redis-py strips the code of the errors it has a class for).
_REFUSAL_CODES = ("OOM ", "READONLY ", "MISCONF ")


def refuses_writes(exc: BaseException) -> bool:
    """Whether ``exc`` is a Redis that answered and refused a write: out of memory under its ``maxmemory`` (also from
    inside a Lua script), a read-only replica, or a failed save with ``stop-writes-on-bgsave-error``."""
    if isinstance(exc, OutOfMemoryError | ReadOnlyError):
        return True
    return isinstance(exc, ResponseError) and str(exc).startswith(_REFUSAL_CODES)


def out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is a Redis at its ``maxmemory`` refusing a write (what freeing memory can end, unlike a
    read-only replica or a failed save)."""
    return isinstance(exc, OutOfMemoryError) or (isinstance(exc, ResponseError) and str(exc).startswith("OOM "))


class WriteRefusals:
    """One store's writes refused by a Redis that answers: a warning when an episode starts (the first refusal), one
    info line when it ends (the next write that works), and what the metrics and ``/readyz`` show meanwhile.

    Args:
        store: The store's name in the log, the metric's ``store`` label and ``/readyz`` (e.g. ``cache``).
        logger: Where the lines go.
        meanwhile: What the store does during an episode, for the warning and ``/readyz``.
        pause_s: How long after each refusal :attr:`paused` says to write nothing (0: never paused).
        clock: Monotonic seconds (tests pass their own).
    """

    def __init__(
        self,
        store: str,
        logger: logging.Logger,
        meanwhile: str,
        *,
        pause_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self._logger = logger
        self._meanwhile = meanwhile
        self._pause_s = pause_s
        self._clock = clock
        self._paused_until = float("-inf")
        self._episode_refusals = 0
        self._since: datetime | None = None
        self._error = ""
        self._listeners: list[Callable[[BaseException], None]] = []
        self.refusals = 0
        """Writes refused since the process started (the ``tts_redis_write_refusals_total`` counter)."""

    @property
    def refusing(self) -> bool:
        """Whether an episode is in progress: the last write was refused."""
        return self._since is not None

    @property
    def paused(self) -> bool:
        """Whether the store should skip its writes for now (``pause_s`` after the last refusal)."""
        return self._clock() < self._paused_until

    def on_refused(self, listener: Callable[[BaseException], None]) -> None:
        """Call ``listener`` with each refusal (another store on the same Redis may make room)."""
        self._listeners.append(listener)

    def refused(self, exc: BaseException) -> None:
        """A write was refused with ``exc``; the warning goes out if this starts an episode."""
        for listener in self._listeners:
            listener(exc)
        self.refusals += 1
        self._episode_refusals += 1
        self._paused_until = self._clock() + self._pause_s
        self._error = str(exc)
        if self._since is None:
            self._since = datetime.now(UTC)
            self._logger.warning(
                "Redis refuses writes to the %s store (%s): %s", self.store, self._error, self._meanwhile
            )

    def worked(self) -> None:
        """A write worked; the episode, if any, ends."""
        if self._since is None:
            return
        seconds = (datetime.now(UTC) - self._since).total_seconds()
        self._logger.info(
            "Redis accepts writes to the %s store again, after %d refused in %.0f s",
            self.store,
            self._episode_refusals,
            seconds,
        )
        self._since = None
        self._episode_refusals = 0

    def describe(self) -> str | None:
        """The episode in progress in one line (for ``/readyz``), or ``None``."""
        if self._since is None:
            return None
        since = self._since.isoformat(timespec="seconds")
        return f"Redis refuses writes to the {self.store} store since {since} ({self._error}): {self._meanwhile}"
