"""Usage accounting per tenant: requests, input characters, audio seconds, cache hits and rejections.

:class:`RedisUsageLedger` keeps one hash per tenant so that usage survives restarts and adds up across replicas.
While Redis is unreachable the increments wait in memory and are written on the next successful call, so nothing
recorded is lost once Redis returns.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from storage import STORAGE_ERRORS, OutageLatch

if TYPE_CHECKING:
    from collections.abc import Mapping

    import redis.asyncio as aioredis

__all__ = ["MemoryUsageLedger", "RedisUsageLedger", "UsageLedger", "UsageRecord", "UsageUnavailableError"]

logger = logging.getLogger("tts_gateway.usage")

_REJECTION = "rejections:"  # field prefix: one counter per rejection reason
_FLOAT_FIELDS = frozenset({"audio_seconds"})

Counters = dict[str, float]
"""Field name -> value; rejections are ``rejections:<reason>`` fields."""


@dataclass(frozen=True, slots=True)
class UsageRecord:
    """What one tenant has used since its usage was first recorded."""

    requests: int = 0
    input_characters: int = 0
    audio_seconds: float = 0.0
    cache_hits: int = 0
    rejections: dict[str, int] = field(default_factory=dict)
    """Refused requests by reason (``requests``, ``characters``, ``concurrency``, ...)."""


class UsageUnavailableError(Exception):
    """The usage store cannot be read now (Redis unreachable); recording still works."""


class UsageLedger(Protocol):
    """Where usage is counted; every replica of a deployment should share one."""

    async def record_request(self, tenant: str, *, characters: int, audio_seconds: float, cache_hit: bool) -> None:
        """Count one served request."""
        ...

    async def record_rejection(self, tenant: str, reason: str) -> None:
        """Count one refused request."""
        ...

    async def get(self, tenant: str) -> UsageRecord:
        """The tenant's usage (all zero for a tenant never seen)."""
        ...

    async def all(self) -> dict[str, UsageRecord]:
        """Usage of every tenant seen."""
        ...

    async def forget(self, tenant: str) -> None:
        """Delete the tenant's usage (the tenant was deleted: one created under its name starts from zero)."""
        ...


def _request_increments(characters: int, audio_seconds: float, cache_hit: bool) -> Counters:
    return {
        "requests": 1,
        "input_characters": characters,
        "audio_seconds": audio_seconds,
        "cache_hits": 1 if cache_hit else 0,
    }


def _merge(into: Counters, increments: Mapping[str, float]) -> None:
    for name, delta in increments.items():
        into[name] = into.get(name, 0) + delta


def _to_record(counters: Mapping[str, float]) -> UsageRecord:
    rejections = {
        name.removeprefix(_REJECTION): int(value) for name, value in counters.items() if name.startswith(_REJECTION)
    }
    return UsageRecord(
        requests=int(counters.get("requests", 0)),
        input_characters=int(counters.get("input_characters", 0)),
        audio_seconds=float(counters.get("audio_seconds", 0.0)),
        cache_hits=int(counters.get("cache_hits", 0)),
        rejections=rejections,
    )


class MemoryUsageLedger:
    """Usage of this process only; gone on restart."""

    def __init__(self) -> None:
        self._tenants: dict[str, Counters] = {}

    async def record_request(self, tenant: str, *, characters: int, audio_seconds: float, cache_hit: bool) -> None:
        """Count one served request."""
        _merge(self._tenants.setdefault(tenant, {}), _request_increments(characters, audio_seconds, cache_hit))

    async def record_rejection(self, tenant: str, reason: str) -> None:
        """Count one refused request."""
        _merge(self._tenants.setdefault(tenant, {}), {_REJECTION + reason: 1})

    async def get(self, tenant: str) -> UsageRecord:
        """The tenant's usage (all zero for a tenant never seen)."""
        return _to_record(self._tenants.get(tenant, {}))

    async def all(self) -> dict[str, UsageRecord]:
        """Usage of every tenant seen."""
        return {tenant: _to_record(counters) for tenant, counters in self._tenants.items()}

    async def forget(self, tenant: str) -> None:
        """Delete the tenant's usage."""
        self._tenants.pop(tenant, None)


class RedisUsageLedger:
    """Usage in Redis: one hash ``{prefix}{tenant}`` per tenant, incremented with HINCRBY/HINCRBYFLOAT.

    Args:
        client: a ``redis.asyncio.Redis`` (with or without ``decode_responses``); the caller owns and closes it.
        prefix: key prefix of the hashes.
    """

    def __init__(self, client: aioredis.Redis, prefix: str = "tts:usage:") -> None:
        self._client = client
        self._prefix = prefix
        self._pending: dict[str, Counters] = {}
        self._outage = OutageLatch(
            logger,
            "usage store unreachable, keeping usage in memory until it returns",
            "usage store reachable again; buffered usage written",
        )
        self._writes: set[asyncio.Task[None]] = set()

    async def record_request(self, tenant: str, *, characters: int, audio_seconds: float, cache_hit: bool) -> None:
        """Count one served request (kept in memory until Redis is reachable again)."""
        await self._record(tenant, _request_increments(characters, audio_seconds, cache_hit))

    async def record_rejection(self, tenant: str, reason: str) -> None:
        """Count one refused request (kept in memory until Redis is reachable again)."""
        await self._record(tenant, {_REJECTION + reason: 1})

    async def get(self, tenant: str) -> UsageRecord:
        """The tenant's usage, including increments still waiting for Redis.

        Raises:
            UsageUnavailableError: Redis is unreachable.
        """
        await self._flush()
        try:
            stored = await self._client.hgetall(self._prefix + tenant)
        except STORAGE_ERRORS as exc:
            raise UsageUnavailableError("usage store unreachable") from exc
        counters = _decode(stored)
        _merge(counters, self._pending.get(tenant, {}))
        return _to_record(counters)

    async def all(self) -> dict[str, UsageRecord]:
        """Usage of every tenant seen, including increments still waiting for Redis.

        Raises:
            UsageUnavailableError: Redis is unreachable.
        """
        await self._flush()
        try:
            keys = [_text(key) async for key in self._client.scan_iter(match=self._prefix + "*")]
            tenants = [key.removeprefix(self._prefix) for key in keys]
            stored = {tenant: await self._client.hgetall(self._prefix + tenant) for tenant in tenants}
        except STORAGE_ERRORS as exc:
            raise UsageUnavailableError("usage store unreachable") from exc
        counters = {tenant: _decode(fields) for tenant, fields in stored.items()}
        for tenant, pending in self._pending.items():
            _merge(counters.setdefault(tenant, {}), pending)
        return {tenant: _to_record(fields) for tenant, fields in counters.items()}

    async def forget(self, tenant: str) -> None:
        """Delete the tenant's usage, increments still waiting for Redis included.

        Raises:
            UsageUnavailableError: Redis is unreachable.
        """
        self._pending.pop(tenant, None)
        try:
            await self._client.delete(self._prefix + tenant)
        except STORAGE_ERRORS as exc:
            raise UsageUnavailableError("usage store unreachable") from exc

    async def _record(self, tenant: str, increments: Counters) -> None:
        _merge(self._pending.setdefault(tenant, {}), increments)
        await self._flush()

    async def _flush(self) -> None:
        """Write every pending increment in one transaction, or keep them all for the next call."""
        if not self._pending:
            return
        # Taken before the first await, so a concurrent call neither writes these twice nor loses its own.
        pending, self._pending = self._pending, {}
        # A task of its own, shielded: a caller cancelled mid-write (a client gone, and anyio cancels again at every
        # await) must not abandon a transaction that may already have reached Redis; keeping it would count it twice.
        write = asyncio.get_running_loop().create_task(self._write_or_keep(pending))
        self._writes.add(write)
        write.add_done_callback(self._writes.discard)
        await asyncio.shield(write)

    async def _write_or_keep(self, pending: Mapping[str, Counters]) -> None:
        try:
            await self._write(pending)
        except STORAGE_ERRORS as exc:
            self._keep(pending)
            self._outage.failed(exc)
            return
        self._outage.worked()

    async def _write(self, pending: Mapping[str, Counters]) -> None:
        async with self._client.pipeline(transaction=True) as pipe:
            for tenant, counters in pending.items():
                for name, delta in counters.items():
                    if name in _FLOAT_FIELDS:
                        pipe.hincrbyfloat(self._prefix + tenant, name, delta)
                    elif delta:
                        pipe.hincrby(self._prefix + tenant, name, int(delta))
            await pipe.execute()

    def _keep(self, pending: Mapping[str, Counters]) -> None:
        for tenant, counters in pending.items():
            _merge(self._pending.setdefault(tenant, {}), counters)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _decode(fields: Mapping[bytes | str, bytes | str]) -> Counters:
    return {_text(name): float(_text(value)) for name, value in fields.items()}
