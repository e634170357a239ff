"""Usage in this process's memory: :class:`MemoryUsageLedger`, for a single replica and for tests."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from auth.tenants import Tenant

from auth.usage.base import (
    _BUCKET,
    _REJECTION,
    _RETIRED_AT,
    BUCKET_RETENTION_S,
    BUCKET_WIDTHS,
    DEFAULT_RETIRED_RETENTION_S,
    BucketUsage,
    BucketWidth,
    Counters,
    Owner,
    RetiredUsage,
    UsageRecord,
    _bucket_field,
    _bucket_usage,
    _merge,
    _owner,
    _request_increments,
    _to_record,
    _to_retired,
)

__all__ = ["MemoryUsageLedger"]


class MemoryUsageLedger:
    """Usage of this process only; gone on restart (methods as on :class:`UsageLedger`)."""

    def __init__(self, *, retired_retention_s: float = DEFAULT_RETIRED_RETENTION_S) -> None:
        self._live: dict[Owner, Counters] = {}
        self._retired: dict[Owner, tuple[float, Counters]] = {}  # owner -> (expiry, counters)
        self._buckets: dict[tuple[Owner, BucketWidth, int], Counters] = {}
        """(owner, width, start) -> ``model<US>key<US>counter`` -> count."""
        self._retention_s = retired_retention_s
        self._pruned_at = 0.0

    def record_request(
        self,
        tenant: Tenant,
        *,
        characters: int,
        audio_seconds: float,
        cache_hit: bool,
        model: str | None = None,
        api_key_id: str | None = None,
    ) -> None:
        increments = _request_increments(characters, audio_seconds, cache_hit, model, api_key_id, time.time())
        totals = {name: delta for name, delta in increments.items() if not name.startswith(_BUCKET)}
        self._add(_owner(tenant), totals)
        for name, delta in increments.items():
            if (field_of := _bucket_field(name)) is not None:
                width, start, rest = field_of
                _merge(self._buckets.setdefault((_owner(tenant), width, start), {}), {rest: delta})
        self._prune_buckets()

    async def buckets(self, tenants: Sequence[Tenant], width: BucketWidth, starts: Sequence[int]) -> list[BucketUsage]:
        self._prune_buckets()
        found: list[BucketUsage] = []
        for tenant in tenants:
            for start in starts:
                found += _bucket_usage(tenant.name, start, self._buckets.get((_owner(tenant), width, start), {}))
        return found

    def record_rejection(self, tenant: Tenant, reason: str) -> None:
        self._add(_owner(tenant), {_REJECTION + reason: 1})

    async def get(self, tenant: Tenant) -> UsageRecord:
        return _to_record(self._live.get(_owner(tenant), {}))

    async def many(self, tenants: Iterable[Tenant]) -> list[UsageRecord]:
        return [await self.get(tenant) for tenant in tenants]

    def _prune_buckets(self) -> None:
        """Forget the buckets past their retention, at most once a minute."""
        now = time.time()
        if now - self._pruned_at < BUCKET_WIDTHS["1m"]:
            return
        self._pruned_at = now
        for key in [key for key in self._buckets if key[2] + BUCKET_RETENTION_S[key[1]] <= now]:
            del self._buckets[key]

    async def retire(self, tenant: Tenant) -> None:
        counters = self._live.pop(_owner(tenant), {})
        counters[_RETIRED_AT] = time.time()
        self._retired[_owner(tenant)] = (time.monotonic() + self._retention_s, counters)

    async def retired(self, tenant: str) -> list[RetiredUsage]:
        self._drop_expired()
        found = [_to_retired(name, gen, c) for (name, gen), (_, c) in self._retired.items() if name == tenant]
        return sorted(found, key=lambda retired: retired.retired_at)

    async def close(self) -> None:
        return None

    def _add(self, owner: Owner, increments: Counters) -> None:
        self._drop_expired()
        retired = self._retired.get(owner)
        _merge(retired[1] if retired is not None else self._live.setdefault(owner, {}), increments)

    def _drop_expired(self) -> None:
        now = time.monotonic()
        for owner in [owner for owner, (expiry, _) in self._retired.items() if expiry <= now]:
            del self._retired[owner]
