"""Moves what a gateway before the Redis Cluster layout stored in Redis into today's layout, once, at start.

Before it, tenants and keys lived under ``tts:auth:``, a tenant's voices in ``tts:voices:<tenant>`` and its usage in
``tts:usage:<tenant>``; today every key carries a hash tag (``tts:{auth}:``, ``tts:voices:{<tenant>}``,
``tts:usage:{<tenant>}:<generation>``) so that Redis Cluster can run the stores' scripts. An upgraded gateway finds
the old keys, writes them the new way and deletes them; what no longer belongs to anyone (keys of deleted tenants,
their revoked records) is dropped on the way. Windows, leases and cached audio are not moved: they expire by
themselves within a minute, a lease's TTL and the cache's TTL.

Replicas of the previous version must be stopped before the upgrade: what they write under the old names afterwards
is not moved. Only a single Redis (or Sentinel) can hold the old layout: a Cluster never could.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from redis.asyncio.cluster import RedisCluster

from auth.tenants import ANONYMOUS
from lifecycle import naming

if TYPE_CHECKING:
    from storage import RedisClient

__all__ = ["move_legacy_layout"]

logger = naming.logger("services")

_MARKER = "tts:layout"
_LAYOUT = b"2"  # today's: every key hash-tagged
_LOCK = "tts:layout:moving"
_LOCK_TTL_S = 300
_OLD_AUTH = "tts:auth:"
_NEW_AUTH = "tts:{auth}:"


async def move_legacy_layout(client: RedisClient, *, revoked_retention_s: int) -> None:
    """Move the previous layout's records, if there are any (one replica does it; the others skip). A marker records
    that the Redis holds today's layout, so later starts cost one read."""
    if isinstance(client, RedisCluster) or _bytes(await client.get(_MARKER) or b"") == _LAYOUT:
        return
    if not await client.set(_LOCK, "1", nx=True, ex=_LOCK_TTL_S):
        return  # another replica is at it
    try:
        if await _anything_to_move(client):
            await _move_everything(client, revoked_retention_s)
        await client.set(_MARKER, _LAYOUT)
    finally:
        await client.delete(_LOCK)


async def _move_everything(client: RedisClient, revoked_retention_s: int) -> None:
    generations = await _move_auth(client, revoked_retention_s)
    voices = await _move_per_tenant(client, "tts:voices:", _move_voices)
    usage = await _move_per_tenant(client, "tts:usage:", lambda c, key, t: _move_usage(c, key, t, generations))
    logger.warning(
        "moved the previous version's Redis layout: %d tenants with their keys, voices of %d tenants, usage of %d",
        len(generations),
        voices,
        usage,
    )


async def _anything_to_move(client: RedisClient) -> bool:
    if await client.exists(f"{_OLD_AUTH}tenants"):
        return True
    for pattern in ("tts:voices:*", "tts:usage:*"):
        async for key in client.scan_iter(match=pattern, count=500):
            if b"{" not in _bytes(key):
                return True
    return False


async def _move_auth(client: RedisClient, revoked_retention_s: int) -> dict[str, str]:
    """Tenants and their keys; returns each tenant's generation."""
    tenants = {_text(name): _text(raw) for name, raw in (await client.hgetall(f"{_OLD_AUTH}tenants")).items()}
    for name, raw in tenants.items():
        await client.hset(f"{_NEW_AUTH}tenants", name, raw)
        await client.zadd(f"{_NEW_AUTH}tenant-names", {name: 0})
    async for key in client.scan_iter(match=f"{_OLD_AUTH}key:*", count=500):
        fields = {_text(k): _text(v) for k, v in (await client.hgetall(key)).items()}
        if fields.get("tenant") in tenants:  # a deleted tenant's keys stay behind
            await _move_key(client, fields, revoked_retention_s)
    async for key in client.scan_iter(match=f"{_OLD_AUTH}*", count=500):
        await client.delete(key)
    return {name: str(json.loads(raw).get("generation", "")) for name, raw in tenants.items()}


async def _move_key(client: RedisClient, fields: dict[str, str], revoked_retention_s: int) -> None:
    record, key_id = f"{_NEW_AUTH}key:{fields['key_hash']}", fields["id"]
    await client.hset(record, items=[item for pair in fields.items() for item in pair])
    await client.set(f"{_NEW_AUTH}key-id:{key_id}", fields["key_hash"])
    await client.zadd(f"{_NEW_AUTH}tenant-keys:{fields['tenant']}", {key_id: 0})
    if fields.get("revoked") == "1" and fields.get("hint"):  # issued by the gateway: kept for the audit only
        await client.expire(record, revoked_retention_s)
        await client.expire(f"{_NEW_AUTH}key-id:{key_id}", revoked_retention_s)


async def _move_per_tenant(client: RedisClient, prefix: str, move: _Move) -> int:
    moved = 0
    async for key in client.scan_iter(match=f"{prefix}*", count=500):
        name = _bytes(key)
        if b"{" in name or b":" in name[len(prefix) :]:  # today's layout, or not a tenant's
            continue
        await move(client, name, _text(name)[len(prefix) :])
        moved += 1
    return moved


async def _move_voices(client: RedisClient, key: bytes, tenant: str) -> None:
    tag = f"{{{tenant}}}"
    for voice_id, raw in (await client.hgetall(key)).items():
        await client.hset(f"tts:voices:{tag}", voice_id, raw)
        await client.hsetnx(f"tts:voice-names:{tag}", json.loads(raw)["name"], voice_id)
        await client.zadd(f"tts:voice-ids:{tag}", {_text(voice_id): 0})
    await client.delete(key)


async def _move_usage(client: RedisClient, key: bytes, tenant: str, generations: dict[str, str]) -> None:
    if tenant in generations or tenant == ANONYMOUS.name:  # the open gateway's one tenant has no record
        await client.rename(key, f"tts:usage:{{{tenant}}}:{generations.get(tenant, '')}")
    else:  # usage the previous version forgot to delete with its tenant
        await client.delete(key)


def _bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode()


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    _Move = Callable[[RedisClient, bytes, str], Awaitable[None]]
