"""A socket's budget (``gateway/realtime/budget.py``): messages and bytes a second as token buckets, echoes owed."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from gateway.realtime.budget import SocketBudget, TokenBucket
from gateway.realtime.session_errors import SocketBudgetExceededError
from gateway.settings import RealtimeSettings

if TYPE_CHECKING:
    from litestar.types import WebSocketDisconnectEvent, WebSocketReceiveEvent


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def text(size: int) -> WebSocketReceiveEvent:
    return {"type": "websocket.receive", "text": "x" * size, "bytes": None}


def budget(clock: Clock, *, messages: float = 10, bytes_: int = 4096, burst_s: float = 1.0) -> SocketBudget:
    settings = RealtimeSettings(
        max_socket_messages_per_s=messages, max_socket_bytes_per_s=bytes_, socket_burst_s=burst_s
    )
    return SocketBudget(settings, max_message_bytes=1024, clock=clock)


def test_a_bucket_refills_at_its_rate_up_to_its_capacity() -> None:
    clock = Clock()
    bucket = TokenBucket(10, 20, clock)
    assert bucket.take(20)
    assert not bucket.take(1)
    clock.now += 0.5
    assert bucket.take(5)
    assert not bucket.take(1)
    clock.now += 100
    assert bucket.take(20)
    assert not bucket.take(1)


def test_messages_past_the_burst_are_refused_until_the_rate_allows_more() -> None:
    clock = Clock()
    paid = budget(clock, messages=10, burst_s=2.0)
    for _ in range(20):
        paid.charge(text(1))
    with pytest.raises(SocketBudgetExceededError) as over:
        paid.charge(text(1))
    assert over.value.error.code == "rate_limit_exceeded"
    assert over.value.error.status_code == 429
    assert "messages" in over.value.error.message
    clock.now += 0.15  # one more message's worth
    paid.charge(text(1))
    assert paid.messages == 21


def test_bytes_are_counted_whatever_the_message_count() -> None:
    clock = Clock()
    paid = budget(clock, messages=1000, bytes_=4096)
    paid.charge(text(3000))
    with pytest.raises(SocketBudgetExceededError) as over:
        paid.charge(text(2000))
    assert "bytes" in over.value.error.message
    binary: WebSocketReceiveEvent = {"type": "websocket.receive", "bytes": b"\0" * 1000, "text": None}
    paid.charge(binary)  # a binary frame is paid for too
    assert paid.bytes == 4000


def test_the_bytes_bucket_holds_at_least_one_message_of_the_largest_size() -> None:
    paid = budget(Clock(), bytes_=1024, burst_s=0.1)  # 102 bytes of burst, but messages of 1,024 are allowed
    paid.charge(text(1024))


def test_echoes_are_owed_by_the_next_messages() -> None:
    clock = Clock()
    paid = budget(clock, messages=1000, bytes_=4096)
    paid.charge(text(1000))
    paid.echoed(2000)  # the server repeated it twice
    paid.charge(text(1000))
    with pytest.raises(SocketBudgetExceededError):
        paid.charge(text(1000))  # 5,000 of 4,096 with the echo; 3,000 without it
    clock.now += 1.0
    paid.charge(text(1000))


def test_a_disconnect_costs_nothing() -> None:
    paid = budget(Clock(), messages=1, burst_s=1.0)
    paid.charge(text(1))
    gone: WebSocketDisconnectEvent = {"type": "websocket.disconnect", "code": 1000}
    paid.charge(gone)
