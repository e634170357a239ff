"""Usage in Redis, shared by every replica: :class:`RedisUsageLedger`."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import secrets
import time
from typing import TYPE_CHECKING

from lifecycle import cancel_and_wait, naming
from storage import STORAGE_ERRORS, OutageLatch
from storage.pressure import WriteRefusals, refuses_writes

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from auth.tenants import Tenant
    from storage import RedisClient

from auth.usage.base import (
    _APPLIED_TTL_S,
    _REJECTION,
    _RETRY_S,
    BUCKET_RETENTION_S,
    DEFAULT_RETIRED_RETENTION_S,
    Batch,
    BucketUsage,
    BucketWidth,
    Counters,
    Owner,
    RetiredUsage,
    UsageRecord,
    UsageUnavailableError,
    _bucket_field,
    _bucket_usage,
    _merge,
    _owner,
    _request_increments,
    _to_record,
    _to_retired,
)

__all__ = ["RedisUsageLedger"]

logger = naming.logger("usage")

# Adds a batch of increments to a tenant generation's usage, or to its retired usage once the tenant was deleted (a
# stream in flight at the deletion still counts, apart), and to its time buckets, once: a batch numbered at or below
# the last one applied from the writing process (a try again of a write whose answer was lost) writes nothing, so it
# works on a Redis out of memory too. KEYS: live hash, retired hash, the number of the last batch applied from this
# process, then the batch's bucket hashes. ARGV: the TTL of that number, the batch's number, the number of the
# totals' pairs, then field, delta, field, delta, ..., then for each bucket count: its key's index in KEYS, the Unix
# time its bucket expires, field, delta.
_ADD_LUA = """
local target = KEYS[1]
if redis.call('EXISTS', KEYS[2]) == 1 then target = KEYS[2] end
local batch = tonumber(ARGV[2])
if batch <= tonumber(redis.call('GET', KEYS[3]) or '0') then return 0 end
local totals_end = 3 + 2 * tonumber(ARGV[3])
for i = 4, totals_end, 2 do redis.call('HINCRBYFLOAT', target, ARGV[i], ARGV[i + 1]) end
for i = totals_end + 1, #ARGV, 4 do
  local bucket = KEYS[tonumber(ARGV[i])]
  redis.call('HINCRBYFLOAT', bucket, ARGV[i + 2], ARGV[i + 3])
  redis.call('EXPIREAT', bucket, ARGV[i + 1])
end
redis.call('SET', KEYS[3], batch, 'EX', ARGV[1])
return 1
"""
# Moves a generation's usage apart, with the time of the deletion and a time to live, and indexes it by tenant.
# KEYS: live, retired, the tenant's index of retired generations. ARGV: now, retention in seconds, generation.
_RETIRE_LUA = """
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('RENAME', KEYS[1], KEYS[2]) end
redis.call('HSET', KEYS[2], 'retired_at', ARGV[1])
redis.call('EXPIRE', KEYS[2], ARGV[2])
redis.call('ZADD', KEYS[3], ARGV[1], ARGV[3])
redis.call('EXPIRE', KEYS[3], ARGV[2])
return 1
"""
# The retired usage of one tenant's name, oldest deletion first; generations whose usage expired leave the index.
# KEYS: the index. ARGV: prefix of the retired hashes (with the tenant's tag). Returns {generation, fields, ...}.
_RETIRED_LUA = """
local found = {}
for _, generation in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local fields = redis.call('HGETALL', ARGV[1] .. generation)
  if #fields == 0 then redis.call('ZREM', KEYS[1], generation)
  else found[#found + 1] = generation found[#found + 1] = fields end
end
return found
"""


class RedisUsageLedger:
    """Usage in Redis, one hash per tenant generation: ``{prefix}{<tenant>}:<generation>``, and once the tenant is
    deleted ``{retired_prefix}{<tenant>}:<generation>``; beside them, per writing process,
    ``{applied_prefix}{<tenant>}:<generation>:<process>``: the number of the last batch applied from it, kept a week
    after its last write; and per time bucket ``{bucket_prefix}{<tenant>}:<generation>:<width>:<start>`` (fields
    ``<model> US <key id> US characters|requests``), expiring :data:`BUCKET_RETENTION_S` after the bucket starts (one
    hash tag: the scripts touch them all in one Cluster slot).

    Args:
        client: a Redis or Redis Cluster client (with or without ``decode_responses``); the caller owns and closes it.
        prefix: key prefix of the live hashes.
        retired_prefix: key prefix of the retired hashes.
        applied_prefix: key prefix of the numbers of the last batch applied per process.
        bucket_prefix: key prefix of the time buckets.
        retired_retention_s: how long retired usage is kept.
    """

    def __init__(
        self,
        client: RedisClient,
        prefix: str = "tts:usage:",
        *,
        retired_prefix: str = "tts:usage-retired:",
        applied_prefix: str = "tts:usage-applied:",
        bucket_prefix: str = "tts:usage-buckets:",
        retired_retention_s: int = DEFAULT_RETIRED_RETENTION_S,
    ) -> None:
        self._bucket_prefix = bucket_prefix
        self._client = client
        self._prefix = prefix
        self._retired_prefix = retired_prefix
        self._applied_prefix = applied_prefix
        self._retention_s = retired_retention_s
        self._add = client.register_script(_ADD_LUA)
        self._retire = client.register_script(_RETIRE_LUA)
        self._retired = client.register_script(_RETIRED_LUA)
        self._process_id = secrets.token_hex(8)
        self._batch_numbers = itertools.count(1)
        self._pending: dict[Owner, Counters] = {}
        """Increments recorded since the last write began."""
        self._unanswered: dict[Owner, Batch] = {}
        """Batches whose write failed, perhaps after Redis applied them: tried again under their own numbers, alone
        (what is recorded meanwhile waits in :attr:`_pending`, so an outage grows no list of batches)."""
        self._writer: asyncio.Task[None] | None = None
        self._in_flight: asyncio.Task[bool] | None = None
        self._outage = OutageLatch(
            logger,
            "usage store unreachable, keeping usage in memory until it returns",
            "usage store reachable again; buffered usage written",
        )
        self.write_refusals = WriteRefusals("usage", logger, "usage waits in memory and is written once Redis takes it")
        """Writes refused by a Redis that answers (out of memory, a read-only replica): an episode, not an outage."""

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
        self._record(_owner(tenant), increments)

    async def buckets(self, tenants: Sequence[Tenant], width: BucketWidth, starts: Sequence[int]) -> list[BucketUsage]:
        """Raises: UsageUnavailableError: Redis is unreachable."""
        wanted = [(tenant, start) for tenant in tenants for start in starts]
        await self._flush()
        try:
            async with self._client.pipeline(transaction=False) as pipe:  # one round trip, any number of slots
                for tenant, start in wanted:
                    pipe.hgetall(self._bucket_key(_owner(tenant), width, start))
                rows = await pipe.execute()
        except STORAGE_ERRORS as exc:
            raise UsageUnavailableError("usage store unreachable") from exc
        found: list[BucketUsage] = []
        for (tenant, start), row in zip(wanted, rows, strict=True):
            found += _bucket_usage(tenant.name, start, _decode(row))
        return found

    def record_rejection(self, tenant: Tenant, reason: str) -> None:
        self._record(_owner(tenant), {_REJECTION + reason: 1})

    async def get(self, tenant: Tenant) -> UsageRecord:
        """The tenant's usage, with what is waiting to be written.

        Raises:
            UsageUnavailableError: Redis is unreachable.
        """
        return (await self.many([tenant]))[0]

    async def many(self, tenants: Iterable[Tenant]) -> list[UsageRecord]:
        """Raises: UsageUnavailableError: Redis is unreachable."""
        owners = [_owner(tenant) for tenant in tenants]
        await self._flush()
        try:
            async with self._client.pipeline(transaction=False) as pipe:  # one round trip, any number of slots
                for owner in owners:
                    pipe.hgetall(self._live_key(owner))
                rows = await pipe.execute()
        except STORAGE_ERRORS as exc:
            raise UsageUnavailableError("usage store unreachable") from exc
        records = []
        for owner, row in zip(owners, rows, strict=True):
            counters = _decode(row)
            if (unanswered := self._unanswered.get(owner)) is not None:
                _merge(counters, unanswered[1])
            _merge(counters, self._pending.get(owner, {}))
            records.append(_to_record(counters))
        return records

    async def retire(self, tenant: Tenant) -> None:
        """Raises: UsageUnavailableError: Redis is unreachable (the tenant's usage stays where it was)."""
        owner = _owner(tenant)
        await self._flush()
        keys = [self._live_key(owner), self._retired_key(owner), self._index_key(tenant.name)]
        try:
            await self._retire(keys=keys, args=[repr(time.time()), self._retention_s, tenant.generation])
        except STORAGE_ERRORS as exc:
            raise UsageUnavailableError("usage store unreachable") from exc

    async def retired(self, tenant: str) -> list[RetiredUsage]:
        """Raises: UsageUnavailableError: Redis is unreachable."""
        try:
            flat = await self._retired(keys=[self._index_key(tenant)], args=[self._retired_key((tenant, ""))])
        except STORAGE_ERRORS as exc:
            raise UsageUnavailableError("usage store unreachable") from exc
        found = [
            _to_retired(tenant, _text(gen), _decode_flat(row)) for gen, row in zip(flat[::2], flat[1::2], strict=True)
        ]
        return sorted(found, key=lambda retired: retired.retired_at)

    async def close(self) -> None:
        if self._writer is not None:
            await cancel_and_wait(self._writer)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(1.0):
                await self._flush()

    def _record(self, owner: Owner, increments: Counters) -> None:
        _merge(self._pending.setdefault(owner, {}), increments)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write_while_pending(), name="usage-writer")

    async def _write_while_pending(self) -> None:
        """Write what gathered; while Redis is unreachable, try again every second."""
        while self._pending or self._unanswered:
            if not await self._flush():
                await asyncio.sleep(_RETRY_S)

    async def _flush(self) -> bool:
        """Write every increment waiting when called (after the write already under way, if any): the batches to try
        again, then what they held back. Whether it was all written: another replica then reads it in Redis."""
        for _ in range(2):  # the second round only for what a batch tried again held back
            # One write at a time, the batches in their order: a later batch applied before an earlier one would have
            # the earlier one skipped. A write may begin while this call waits for another (a second waiter woke first).
            while self._in_flight is not None and not self._in_flight.done():
                await asyncio.wait([self._in_flight])  # what it could not write is waiting again when it ends
            if not self._pending and not self._unanswered:
                return True
            # Taken before the first await, so a concurrent call neither writes these twice nor loses its own.
            batches = self._take_batches()
            # A task of its own, shielded: a caller cancelled mid-write must not abandon a write that may already have
            # reached Redis (it is tried again under its number, which would then be skipped: nothing counts twice).
            self._in_flight = asyncio.get_running_loop().create_task(self._write_or_keep(batches))
            if not await asyncio.shield(self._in_flight):
                return False
        return True  # what was recorded during these two rounds is the next call's

    def _take_batches(self) -> dict[Owner, Batch]:
        """One batch per tenant generation: the one tried before, under its number, else what was recorded since, as
        a new batch (a generation with a batch to try again keeps its new increments waiting until that is answered)."""
        batches, self._unanswered = self._unanswered, {}
        pending = self._pending
        self._pending = {owner: counters for owner, counters in pending.items() if owner in batches}
        for owner, counters in pending.items():
            if owner not in batches:
                batches[owner] = (next(self._batch_numbers), counters)
        return batches

    async def _write_or_keep(self, batches: Mapping[Owner, Batch]) -> bool:
        try:
            await self._write(batches)
        except STORAGE_ERRORS as exc:  # the generations that were not written are waiting again
            if refuses_writes(exc):
                self.write_refusals.refused(exc)
            else:
                self._outage.failed(exc)
            return False
        self._outage.worked()
        self.write_refusals.worked()
        return True

    async def _write(self, batches: Mapping[Owner, Batch]) -> None:
        """One script per tenant generation, all in flight at once (one round trip of latency); the generations whose
        write failed keep their batch for the next try, the others are not written twice."""
        owners = list(batches)
        results = await asyncio.gather(
            *(self._write_one(owner, batches[owner]) for owner in owners), return_exceptions=True
        )
        failed = [owner for owner, result in zip(owners, results, strict=True) if isinstance(result, BaseException)]
        for owner in failed:
            self._unanswered[owner] = batches[owner]
        if failed:
            raise next(result for result in results if isinstance(result, BaseException))

    async def _write_one(self, owner: Owner, batch: Batch) -> None:
        number, counters = batch
        keys = [self._live_key(owner), self._retired_key(owner), self._applied_key(owner)]
        totals: list[str] = []
        buckets: list[int | str] = []
        for name, delta in counters.items():
            if not delta:
                continue
            if (field_of := _bucket_field(name)) is None:
                totals += [name, repr(float(delta))]
                continue
            width, start, rest = field_of
            bucket_key = self._bucket_key(owner, width, start)
            if bucket_key not in keys:
                keys.append(bucket_key)
            expires = start + BUCKET_RETENTION_S[width]
            buckets += [keys.index(bucket_key) + 1, expires, rest, repr(float(delta))]
        await self._add(keys=keys, args=[_APPLIED_TTL_S, number, len(totals) // 2, *totals, *buckets])

    def _bucket_key(self, owner: Owner, width: BucketWidth, start: int) -> str:
        return f"{self._bucket_prefix}{{{owner[0]}}}:{owner[1]}:{width}:{start}"

    def _live_key(self, owner: Owner) -> str:
        return f"{self._prefix}{{{owner[0]}}}:{owner[1]}"

    def _retired_key(self, owner: Owner) -> str:
        return f"{self._retired_prefix}{{{owner[0]}}}:{owner[1]}"

    def _applied_key(self, owner: Owner) -> str:
        return f"{self._applied_prefix}{{{owner[0]}}}:{owner[1]}:{self._process_id}"

    def _index_key(self, tenant: str) -> str:
        return f"{self._retired_prefix}{{{tenant}}}"


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _decode(fields: Mapping[bytes | str, bytes | str]) -> Counters:
    return {_text(name): float(_text(value)) for name, value in fields.items()}


def _decode_flat(flat: list[bytes | str]) -> Counters:
    return {_text(name): float(_text(value)) for name, value in zip(flat[::2], flat[1::2], strict=True)}
