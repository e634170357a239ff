"""The usage ledger's time buckets (what the organization Usage API reads), against memory, fakeredis and a real
redis-server: every request lands in the minute, hour and day it was served in, by model and key, once, and the
buckets add up to the tenant's totals."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import fakeredis
import pytest
import redis.asyncio as aioredis

from auth.settings import TenantLimits
from auth.tenants import Tenant
from auth.usage import (
    BUCKET_RETENTION_S,
    BUCKET_WIDTHS,
    BucketWidth,
    MemoryUsageLedger,
    RedisUsageLedger,
    UsageLedger,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

ACME = Tenant("acme", TenantLimits(), None, generation="g1")
ZETA = Tenant("zeta", TenantLimits(), None, generation="g1")


@pytest.fixture(params=["memory", "fakeredis", "redis"])
async def ledger(request: pytest.FixtureRequest) -> AsyncIterator[UsageLedger]:
    if request.param == "memory":
        yield MemoryUsageLedger()
        return
    client: aioredis.Redis
    if request.param == "fakeredis":
        client = fakeredis.FakeAsyncRedis()
    else:
        client = aioredis.Redis.from_url(request.getfixturevalue("redis_url"), decode_responses=True)
    made = RedisUsageLedger(client)
    yield made
    await made.close()
    await client.aclose()


def _record(ledger: UsageLedger, tenant: Tenant, characters: int, model: str | None, key: str | None) -> None:
    ledger.record_request(
        tenant, characters=characters, audio_seconds=1.0, cache_hit=False, model=model, api_key_id=key
    )


@pytest.mark.parametrize("width", ["1m", "1h", "1d"])
async def test_buckets_add_up_to_the_totals(ledger: UsageLedger, width: BucketWidth) -> None:
    start = int(time.time()) // BUCKET_WIDTHS[width] * BUCKET_WIDTHS[width]
    _record(ledger, ACME, 10, "tts-1", "key_a")
    _record(ledger, ACME, 20, "tts-1", "key_a")
    _record(ledger, ACME, 5, "synthetic", "key_b")
    _record(ledger, ACME, 7, "synthetic", None)  # a JSON Web Token's
    _record(ledger, ZETA, 100, "tts-1", "key_z")
    # A request recorded just as the minute turns lands in the next bucket: read both, and add each group's up.
    found = await ledger.buckets([ACME, ZETA], width, [start, start + BUCKET_WIDTHS[width]])
    by_group: dict[tuple[str, str | None, str | None], tuple[int, int]] = {}
    for e in found:
        characters, requests = by_group.get((e.tenant, e.model, e.api_key_id), (0, 0))
        by_group[e.tenant, e.model, e.api_key_id] = (characters + e.characters, requests + e.requests)
    assert by_group == {
        ("acme", "tts-1", "key_a"): (30, 2),
        ("acme", "synthetic", "key_b"): (5, 1),
        ("acme", "synthetic", None): (7, 1),
        ("zeta", "tts-1", "key_z"): (100, 1),
    }
    totals = await ledger.get(ACME)
    acme = [e for e in found if e.tenant == "acme"]
    assert sum(e.characters for e in acme) == totals.input_characters == 42
    assert sum(e.requests for e in acme) == totals.requests == 4


async def test_a_bucket_never_written_is_empty(ledger: UsageLedger) -> None:
    assert await ledger.buckets([ACME], "1d", [0, 86400]) == []


async def test_a_new_generation_starts_with_empty_buckets(ledger: UsageLedger) -> None:
    _record(ledger, ACME, 10, "tts-1", "key_a")
    again = Tenant("acme", TenantLimits(), None, generation="g2")
    day = int(time.time()) // 86400 * 86400
    assert await ledger.buckets([again], "1d", [day]) == []
    assert [e.characters for e in await ledger.buckets([ACME], "1d", [day])] == [10]


async def test_redis_buckets_expire_after_their_retention(redis_url: str) -> None:
    client = aioredis.Redis.from_url(redis_url, decode_responses=True)
    ledger = RedisUsageLedger(client)
    try:
        _record(ledger, ACME, 10, "tts-1", "key_a")
        await ledger.get(ACME)  # writes what is waiting
        now = time.time()
        for width, seconds in BUCKET_WIDTHS.items():
            start = int(now) // seconds * seconds
            ttl = await client.ttl(f"tts:usage-buckets:{{acme}}:g1:{width}:{start}")
            assert start + BUCKET_RETENTION_S[width] - now - 5 <= ttl <= start + BUCKET_RETENTION_S[width] - now + 1
    finally:
        await ledger.close()
        await client.aclose()
