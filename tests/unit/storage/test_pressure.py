"""Refused writes told apart from an outage, and the latch that makes each episode one warning."""

from __future__ import annotations

import logging

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import OutOfMemoryError, ReadOnlyError, ResponseError

from storage.pressure import WriteRefusals, refuses_writes

logger = logging.getLogger("tests.storage.pressure")


@pytest.mark.parametrize(
    ("exc", "refused"),
    [
        (OutOfMemoryError("command not allowed when used memory > 'maxmemory'."), True),
        (ReadOnlyError("You can't write against a read only replica."), True),
        (ResponseError("MISCONF Redis is configured to save RDB snapshots, but it's unable to persist"), True),
        (ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"), False),
        (RedisConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused."), False),
        (TimeoutError(), False),
    ],
)
def test_what_counts_as_a_refused_write(exc: Exception, refused: bool) -> None:
    assert refuses_writes(exc) is refused


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_an_episode_is_one_warning_and_one_info_line(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    latch = WriteRefusals("cache", logger, "it gives way", pause_s=5.0, clock=clock)
    assert not latch.paused and latch.describe() is None
    with caplog.at_level(logging.INFO, logger=logger.name):
        for _ in range(3):
            latch.refused(OutOfMemoryError("command not allowed when used memory > 'maxmemory'."))
        assert latch.paused and latch.refusing
        description = latch.describe()
        assert description is not None and "maxmemory" in description and "it gives way" in description
        clock.now += 5.0
        assert not latch.paused
        latch.worked()
        latch.worked()
    assert (latch.refusals, latch.refusing, latch.describe()) == (3, False, None)
    assert [record.levelname for record in caplog.records] == ["WARNING", "INFO"]
    assert "after 3 refused" in caplog.records[1].getMessage()
