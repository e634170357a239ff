"""Jobs in Redis, shared by every replica: :class:`RedisJobStore`."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, cast

from gateway.jobs.records import JobRecord, JobStatus, now_s
from storage import Page

if TYPE_CHECKING:
    from collections.abc import Sequence

    from gateway.jobs.store.files import AudioFiles
    from storage import RedisClient

from gateway.jobs.store.base import (
    Refusal,
    SpokenSegment,
)

__all__ = ["RedisJobStore"]


# Stores a new job unless its tenant holds ARGV[3] jobs or the job's reservation does not fit in the quota beside what
# the tenant's jobs hold (as ``JobRecord.held_bytes`` counts it), in one step: concurrent creations cannot all pass.
# Ids whose records expired leave the index; the jobs of another generation of the tenant (``JobRecord.belongs_to``)
# are not its own and count for nothing. KEYS: the tenant's index, the job's record, its segments' texts (all in the
# tenant's slot; the other jobs' records, read by name, are in it too). ARGV: the prefix of the tenant's records' keys,
# now, max jobs, quota, the job's id, its reservation, its record's fields (JSON), its segments (JSON), the TTL of its
# keys while it runs, the index's TTL, the tenant's generation. Returns {0, held}, {1, jobs held} or {2, bytes held}.
_CREATE_LUA = """
local now, held, jobs = tonumber(ARGV[2]), 0, 0
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local f = redis.call('HMGET', ARGV[1] .. id, 'status', 'bytes', 'reserved', 'expires_at', 'generation')
  if not f[1] then
    redis.call('ZREM', KEYS[1], id)
  elseif not f[5] or f[5] == '' or f[5] == ARGV[11] then
    jobs = jobs + 1
    local stored = tonumber(f[2]) or 0
    if f[1] == 'queued' or f[1] == 'running' then
      held = held + math.max(stored, tonumber(f[3]) or 0)
    elseif f[1] == 'completed' and (tonumber(f[4]) or 0) > now then
      held = held + stored
    end
  end
end
if jobs >= tonumber(ARGV[3]) then return {1, jobs} end
if held + tonumber(ARGV[6]) > tonumber(ARGV[4]) then return {2, held} end
for field, value in pairs(cjson.decode(ARGV[7])) do redis.call('HSET', KEYS[2], field, value) end
redis.call('EXPIRE', KEYS[2], ARGV[9])
redis.call('SET', KEYS[3], ARGV[8], 'EX', ARGV[9])
redis.call('ZADD', KEYS[1], 0, ARGV[5])
redis.call('EXPIRE', KEYS[1], ARGV[10])
return {0, held}
"""
# Takes segment ARGV[1]'s audio if the job runs and misses exactly that segment. KEYS: record, the segment's audio,
# sizes, segments. ARGV: index, audio, characters, audio ms, TTL of the job's keys while it runs, the audio's size
# (with its file's name after a colon when it is in a file), whether the audio is kept here (1) or in a file written
# before (0), the characters the segment was charged. Returns 1 or 0.
_COMMIT_LUA = """
if redis.call('HGET', KEYS[1], 'status') ~= 'running' then return 0 end
if tonumber(redis.call('HGET', KEYS[1], 'done')) ~= tonumber(ARGV[1]) then return 0 end
if ARGV[7] == '1' then redis.call('SET', KEYS[2], ARGV[2], 'EX', ARGV[5]) end
redis.call('RPUSH', KEYS[3], ARGV[6])
redis.call('HINCRBY', KEYS[1], 'done', 1)
redis.call('HINCRBY', KEYS[1], 'chars', ARGV[3])
redis.call('HINCRBY', KEYS[1], 'charged', ARGV[8])
redis.call('HINCRBY', KEYS[1], 'audio_ms', ARGV[4])
redis.call('HINCRBY', KEYS[1], 'bytes', tonumber((string.gsub(ARGV[6], ':.*', ''))))
for i = 1, 4 do if i ~= 2 then redis.call('EXPIRE', KEYS[i], ARGV[5]) end end
return 1
"""
# Marks an active job ARGV[1] (running), or ends it. KEYS: record, segments, sizes. ARGV: status, error, ended at,
# expires at, TTL of the record, TTL of the sizes, then the record's fields to read back. Returns 1 (started) or the
# ended record's fields (read in the same step: a delete right after cannot take them from whoever counts the job's
# usage), or 0 when the job is gone or over. A completed job has spoken all of its characters (its segments' lengths
# leave out the whitespace between them).
_MOVE_LUA = """
local status = redis.call('HGET', KEYS[1], 'status')
if status ~= 'queued' and status ~= 'running' then return 0 end
redis.call('HSET', KEYS[1], 'status', ARGV[1])
if ARGV[1] == 'running' then return 1 end
redis.call('HSET', KEYS[1], 'error', ARGV[2], 'completed_at', ARGV[3], 'expires_at', ARGV[4])
if ARGV[1] == 'completed' then
  redis.call('HSET', KEYS[1], 'chars', cjson.decode(redis.call('HGET', KEYS[1], 'meta'))['characters_total'])
else
  redis.call('HSET', KEYS[1], 'bytes', 0)
end
redis.call('DEL', KEYS[2])
redis.call('EXPIRE', KEYS[1], ARGV[5])
redis.call('EXPIRE', KEYS[3], ARGV[6])
return redis.call('HMGET', KEYS[1], unpack(ARGV, 7))
"""
_FIELDS = (
    "meta",
    "status",
    "done",
    "chars",
    "audio_ms",
    "bytes",
    "completed_at",
    "expires_at",
    "error",
    "reserved",
    "charged",
    "generation",
)


class RedisJobStore:
    """Jobs shared by every replica. Per tenant (one hash slot): an index of job ids (a sorted set, by id), and per
    job a hash (its record), its segments' texts (JSON, until it ends), the sizes of its committed segments (a list)
    and one string per segment's audio (or, with ``files``, one file per segment: :class:`AudioFiles`)."""

    def __init__(
        self, client: RedisClient, ttl_s: int, prefix: str = "tts:jobs:", *, files: AudioFiles | None = None
    ) -> None:
        self._client = client
        self.ttl_s = ttl_s
        self._prefix = prefix
        self.files = files
        self._create = client.register_script(_CREATE_LUA)
        self._commit = client.register_script(_COMMIT_LUA)
        self._move = client.register_script(_MOVE_LUA)

    def _key(self, tenant: str, *parts: str) -> str:
        return ":".join((f"{self._prefix}{{{tenant}}}", *parts))

    def _job_keys(self, tenant: str, job_id: str) -> tuple[str, str, str]:
        """The record, the segments' texts and the sizes of one job."""
        return self._key(tenant, "job", job_id), self._key(tenant, "texts", job_id), self._key(tenant, "sizes", job_id)

    def _audio_key(self, tenant: str, job_id: str, index: int) -> str:
        return self._key(tenant, "audio", job_id, str(index))

    async def create(
        self, record: JobRecord, segments: list[str], *, quota_bytes: int, max_jobs: int
    ) -> Refusal | None:
        job, texts, _ = self._job_keys(record.tenant, record.id)
        args: list[str | int | float] = [
            self._key(record.tenant, "job", ""),
            now_s(),
            max_jobs,
            quota_bytes,
            record.id,
            record.reserved_bytes,
            json.dumps({field: str(value) for field, value in _fields(record).items()}),
            json.dumps(segments),
            2 * self.ttl_s,
            3 * self.ttl_s,  # the index's, renewed by every new job; pruned as it is read
            record.generation,
        ]
        outcome, held = await self._create(keys=[self._key(record.tenant, "index"), job, texts], args=args)
        if outcome == 0:
            return None
        return Refusal("too_many_jobs" if outcome == 1 else "storage_quota", int(held))

    async def get(self, tenant: str, job_id: str) -> JobRecord | None:
        values = await self._client.hmget(self._key(tenant, "job", job_id), list(_FIELDS))
        return _record(cast("list[bytes | None]", values))

    async def page(self, tenant: str, *, after: str | None, limit: int) -> Page[JobRecord]:
        index = self._key(tenant, "index")
        records: list[JobRecord] = []
        lower = f"({after}" if after else "-"
        while len(records) <= limit:  # records that expired meanwhile are skipped (and leave the index)
            ids = _texts(await self._client.zrange(index, lower, "+", bylex=True, offset=0, num=limit + 1))
            if not ids:
                break
            async with self._client.pipeline(transaction=False) as pipe:
                for job_id in ids:
                    pipe.hmget(self._key(tenant, "job", job_id), list(_FIELDS))
                found = [_record(values) for values in await pipe.execute()]
            if gone := [job_id for job_id, record in zip(ids, found, strict=True) if record is None]:
                await self._client.zrem(index, *gone)
            records.extend(record for record in found if record is not None)
            lower = f"({ids[-1]}"
        return Page.of(records[: limit + 1], limit)

    async def segments(self, tenant: str, job_id: str) -> list[str]:
        raw = await self._client.get(self._key(tenant, "texts", job_id))
        return list(json.loads(raw)) if raw is not None else []

    async def start(self, tenant: str, job_id: str) -> JobRecord | None:
        keys = self._job_keys(tenant, job_id)
        if not await self._move(keys=list(keys), args=["running", "", 0, 0, 0, 0]):
            return None
        return await self.get(tenant, job_id)

    async def commit(self, tenant: str, job_id: str, index: int, spoken: SpokenSegment) -> bool:
        job, texts, sizes = self._job_keys(tenant, job_id)
        keys = [job, self._audio_key(tenant, job_id, index), sizes, texts]
        audio, size = spoken.audio, str(len(spoken.audio))
        name = None
        if self.files is not None:  # written first: a commit names only audio that is there
            name = await self.files.put(tenant, job_id, index, audio)
            audio, size = b"", f"{size}:{name}"
        in_redis = int(self.files is None)
        args: list[bytes | int | str] = [
            index,
            audio,
            spoken.characters,
            spoken.audio_ms,
            2 * self.ttl_s,
            size,
            in_redis,
            spoken.charged,
        ]
        committed = bool(await self._commit(keys=keys, args=args))
        if not committed and self.files is not None and name is not None:
            await self.files.discard(tenant, job_id, index, name)
        return committed

    async def sizes(self, tenant: str, job_id: str) -> list[int]:
        entries = _texts(await self._client.lrange(self._key(tenant, "sizes", job_id), 0, -1))
        return [int(entry.partition(":")[0]) for entry in entries]

    async def chunk(self, tenant: str, job_id: str, index: int) -> bytes | None:
        if self.files is None:
            return cast("bytes | None", await self._client.get(self._audio_key(tenant, job_id, index)))
        expires_at = await self._client.hget(self._key(tenant, "job", job_id), "expires_at")
        if expires_at and now_s() >= int(expires_at):
            return None  # expired: the files wait for the sweep
        entry = cast("bytes | None", await self._client.lindex(self._key(tenant, "sizes", job_id), index))
        if entry is None:
            return None
        return await self.files.get(tenant, job_id, index, entry.decode().partition(":")[2])

    async def finish(self, tenant: str, job_id: str, status: JobStatus, error: str | None = None) -> JobRecord | None:
        now = int(now_s())
        keys = list(self._job_keys(tenant, job_id))
        args: list[str | int] = [status, error or "", now, now + self.ttl_s, 2 * self.ttl_s, self.ttl_s, *_FIELDS]
        ended = await self._move(keys=keys, args=args)
        record = _record(cast("list[bytes | None]", ended)) if ended else None
        if record is None:
            return None
        if self.files is not None and status != "completed":
            await self.files.drop(tenant, job_id)
        async with self._client.pipeline(transaction=False) as pipe:
            for index in range(record.segments_done):
                audio = self._audio_key(tenant, job_id, index)
                pipe.expire(audio, self.ttl_s) if status == "completed" else pipe.delete(audio)
            await pipe.execute()
        return record

    async def delete(self, tenant: str, job_id: str) -> bool:
        return await self.delete_many(tenant, [job_id]) == 1

    async def delete_many(self, tenant: str, job_ids: Sequence[str]) -> int:
        if not job_ids:
            return 0
        async with self._client.pipeline(transaction=False) as pipe:
            for job_id in job_ids:
                pipe.hget(self._key(tenant, "job", job_id), "done")
            done = await pipe.execute()
        async with self._client.pipeline(transaction=False) as pipe:
            for job_id in job_ids:  # first: their answers count the jobs there were
                pipe.delete(self._key(tenant, "job", job_id))
            for job_id, segments in zip(job_ids, done, strict=True):
                _, texts, sizes = self._job_keys(tenant, job_id)
                # One segment more than read: one committed meanwhile.
                audio = (self._audio_key(tenant, job_id, i) for i in range(int(segments or 0) + 1))
                pipe.delete(texts, sizes, *audio)
            pipe.zrem(self._key(tenant, "index"), *job_ids)
            deleted = (await pipe.execute())[: len(job_ids)]
        if self.files is not None:
            for job_id in job_ids:
                await self.files.drop(tenant, job_id)
        return sum(deleted)


def _fields(record: JobRecord) -> dict[str, str | int]:
    meta = {
        key: value
        for key, value in asdict(record).items()
        if key in {"id", "tenant", "request", "characters_total", "segments_total", "created_at", "metadata"}
    }
    return {
        "meta": json.dumps(meta),
        "status": record.status,
        "done": 0,
        "chars": 0,
        "charged": 0,
        "audio_ms": 0,
        "bytes": 0,
        "reserved": record.reserved_bytes,
        "generation": record.generation,
    }


def _record(values: list[bytes | None]) -> JobRecord | None:
    meta, status, done, chars, audio_ms, stored, completed_at, expires_at, error, reserved, charged, generation = values
    if meta is None or status is None:
        return None
    return JobRecord(
        **json.loads(meta),
        status=status.decode(),  # type: ignore[arg-type]  # written by this module only
        segments_done=int(done or 0),
        characters_done=int(chars or 0),
        characters_charged=int(charged or 0),  # a job's record from before this field: 0, its characters count
        audio_ms=int(audio_ms or 0),
        stored_bytes=int(stored or 0),
        completed_at=_int_or_none(completed_at),
        expires_at=_int_or_none(expires_at),
        error=error.decode() if error else None,
        reserved_bytes=int(reserved or 0),
        generation=generation.decode() if generation else "",  # a job's record from before this field: anyone's
    )


def _texts(raw: Any) -> list[str]:
    """Members as read (bytes: the client does not decode, ``storage/redis.py``)."""
    return [member.decode() for member in raw]


def _int_or_none(value: bytes | None) -> int | None:
    return int(value) if value else None
