"""A socket's budget (``gateway/sessions/budget.py``): messages and bytes a second as token buckets, echoes owed."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest

from auth.limits.sockets import MemorySocketSends
from gateway.sessions.budget import SocketBudget, TenantShare, TenantSocketBudgets, TokenBucket
from gateway.sessions.session_errors import SocketBudgetExceededError
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


def tenant_settings(*, messages: float = 10, tenant_messages: float = 15) -> RealtimeSettings:
    return RealtimeSettings(
        max_socket_messages_per_s=messages,
        max_tenant_socket_messages_per_s=tenant_messages,
        max_socket_bytes_per_s=4096,
        socket_burst_s=1.0,
    )


def socket_of(tenants: TenantSocketBudgets, tenant: str, settings: RealtimeSettings, clock: Clock) -> SocketBudget:
    share = TenantShare(tenants, tenant, settings, max_message_bytes=1024)
    return SocketBudget(settings, max_message_bytes=1024, tenant=share, clock=clock)


def test_a_tenants_sockets_together_pay_the_tenants_budget() -> None:
    clock = Clock()
    tenants = TenantSocketBudgets(clock)
    settings = tenant_settings(messages=10, tenant_messages=15)
    first, second = (socket_of(tenants, "acme", settings, clock) for _ in range(2))
    other = socket_of(tenants, "globex", settings, clock)
    for _ in range(10):
        first.charge(text(1))
    for _ in range(5):
        second.charge(text(1))
    with pytest.raises(SocketBudgetExceededError) as over:
        second.charge(text(1))  # the socket's own budget has 5 more; the tenant's is spent
    assert over.value.error.code == "rate_limit_exceeded"
    assert "all of your sockets together" in over.value.error.message
    for _ in range(10):
        other.charge(text(1))  # another tenant pays its own
    clock.now += 0.1
    second.charge(text(1))


def test_a_tenant_that_reconnects_finds_its_budget_as_it_left_it() -> None:
    clock = Clock()
    tenants = TenantSocketBudgets(clock)
    settings = tenant_settings(messages=10, tenant_messages=15)
    for _ in range(10):
        socket_of(tenants, "acme", settings, clock).charge(text(1))
    again = socket_of(tenants, "acme", settings, clock)
    for _ in range(5):
        again.charge(text(1))
    with pytest.raises(SocketBudgetExceededError):
        socket_of(tenants, "acme", settings, clock).charge(text(1))


def test_the_tenants_buckets_are_forgotten_once_full() -> None:
    clock = Clock()
    tenants = TenantSocketBudgets(clock)
    settings = tenant_settings()
    socket_of(tenants, "acme", settings, clock).charge(text(1))
    assert len(tenants) == 1
    clock.now += 1.0  # refilled: as good as new
    socket_of(tenants, "globex", settings, clock).charge(text(1))
    assert len(tenants) == 1


def test_an_echo_is_owed_by_the_tenant_too() -> None:
    clock = Clock()
    tenants = TenantSocketBudgets(clock)
    settings = RealtimeSettings(max_socket_bytes_per_s=4096, max_tenant_socket_bytes_per_s=4096, socket_burst_s=1.0)
    first = socket_of(tenants, "acme", settings, clock)
    first.echoed(4096)  # the tenant's bytes are owed; the next socket's first byte cannot be paid
    with pytest.raises(SocketBudgetExceededError) as over:
        socket_of(tenants, "acme", settings, clock).charge(text(1))
    assert "bytes" in over.value.error.message


async def shared() -> None:
    """Let the replicas' sharing tasks run (they wait ``share_every_s=0``, and the counters answer at once)."""
    for _ in range(10):
        await asyncio.sleep(0)


async def test_replicas_sharing_the_counters_share_a_tenants_budget() -> None:
    """Two replicas' budgets over one set of counters (in memory here; Redis between processes: tests/e2e): what a
    tenant's sockets sent on one is owed on the other, so together they send at the tenant's rate."""
    clock = Clock()
    sends = MemorySocketSends()
    replicas = [TenantSocketBudgets(clock, shared=sends, share_every_s=0) for _ in range(2)]
    settings = tenant_settings(messages=100, tenant_messages=10)
    here, there = (socket_of(replica, "acme", settings, clock) for replica in replicas)
    here.charge(text(1))
    there.charge(text(1))
    await shared()  # each replica's first addition: where its counting starts
    for _ in range(5):
        here.charge(text(1))  # 4 left here; learning of the 1 sent there (after its first addition): 3
    await shared()
    for _ in range(3):
        there.charge(text(1))  # 9 left there at first, less these 3 and the 5 sent here: 1
    await shared()
    there.charge(text(1))
    with pytest.raises(SocketBudgetExceededError) as over:
        there.charge(text(1))  # alone, a replica would have taken 10 of the tenant's sockets' messages
    assert "on all of your sockets together (" in over.value.error.message  # not "on one server"
    here.charge(text(1))  # a replica learns of the others' sends as it shares its own
    await shared()
    with pytest.raises(SocketBudgetExceededError):
        here.charge(text(1))  # 2 left here, less the 4 sent there
    for replica in replicas:
        await replica.close()


async def test_an_unreachable_store_leaves_each_replica_its_own_budget() -> None:
    class Unreachable:
        async def add(self, tenant: str, messages: int, sent_bytes: int) -> tuple[int, int]:
            raise ConnectionError("redis down")

    clock = Clock()
    replica = TenantSocketBudgets(clock, shared=Unreachable(), share_every_s=0)
    socket = socket_of(replica, "acme", tenant_settings(messages=100, tenant_messages=10), clock)
    for _ in range(10):
        socket.charge(text(1))
        await shared()
    with pytest.raises(SocketBudgetExceededError):
        socket.charge(text(1))
    await replica.close()
