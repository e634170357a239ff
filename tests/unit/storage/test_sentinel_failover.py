"""A Sentinel failover, as the gateway's one Redis client (``storage.connect_redis``) lives through it.

The client is never rebuilt: its connections ask the sentinels for the master whenever they connect. While there is
no master every call fails fast with one of ``STORAGE_ERRORS`` (so requests fail open or closed, as configured), and
once a replica is promoted the same client reads what the old master had replicated and writes again.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from auth.revocations import RedisRevocationBus, Revocation
from storage import STORAGE_ERRORS, connect_redis
from storage.redis import REDIS_TIMEOUT_S

if TYPE_CHECKING:
    from storage import RedisClient
    from tests.redis_topologies import SentinelSetup

INCR_BOTH = "return {redis.call('INCR', KEYS[1]), redis.call('INCR', KEYS[2])}"
KEYS = ["tts:a:{acme}", "tts:b:{acme}"]


async def _transaction(client: RedisClient) -> list[object]:
    async with client.pipeline(transaction=True) as pipe:
        pipe.hincrby("tts:usage:{acme}:1", "requests", 1)
        pipe.hincrbyfloat("tts:usage:{acme}:1", "seconds", 0.5)
        return list(await pipe.execute())


async def test_after_the_master_is_killed_the_same_client_finds_the_promoted_replica(
    failover_sentinel: SentinelSetup,
) -> None:
    client = connect_redis(failover_sentinel.url)
    script = client.register_script(INCR_BOTH)
    try:
        assert await script(keys=KEYS) == [1, 1]
        assert await _transaction(client) == [1, 0.5]
        failover_sentinel.wait_replicated()
        failover_sentinel.kill_master()
        promotion = asyncio.get_running_loop().run_in_executor(None, failover_sentinel.wait_promoted)
        failures: list[BaseException] = []
        while not promotion.done():
            started = time.monotonic()
            try:
                await client.get(KEYS[0])
            except STORAGE_ERRORS as exc:  # anything else would escape: a 500, not a degraded request
                failures.append(exc)
            # The timeout policy: one try and one retry of at most a second each, never a hang.
            assert time.monotonic() - started < 2 * REDIS_TIMEOUT_S + 0.5
            await asyncio.sleep(0.05)
        await promotion
        assert failures, "the master was killed: some call must have failed"

        assert await client.get(KEYS[0]) == b"1"  # what the old master had replicated is there
        assert await script(keys=KEYS) == [2, 2]
        assert await _transaction(client) == [2, 1.0]
        assert await client.hget("tts:usage:{acme}:1", "requests") == b"2"
    finally:
        await client.aclose()


async def test_a_demoted_master_answering_readonly_sends_each_write_to_the_new_master(
    failover_sentinel: SentinelSetup,
) -> None:
    """After a manual failover the old master is alive and a replica: the client's pooled connections to it answer a
    write with READONLY, which redis-py turns into a reconnection through the sentinels; the client's one retry then
    writes to the new master. A script and a transaction recover the same way as a plain write."""
    client = connect_redis(failover_sentinel.url)
    script = client.register_script(INCR_BOTH)
    try:
        assert await script(keys=KEYS) == [1, 1]  # known to the old master, not to the new one
        # Three connections to the old master, each of which one of the writes below will take from the pool.
        await asyncio.gather(*(client.blpop(["tts:nothing"], timeout=0.2) for _ in range(3)))
        failover_sentinel.wait_replicated()
        failover_sentinel.fail_over()
        results = await asyncio.gather(client.set("tts:plain", 1), script(keys=KEYS), _transaction(client))
        assert list(results) == [True, [2, 2], [1, 0.5]]
        with failover_sentinel.master.client() as new_master:
            assert new_master.get("tts:plain") == b"1"
            new_master.connection_pool.disconnect()
    finally:
        await client.aclose()


async def test_revocation_subscribers_hear_each_other_again_after_a_failover(failover_sentinel: SentinelSetup) -> None:
    """The revocation channel (``auth/revocations.py``) on the gateway's client: the subscriber finds the promoted
    master, says there was a gap (open sessions are then checked against the store), and hears announcements again."""
    clients = [connect_redis(failover_sentinel.url) for _ in range(2)]
    here, there = (RedisRevocationBus(client) for client in clients)
    heard: asyncio.Queue[Revocation] = asyncio.Queue()
    gaps: list[None] = []
    there.listen(heard.put_nowait)
    there.after_gap(lambda: gaps.append(None))
    try:
        for bus in (here, there):
            await bus.start()
        await here.announce(Revocation("key", "key_before"))
        async with asyncio.timeout(2):
            assert await heard.get() == Revocation("key", "key_before")
        failover_sentinel.kill_master()
        await asyncio.get_running_loop().run_in_executor(None, failover_sentinel.wait_promoted)
        async with asyncio.timeout(10):  # at most once: announce until one is heard on the new master
            while heard.empty():
                await here.announce(Revocation("key", "key_after"))
                await asyncio.sleep(0.2)
        assert await heard.get() == Revocation("key", "key_after")
        assert gaps, "the subscriber did not report the time it was away"
    finally:
        for bus, client in zip((here, there), clients, strict=True):
            await bus.close()
            await client.aclose()
