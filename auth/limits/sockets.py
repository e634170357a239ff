"""What a tenant's realtime sockets sent on every replica together (:class:`RedisSocketSends`): the shared half of the
tenant's socket budget (``gateway/sessions/budget.py``).

A socket's messages are paid for on its replica, in memory, as they arrive: a storage round trip per message would
cost more than the parse the budget guards. Each replica then adds what its sockets of a tenant sent to two counters
per tenant in Redis, a few times a second, and learns from the totals what the other replicas' sockets sent
meanwhile, which its own buckets owe: so a tenant's sockets spread over N replicas send at the tenant's rate, not N
times it. The counters only grow (a replica keeps the totals it last saw) and expire a minute after the last send;
they live in the limits' Redis, under the tenant's hash tag as its windows do (``redis.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from storage import RedisClient

__all__ = ["SENDS_TTL_S", "MemorySocketSends", "RedisSocketSends"]

SENDS_TTL_S = 60.0
"""A tenant's counters expire this long after its sockets last sent (on any replica)."""

# Adds a replica's sends. KEYS: the tenant's counters (hash). ARGV: messages, bytes, TTL in ms. Returns the totals.
_ADD_LUA = """
local messages = redis.call('HINCRBY', KEYS[1], 'messages', ARGV[1])
local sent = redis.call('HINCRBY', KEYS[1], 'bytes', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {messages, sent}
"""


class RedisSocketSends:
    """The messages and bytes each tenant's sockets sent, on every replica together, since its counters were made.

    Storage failures raise one of :data:`storage.STORAGE_ERRORS`; the caller decides what they mean.
    """

    def __init__(self, client: RedisClient, prefix: str = "tts:") -> None:
        self._prefix = prefix
        self._add = client.register_script(_ADD_LUA)

    async def add(self, tenant: str, messages: int, sent_bytes: int) -> tuple[int, int]:
        """Add what this replica's sockets of ``tenant`` sent; the totals of every replica's, this included."""
        key = f"{self._prefix}socket-sends:{{{tenant}}}"
        totals = await self._add(keys=[key], args=[messages, sent_bytes, int(SENDS_TTL_S * 1000)])
        return int(totals[0]), int(totals[1])


class MemorySocketSends:
    """The same counters in one process's memory: for replicas that share a process (tests), since a replica alone
    has nothing to share (its own buckets hold all its tenants' sockets)."""

    def __init__(self) -> None:
        self._totals: dict[str, tuple[int, int]] = {}

    async def add(self, tenant: str, messages: int, sent_bytes: int) -> tuple[int, int]:
        old_messages, old_bytes = self._totals.get(tenant, (0, 0))
        self._totals[tenant] = totals = (old_messages + messages, old_bytes + sent_bytes)
        return totals
