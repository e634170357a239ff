"""Reading a real Redis's memory limit and eviction policy, where the server allows it, and the warning of a policy
that may evict the control plane."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from storage import connect_redis
from storage.memory import EvictionPolicyCheck, MemoryLimit, read_memory_limit

if TYPE_CHECKING:
    from tests.redis_server import RedisServer

logger = logging.getLogger("tests.storage.memory")


async def configure(server: RedisServer, maxmemory: int, policy: str) -> None:
    client = connect_redis(server.url)
    await client.config_set("maxmemory", str(maxmemory))
    await client.config_set("maxmemory-policy", policy)
    await client.aclose()


async def user_without(server: RedisServer, *commands: str) -> str:
    """The URL of an ACL user that may run everything but ``commands``."""
    admin = connect_redis(server.url)
    denied = [f"-{command}" for command in commands]
    await admin.execute_command("ACL", "SETUSER", "app", "on", ">pw", "~*", "+@all", *denied)
    await admin.aclose()
    return server.url.replace("redis://", "redis://app:pw@")


async def test_the_limit_is_read_from_info(outage_redis: RedisServer) -> None:
    await configure(outage_redis, 8 * 1024 * 1024, "volatile-lru")
    client = connect_redis(outage_redis.url)
    limit = await read_memory_limit(client)
    assert limit is not None
    assert (limit.maxmemory, limit.policy) == (8 * 1024 * 1024, "volatile-lru")
    assert 0 < limit.startup < 4 * 1024 * 1024
    assert limit.usable == limit.maxmemory - limit.startup
    await client.aclose()


@pytest.mark.parametrize(
    ("denied", "expected"),
    [
        (("info",), MemoryLimit(8 * 1024 * 1024, "allkeys-lru")),  # as on managed Redis that hide INFO: CONFIG
        (("info", "config"), None),
    ],
)
async def test_a_refused_command_falls_back_then_gives_up(
    outage_redis: RedisServer,
    denied: tuple[str, ...],
    expected: MemoryLimit | None,
) -> None:
    await configure(outage_redis, 8 * 1024 * 1024, "allkeys-lru")
    client = connect_redis(await user_without(outage_redis, *denied))
    assert await read_memory_limit(client) == expected
    await client.aclose()


@pytest.mark.parametrize(
    ("maxmemory", "policy", "warns"),
    [
        (8 * 1024 * 1024, "allkeys-lru", True),
        (8 * 1024 * 1024, "allkeys-random", True),
        (8 * 1024 * 1024, "volatile-lru", False),
        (8 * 1024 * 1024, "noeviction", False),
        (0, "allkeys-lru", False),  # no maxmemory: the policy never applies
    ],
)
async def test_a_policy_that_may_evict_keys_without_a_ttl_is_one_warning(
    outage_redis: RedisServer,
    caplog: pytest.LogCaptureFixture,
    maxmemory: int,
    policy: str,
    warns: bool,
) -> None:
    await configure(outage_redis, maxmemory, policy)
    client = connect_redis(outage_redis.url)
    check = EvictionPolicyCheck(client, logger, cache_shares_it=True)
    with caplog.at_level(logging.WARNING, logger=logger.name):
        await check.check()
        await check.check()
    assert check.done
    if warns:
        assert check.warning is not None
        assert policy in check.warning
        assert "volatile-lru" in check.warning and "noeviction" in check.warning and "cache.redis_url" in check.warning
        assert [record.getMessage() for record in caplog.records] == [check.warning]
    else:
        assert check.warning is None
        assert caplog.records == []
    await client.aclose()


async def test_the_fix_names_a_cache_redis_only_when_the_cache_shares_it(outage_redis: RedisServer) -> None:
    await configure(outage_redis, 8 * 1024 * 1024, "allkeys-lfu")
    client = connect_redis(outage_redis.url)
    check = EvictionPolicyCheck(client, logger, cache_shares_it=False)
    await check.check()
    assert check.warning is not None
    assert "cache.redis_url" not in check.warning
    await client.aclose()


async def test_an_unreachable_redis_is_checked_once_it_answers(
    outage_redis: RedisServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    await configure(outage_redis, 8 * 1024 * 1024, "allkeys-lru")
    client = connect_redis(outage_redis.url)
    check = EvictionPolicyCheck(client, logger, cache_shares_it=True)
    outage_redis.stop()
    with pytest.raises((RedisConnectionError, OSError)):
        await check.check()
    assert not check.done
    outage_redis.start()  # a fresh server: no maxmemory until configured
    await configure(outage_redis, 8 * 1024 * 1024, "allkeys-lru")
    await check.check()
    assert check.warning is not None
    await client.aclose()


async def test_an_unreadable_policy_is_one_info_line(
    outage_redis: RedisServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = connect_redis(await user_without(outage_redis, "info", "config"))
    check = EvictionPolicyCheck(client, logger, cache_shares_it=True)
    with caplog.at_level(logging.INFO, logger=logger.name):
        await check.check()
    assert [(record.levelname, "cannot be read" in record.getMessage()) for record in caplog.records] == [
        ("INFO", True)
    ]
    assert check.warning is None
    await client.aclose()
