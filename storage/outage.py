"""What a storage call raises when its backend is out of reach, and a latch that logs each outage once."""

from __future__ import annotations

from typing import TYPE_CHECKING

from limits.errors import StorageError
from redis.exceptions import RedisError

if TYPE_CHECKING:
    import logging

__all__ = ["STORAGE_ERRORS", "OutageLatch"]

#: Everything a Redis call (through redis-py, ``limits`` or aiocache) may raise when Redis is out of reach;
#: ``TimeoutError`` (aiocache's and asyncio's) is an ``OSError``.
STORAGE_ERRORS: tuple[type[Exception], ...] = (RedisError, StorageError, OSError)


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
