"""What a storage call raises when its backend is out of reach, and a latch that logs each outage once."""

from __future__ import annotations

from typing import TYPE_CHECKING

from limits.errors import StorageError
from redis.exceptions import RedisClusterException, RedisError

if TYPE_CHECKING:
    import logging

__all__ = ["STORAGE_ERRORS", "OutageLatch"]

#: Everything a Redis call (through redis-py or ``limits``) may raise when Redis is out of reach; ``TimeoutError``
#: (asyncio's) is an ``OSError``. ``RuntimeError`` too: when Redis goes away while
#: redis-py is connecting, its health-check ping writes to a transport that uvloop has closed, and uvloop says so with
#: a ``RuntimeError`` ("unable to perform operation on <TCPTransport closed=True>") that redis-py lets through — a
#: 500 under a Redis outage otherwise (seen in tests/e2e/test_faults.py). ``RedisClusterException`` is not a
#: ``RedisError``, yet a Redis Cluster none of whose nodes answers raises it ("Redis Cluster cannot be connected"), and
#: so does a slot no node serves (``SlotNotCoveredError``); it also covers the client's refusal of a command across
#: hash slots, which the server's own refusal (CROSSSLOT, a ``ResponseError``) is caught as anyway
#: (tests/unit/storage/test_topologies.py). Every ``except STORAGE_ERRORS`` wraps a storage call only, so nothing else
#: is caught by it.
STORAGE_ERRORS: tuple[type[Exception], ...] = (RedisError, RedisClusterException, StorageError, OSError, RuntimeError)


class OutageLatch:
    """Remembers whether a backend is in an outage, so that each outage is logged once when it starts and once
    when it ends, not on every failed call.

    Args:
        logger: Where the two lines go (at warning level).
        failing: What is logged when the first call fails, e.g. "audio cache unreachable, bypassing it".
        recovered: What is logged when a call works again.
    """

    def __init__(self, logger: logging.Logger, failing: str, recovered: str) -> None:
        self._logger = logger
        self._failing = failing
        self._recovered = recovered
        self.in_outage = False

    def failed(self, exc: BaseException) -> None:
        """A call failed with ``exc``; logged if it starts an outage."""
        if not self.in_outage:
            self.in_outage = True
            self._logger.warning("%s: %r", self._failing, exc)

    def worked(self) -> None:
        """A call worked; logged if it ends an outage."""
        if self.in_outage:
            self.in_outage = False
            self._logger.warning("%s", self._recovered)
