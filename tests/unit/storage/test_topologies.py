"""What redis-py 8 (asyncio) does on each Redis topology, pinned against real servers: the facts the stores rely on.

One Redis, a Sentinel-managed master and a 3-master Redis Cluster (``tests/redis_topologies.py``), each reached through
``storage.connect_redis``. On a Cluster every script, transaction and multi-key read must keep to one hash slot (the
key layout of issue #26 puts each of them under one ``{tag}``); what the client splits or refuses by itself is pinned
here, so that a redis-py upgrade that changes it fails here first.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, cast

import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot
from redis.exceptions import CrossSlotTransactionError, RedisClusterException

from storage import RedisClient, connect_redis
from storage.redis import ClusterClient, SentinelMasterClient

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from tests.redis_topologies import RedisClusterSetup

# One tag, one slot; two tags, two slots (checked below, not assumed).
SAME_SLOT = ["tts:a:{acme}", "tts:b:{acme}"]
TWO_SLOTS = ["tts:a:{acme}", "tts:b:{globex}"]
WRITE_BOTH = "redis.call('SET', KEYS[1], ARGV[1]) redis.call('SET', KEYS[2], ARGV[1]) return redis.call('GET', KEYS[2])"


@pytest.fixture
async def client(any_redis_url: str) -> AsyncIterator[RedisClient]:
    redis = connect_redis(any_redis_url)
    yield redis
    await redis.aclose()


@pytest.fixture
async def cluster(redis_cluster_url: str) -> AsyncIterator[RedisCluster]:
    redis = connect_redis(redis_cluster_url)
    assert isinstance(redis, RedisCluster)
    yield redis
    await redis.aclose()


def test_the_example_keys_are_in_one_slot_and_in_two() -> None:
    assert key_slot(SAME_SLOT[0].encode()) == key_slot(SAME_SLOT[1].encode())
    assert key_slot(TWO_SLOTS[0].encode()) != key_slot(TWO_SLOTS[1].encode())


async def test_each_url_gives_the_client_of_its_topology(any_redis_url: str, client: RedisClient) -> None:
    expected = {"redis": Redis, "sentinel": SentinelMasterClient, "cluster": ClusterClient}
    scheme = any_redis_url.partition("://")[0].removeprefix("redis+")
    assert type(client) is expected[scheme if scheme in expected else "redis"]
    assert await client.set("tts:k", b"\x00\xff") is True
    assert await client.get("tts:k") == b"\x00\xff"  # bytes, undecoded: the audio cache needs them so


async def test_concurrent_first_commands_of_a_cluster_client_all_work(redis_cluster_url: str) -> None:
    """Stock redis-py 8.1 sends them before it knows the slots: redirected, it rebuilds its view of the cluster under
    them and some fail (``storage.redis.ClusterClient``)."""
    for _ in range(3):
        cluster = connect_redis(redis_cluster_url)
        try:
            results = await asyncio.gather(*(cluster.set(f"tts:c:{{t{n}}}", n) for n in range(100)))
        finally:
            await cluster.aclose()
        assert results == [True] * 100


async def test_a_subscription_can_be_the_first_command_of_a_cluster_client(redis_cluster_url: str) -> None:
    """The revocation subscriber is the first user of the client (redis/redis-py#4296: a ``KeyError`` in 8.1)."""
    cluster = connect_redis(redis_cluster_url)
    try:
        async with cluster.pubsub() as pubsub:
            await pubsub.subscribe("tts:auth:revocations")
            assert (await pubsub.get_message(timeout=1.0))["type"] == "subscribe"
    finally:
        await cluster.aclose()


# ------------------------------------------------------------------ scripts
async def test_a_script_on_keys_of_one_slot_works_everywhere(client: RedisClient) -> None:
    script = client.register_script(WRITE_BOTH)
    assert await script(keys=SAME_SLOT, args=["1"]) == b"1"


async def test_a_cluster_refuses_a_script_across_slots_before_sending_it(cluster: RedisCluster) -> None:
    """``RedisClusterException``, which is not a ``RedisError`` (``STORAGE_ERRORS`` holds both); nothing is written."""
    script = cluster.register_script(WRITE_BOTH)
    with pytest.raises(RedisClusterException, match="same key slot"):
        await script(keys=TWO_SLOTS, args=["1"])
    assert await cluster.exists(*TWO_SLOTS) == 0


async def test_a_registered_script_runs_on_every_node_of_a_cluster(
    cluster: RedisCluster, redis_cluster: RedisClusterSetup
) -> None:
    """EVALSHA goes to the node of the keys' slot; a node that never saw the script answers NOSCRIPT, and redis-py
    loads it there and runs it again: a store registers its scripts once, whatever node its keys land on."""
    script = cluster.register_script(WRITE_BOTH)
    owners = set()
    for n in range(64):
        keys = [f"tts:a:{{t{n}}}", f"tts:b:{{t{n}}}"]
        assert await script(keys=keys, args=[str(n)]) == str(n).encode()
        owner = cluster.get_node_from_key(keys[0])
        assert owner is not None
        owners.add(owner.port)
    assert owners == {node.port for node in redis_cluster.nodes}


# ------------------------------------------------------------------ pipelines and multi-key commands
async def test_a_transaction_on_one_slot_works_everywhere(client: RedisClient) -> None:
    async with client.pipeline(transaction=True) as pipe:
        pipe.hincrby(SAME_SLOT[0], "requests", 1)
        pipe.hincrbyfloat(SAME_SLOT[1], "seconds", 1.5)
        assert await pipe.execute() == [1, 1.5]


async def test_a_cluster_refuses_a_transaction_across_slots(cluster: RedisCluster) -> None:
    async with cluster.pipeline(transaction=True) as pipe:
        pipe.set(TWO_SLOTS[0], 1)
        pipe.set(TWO_SLOTS[1], 1)
        with pytest.raises(CrossSlotTransactionError):
            await pipe.execute()
    assert await cluster.exists(*TWO_SLOTS) == 0


async def test_a_pipeline_without_transaction_may_span_slots_everywhere(client: RedisClient) -> None:
    """On a Cluster redis-py splits it by node: each command runs, but not all at once."""
    keys = [f"tts:p:{{t{n}}}" for n in range(20)]
    async with client.pipeline(transaction=False) as pipe:
        for n, key in enumerate(keys):
            pipe.set(key, n)
        for key in keys:
            pipe.get(key)
        results = await pipe.execute()
    assert results == [True] * 20 + [str(n).encode() for n in range(20)]


async def test_a_cluster_splits_a_delete_across_slots_but_refuses_a_read(cluster: RedisCluster) -> None:
    """DEL, EXISTS, UNLINK and TOUCH across slots are split by redis-py (not atomic); MGET is refused
    (``mget_nonatomic`` splits it)."""
    await cluster.mset_nonatomic(dict.fromkeys(TWO_SLOTS, b"1"))
    with pytest.raises(RedisClusterException, match="same key slot"):
        await cluster.mget(*TWO_SLOTS)
    assert await cluster.mget_nonatomic(*TWO_SLOTS) == [b"1", b"1"]
    assert await cluster.delete(*TWO_SLOTS) == 2


# ------------------------------------------------------------------ pub/sub
async def _next_message(pubsub: object) -> object:
    for _ in range(20):
        message = await pubsub.get_message(timeout=0.5)  # type: ignore[attr-defined]
        if message is not None and message["type"] == "message":
            return message["data"]
    return None


async def test_a_subscriber_hears_what_another_client_publishes(any_redis_url: str, client: RedisClient) -> None:
    publisher = connect_redis(any_redis_url)
    try:
        async with client.pubsub() as pubsub:
            await pubsub.subscribe("tts:auth:revocations")
            assert (await pubsub.get_message(timeout=1.0))["type"] == "subscribe"
            await publisher.publish("tts:auth:revocations", b"revoked")
            assert await _next_message(pubsub) == b"revoked"
    finally:
        await publisher.aclose()


async def test_a_cluster_publish_on_any_node_reaches_a_subscriber_on_another(
    cluster: RedisCluster, redis_cluster: RedisClusterSetup
) -> None:
    """The cluster bus forwards PUBLISH to every node, so the subscriber hears it from whichever node redis-py picked
    for it (the node of the channel's slot). PUBLISH's reply counts the subscribers of the node it was sent to only:
    0 from the other nodes, so it says nothing about who heard."""
    channel = "tts:auth:revocations"
    async with cluster.pubsub() as pubsub:
        await pubsub.subscribe(channel)
        assert (await pubsub.get_message(timeout=1.0))["type"] == "subscribe"
        home = cluster.get_node_from_key(channel)
        assert home is not None
        receivers = {}
        for node in cluster.get_primaries():
            receivers[node.port] = await cluster.publish(channel, f"via {node.port}", target_nodes=node)
            assert await _next_message(pubsub) == f"via {node.port}".encode()
    assert receivers == {node.port: int(node.port == home.port) for node in redis_cluster.nodes}


# ------------------------------------------------------------------ whole-keyspace and per-server commands
async def test_scan_iter_sees_every_primary(client: RedisClient) -> None:
    keys = {f"tts:usage:{{t{n}}}:1".encode() for n in range(30)}
    await asyncio.gather(*(client.set(key, 1) for key in keys))
    assert {key async for key in client.scan_iter(match="tts:usage:*")} == keys


async def test_config_and_memory_of_each_primary_need_target_nodes_on_a_cluster(
    cluster: RedisCluster, redis_cluster: RedisClusterSetup
) -> None:
    """Without ``target_nodes`` CONFIG GET and INFO answer for one node; with ``RedisCluster.PRIMARIES`` they answer
    ``{"host:port": answer}`` for every primary: a check of the eviction policy or of memory must ask each."""
    names = {f"127.0.0.1:{node.port}" for node in redis_cluster.nodes}
    # redis-py types the answer of one node whatever target_nodes asks for.
    policies = cast(
        "dict[str, dict[str, str]]",
        await cluster.config_get("maxmemory-policy", target_nodes=RedisCluster.PRIMARIES),
    )
    assert set(policies) == names
    assert {answer["maxmemory-policy"] for answer in policies.values()} == {"noeviction"}
    memory = await cluster.info("memory", target_nodes=RedisCluster.PRIMARIES)
    assert set(memory) == names and all(answer["used_memory"] > 0 for answer in memory.values())
    assert set(await cluster.config_get("maxmemory-policy")) == {"maxmemory-policy"}  # one node's answer
    assert "used_memory" in await cluster.info("memory")


async def test_config_and_memory_of_one_redis(client: RedisClient) -> None:
    if isinstance(client, RedisCluster):
        pytest.skip("per primary: test_config_and_memory_of_each_primary_need_target_nodes_on_a_cluster")
    assert await client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
    assert (await client.info("memory"))["used_memory"] > 0
