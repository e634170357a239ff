"""``storage.connect_redis`` against real servers: credentials reach the right servers, and a Redis that is out of
reach fails fast, with one of ``STORAGE_ERRORS`` and without the password in what it says."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import pytest
from redis.exceptions import AuthenticationError, ResponseError

from harness.gateway_process import free_port
from storage import STORAGE_ERRORS, connect_redis
from storage.redis import REDIS_TIMEOUT_S, pool_exhaustions
from storage.settings import RedisPoolSettings
from tests.redis_server import disconnected
from tests.redis_topologies import REDIS_PASSWORD, SENTINEL_PASSWORD, SERVICE

if TYPE_CHECKING:
    from storage import RedisClient
    from tests.redis_topologies import RedisClusterSetup, SentinelSetup

SECRET = "n0t-the-password"


def _sentinels(setup: SentinelSetup) -> str:
    return ",".join(f"127.0.0.1:{sentinel.port}" for sentinel in setup.sentinels)


async def _fails(url: str) -> BaseException:
    client = connect_redis(url)
    started = time.monotonic()
    try:
        await client.set("tts:k", 1)
    except STORAGE_ERRORS as exc:
        # The timeout policy: one try and one retry of at most a second each, never a hang.
        assert time.monotonic() - started < 2 * REDIS_TIMEOUT_S + 0.5
        return exc
    finally:
        await client.aclose()
    raise AssertionError(f"{url} worked")


@pytest.mark.parametrize(
    "template",
    [
        "redis://:{secret}@127.0.0.1:{port}/0",
        "redis+sentinel://:{secret}@127.0.0.1:{port},127.0.0.1:{port2}/tts?sentinel_password={secret}",
        "redis+cluster://:{secret}@127.0.0.1:{port},127.0.0.1:{port2}",
    ],
)
async def test_nothing_listening_fails_fast_without_the_password(template: str) -> None:
    error = await _fails(template.format(secret=SECRET, port=free_port(), port2=free_port()))
    assert SECRET not in f"{error!s} {error!r} {error.__cause__!r} {error.__context__!r}"


async def test_the_sentinels_get_their_own_password_and_the_master_its_own(redis_sentinel: SentinelSetup) -> None:
    """As in the fixture, Redis and the sentinels have different passwords here."""
    sentinels = _sentinels(redis_sentinel)
    both = f"redis+sentinel://:{REDIS_PASSWORD}@{sentinels}/{SERVICE}?sentinel_password={SENTINEL_PASSWORD}"
    client = connect_redis(both)
    try:
        assert await client.ping() is True
    finally:
        await client.aclose()
    # Without sentinel_password the sentinels are sent Redis's password (as limits does): refused here.
    refused = await _fails(f"redis+sentinel://:{REDIS_PASSWORD}@{sentinels}/{SERVICE}")
    assert REDIS_PASSWORD not in f"{refused!s} {refused!r}"
    # An empty sentinel_password sends them none: refused too, by sentinels that want one.
    await _fails(f"redis+sentinel://:{REDIS_PASSWORD}@{sentinels}/{SERVICE}?sentinel_password=")
    # The right sentinel password and a wrong one for Redis: the master refuses.
    wrong = await _fails(f"redis+sentinel://:{SECRET}@{sentinels}/{SERVICE}?sentinel_password={SENTINEL_PASSWORD}")
    assert isinstance(wrong, AuthenticationError | ResponseError) and SECRET not in f"{wrong!s} {wrong!r}"


async def test_a_cluster_takes_the_password_to_every_node(redis_cluster: RedisClusterSetup) -> None:
    client = connect_redis(redis_cluster.url)
    try:
        for n in range(30):  # keys on every node
            assert await client.set(f"tts:k:{{t{n}}}", n) is True
    finally:
        await client.aclose()
    nodes = ",".join(f"127.0.0.1:{node.port}" for node in redis_cluster.nodes)
    wrong = await _fails(f"redis+cluster://:{SECRET}@{nodes}")
    assert SECRET not in f"{wrong!s} {wrong!r}"


async def test_a_database_number_reaches_the_sentinel_managed_master(
    redis_sentinel: SentinelSetup, redis_sentinel_url: str
) -> None:
    client = connect_redis(redis_sentinel_url.replace(f"/{SERVICE}/0?", f"/{SERVICE}/3?"))
    try:
        await client.set("tts:in-db-3", 1)
    finally:
        await client.aclose()
    with disconnected(redis_sentinel.master.client(db=3)) as db3, disconnected(redis_sentinel.master.client()) as db0:
        assert db3.get("tts:in-db-3") == b"1"
        assert db0.get("tts:in-db-3") is None


async def _blocked_commands(client: RedisClient, count: int, list_key: str) -> list[BaseException | None]:
    """``count`` commands at once, each holding its connection for 0.3 s (a BLPOP that times out)."""
    answers = await asyncio.gather(
        *(client.blpop([list_key], timeout=0.3) for _ in range(count)), return_exceptions=True
    )
    return [answer if isinstance(answer, BaseException) else None for answer in answers]


@pytest.mark.parametrize("topology", ["standalone", "sentinel"])
async def test_commands_beyond_the_pool_wait_for_a_free_connection(
    topology: str, request: pytest.FixtureRequest
) -> None:
    """Before: redis-py's default pool raised at once when all its connections were in use, so a burst of requests
    got 503 ``backend_unavailable`` while Redis itself idled. Six commands on two connections now take turns."""
    url = str(request.getfixturevalue("redis_url" if topology == "standalone" else "redis_sentinel_url"))
    client = connect_redis(url, RedisPoolSettings(max_connections=2, wait_s=5.0))
    try:
        assert await _blocked_commands(client, 6, "tts:nothing") == [None] * 6
        assert pool_exhaustions(client) == 0
    finally:
        await client.aclose()


@pytest.mark.parametrize("topology", ["standalone", "sentinel"])
async def test_a_command_waits_on_while_connections_keep_coming_back(
    topology: str, request: pytest.FixtureRequest
) -> None:
    """Before: one deadline from the start of the wait, so on a busy loop a queue of commands failed as if Redis were
    down while its connections were coming back every moment. Twenty-four commands holding each of two connections
    for 0.1 s take 1.2 s; each waits 0.5 s at a time and always sees one come back meanwhile (a loaded machine may
    delay a return by a few tenths of a second, not by half a second)."""
    url = str(request.getfixturevalue("redis_url" if topology == "standalone" else "redis_sentinel_url"))
    client = connect_redis(url, RedisPoolSettings(max_connections=2, wait_s=0.5))
    try:
        answers = await asyncio.gather(
            *(client.blpop(["tts:nothing"], timeout=0.1) for _ in range(24)), return_exceptions=True
        )
        assert answers == [None] * 24
        assert pool_exhaustions(client) == 0
    finally:
        await client.aclose()


async def test_a_command_that_waits_past_the_bound_fails_as_an_outage_and_is_counted(redis_url: str) -> None:
    client = connect_redis(redis_url, RedisPoolSettings(max_connections=2, wait_s=0.05))
    try:
        failures = [answer for answer in await _blocked_commands(client, 6, "tts:nothing") if answer is not None]
        assert failures  # two held the connections for 0.3 s; the others waited 0.05 s and saw none come back
        assert all(isinstance(failure, STORAGE_ERRORS) for failure in failures)
        assert pool_exhaustions(client) == len(failures)
    finally:
        await client.aclose()
