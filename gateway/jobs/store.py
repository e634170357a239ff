"""Where speech jobs live: their records, segments and committed audio, in this process's memory or in Redis.

The one rule that keeps a job whole across replicas is in :meth:`JobStore.commit`: a segment's audio is taken only
when it is the next one the job is missing and the job still runs, in one atomic step. A replica that resumes a job
starts from ``segments_done``; a replica that was thought dead and wakes up finds its segment taken or the job over,
and stops. No segment is missing (each is committed before the next starts) or doubled (a second commit of the same
index is refused).

Expiry: a job's audio lives ``ttl_s`` after the job ended; its record says ``expired`` for as long again, then it is
gone. In Redis every key expires by itself (no sweeper needed); a running job's keys are renewed at each commit.
In Redis a tenant's jobs share one hash slot (``{tenant}`` in every key): on a Redis Cluster each script keeps to one
slot, and a tenant's stored audio sits on one node (bounded by its quota).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import shutil
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol, cast

from gateway.jobs.records import ACTIVE, JobRecord, JobStatus, now_s
from lifecycle import naming
from storage import STORAGE_ERRORS, Page

if TYPE_CHECKING:
    from pathlib import Path

    from storage import RedisClient

__all__ = ["AudioFiles", "JobStore", "MemoryJobStore", "RedisJobStore", "Refusal", "SpokenSegment"]


@dataclass(frozen=True, slots=True)
class SpokenSegment:
    """One segment's stored audio, and what it adds to the job's progress."""

    audio: bytes
    characters: int
    audio_ms: int
    charged: int = 0
    """What the segment was charged (what it made the engine say); the job's usage is their sum."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a new job was not stored: the tenant holds ``max_jobs`` jobs, or its stored audio reached its quota."""

    reason: str
    """``too_many_jobs`` or ``storage_quota``."""
    held: int


class JobStore(Protocol):
    """The jobs of every tenant; each method is scoped to one tenant (another tenant's job is "not there")."""

    ttl_s: int

    async def create(
        self, record: JobRecord, segments: list[str], *, quota_bytes: int, max_jobs: int
    ) -> Refusal | None:
        """Store a new job, unless the tenant holds ``max_jobs`` jobs or the job's reservation
        (``record.reserved_bytes``) does not fit in ``quota_bytes`` beside what the tenant's jobs hold
        (:meth:`JobRecord.held_bytes`). The check and the write are one atomic step: of creations at the same
        instant, never more are stored than fit. What a job holds is read from its record, so it is given back
        when the job is cancelled, fails, is deleted or its audio expires, with nothing to release by hand."""
        ...

    async def get(self, tenant: str, job_id: str) -> JobRecord | None: ...

    async def page(self, tenant: str, *, after: str | None, limit: int) -> Page[JobRecord]:
        """Up to ``limit`` of the tenant's jobs whose id sorts after ``after``, oldest first."""
        ...

    async def segments(self, tenant: str, job_id: str) -> list[str]:
        """The texts of the job's segments, in order (empty once it ended)."""
        ...

    async def start(self, tenant: str, job_id: str) -> JobRecord | None:
        """Mark a queued (or resumed) job running; ``None`` when it is gone or over."""
        ...

    async def commit(self, tenant: str, job_id: str, index: int, spoken: SpokenSegment) -> bool:
        """Add segment ``index``'s audio, if the job runs and ``index`` is its next segment; ``False`` otherwise."""
        ...

    async def sizes(self, tenant: str, job_id: str) -> list[int]:
        """The stored bytes of each committed segment, in order."""
        ...

    async def chunk(self, tenant: str, job_id: str, index: int) -> bytes | None:
        """Segment ``index``'s audio; ``None`` when it is not (or no longer) there."""
        ...

    async def finish(self, tenant: str, job_id: str, status: JobStatus, error: str | None = None) -> JobRecord | None:
        """End an active job as ``status`` (completed, failed, cancelled) and return it as it ended, read in the same
        step (a concurrent delete cannot take what it spoke from whoever counts it); ``None`` when it was not active.
        A job that did not complete gives its stored audio up."""
        ...

    async def delete(self, tenant: str, job_id: str) -> bool:
        """Forget the job and its audio; ``False`` when there was none."""
        ...


def _ended(record: JobRecord, status: JobStatus, error: str | None, ttl_s: int) -> JobRecord:
    now = now_s()
    kept = status == "completed"
    return replace(
        record,
        status=status,
        error=error,
        completed_at=int(now),
        expires_at=int(now) + ttl_s,
        stored_bytes=record.stored_bytes if kept else 0,
        characters_done=record.characters_total if kept else record.characters_done,
    )


class MemoryJobStore:
    """The jobs of one process (without ``redis_url``): lost when it stops; expired ones are dropped as they are met."""

    def __init__(self, ttl_s: int) -> None:
        self.ttl_s = ttl_s
        self._records: dict[str, dict[str, JobRecord]] = {}
        self._segments: dict[tuple[str, str], list[str]] = {}
        self._audio: dict[tuple[str, str], list[bytes]] = {}

    async def create(
        self, record: JobRecord, segments: list[str], *, quota_bytes: int, max_jobs: int
    ) -> Refusal | None:
        # No await from the check to the write: no other creation runs in between (one event loop, no lock needed).
        jobs = self._live(record.tenant)
        if len(jobs) >= max_jobs:
            return Refusal("too_many_jobs", len(jobs))
        now = now_s()
        held = sum(job.held_bytes(now) for job in jobs.values())
        if held + record.reserved_bytes > quota_bytes:
            return Refusal("storage_quota", held)
        jobs[record.id] = record
        self._segments[record.tenant, record.id] = segments
        self._audio[record.tenant, record.id] = []
        return None

    async def get(self, tenant: str, job_id: str) -> JobRecord | None:
        return self._live(tenant).get(job_id)

    async def page(self, tenant: str, *, after: str | None, limit: int) -> Page[JobRecord]:
        jobs = sorted((job for job in self._live(tenant).values() if after is None or job.id > after), key=_by_id)
        return Page.of(jobs[: limit + 1], limit)

    async def segments(self, tenant: str, job_id: str) -> list[str]:
        return self._segments.get((tenant, job_id), [])

    async def start(self, tenant: str, job_id: str) -> JobRecord | None:
        record = await self.get(tenant, job_id)
        if record is None or record.status not in ACTIVE:
            return None
        record = self._records[tenant][job_id] = replace(record, status="running")
        return record

    async def commit(self, tenant: str, job_id: str, index: int, spoken: SpokenSegment) -> bool:
        record = await self.get(tenant, job_id)
        if record is None or record.status != "running" or record.segments_done != index:
            return False
        self._audio[tenant, job_id].append(spoken.audio)
        self._records[tenant][job_id] = replace(
            record,
            segments_done=index + 1,
            characters_done=record.characters_done + spoken.characters,
            characters_charged=record.characters_charged + spoken.charged,
            audio_ms=record.audio_ms + spoken.audio_ms,
            stored_bytes=record.stored_bytes + len(spoken.audio),
        )
        return True

    async def sizes(self, tenant: str, job_id: str) -> list[int]:
        return [len(audio) for audio in self._audio.get((tenant, job_id), [])]

    async def chunk(self, tenant: str, job_id: str, index: int) -> bytes | None:
        audio = self._audio.get((tenant, job_id), [])
        return audio[index] if index < len(audio) else None

    async def finish(self, tenant: str, job_id: str, status: JobStatus, error: str | None = None) -> JobRecord | None:
        record = await self.get(tenant, job_id)
        if record is None or record.status not in ACTIVE:
            return None
        ended = self._records[tenant][job_id] = _ended(record, status, error, self.ttl_s)
        self._segments.pop((tenant, job_id), None)
        if status != "completed":
            self._audio.pop((tenant, job_id), None)
        return ended

    async def delete(self, tenant: str, job_id: str) -> bool:
        self._segments.pop((tenant, job_id), None)
        self._audio.pop((tenant, job_id), None)
        return self._records.get(tenant, {}).pop(job_id, None) is not None

    def _live(self, tenant: str) -> dict[str, JobRecord]:
        """The tenant's jobs, those past both their TTLs dropped (their audio at the first TTL)."""
        jobs = self._records.setdefault(tenant, {})
        now = now_s()
        for job in list(jobs.values()):
            if job.expires_at is None:
                continue
            if now >= job.expires_at + self.ttl_s:
                del jobs[job.id]
            if now >= job.expires_at:
                self._audio.pop((tenant, job.id), None)
        return jobs


def _by_id(record: JobRecord) -> str:
    return record.id


# Stores a new job unless its tenant holds ARGV[3] jobs or the job's reservation does not fit in the quota beside what
# the tenant's jobs hold (as ``JobRecord.held_bytes`` counts it), in one step: concurrent creations cannot all pass.
# Ids whose records expired leave the index. KEYS: the tenant's index, the job's record, its segments' texts (all in
# the tenant's slot; the other jobs' records, read by name, are in it too). ARGV: the prefix of the tenant's records'
# keys, now, max jobs, quota, the job's id, its reservation, its record's fields (JSON), its segments (JSON), the TTL of
# its keys while it runs, the index's TTL. Returns {0, held}, {1, jobs held} or {2, bytes held}.
_CREATE_LUA = """
local now, held, jobs = tonumber(ARGV[2]), 0, 0
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local f = redis.call('HMGET', ARGV[1] .. id, 'status', 'bytes', 'reserved', 'expires_at')
  if not f[1] then
    redis.call('ZREM', KEYS[1], id)
  else
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
)


class AudioFiles:
    """Segments' audio as files under a directory every replica mounts (``jobs.directory``: a ReadWriteMany volume),
    one per segment at ``<root>/<tenant>/<job id>/<index>.<name>``, written whole (a temporary name, then renamed)
    before its commit, which records the name: a runner whose commit is refused (the segment was taken) removes its
    own file and never replaces the one committed. Files do not expire by themselves: :meth:`sweep` removes those of
    jobs whose audio expired or is gone."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, tenant: str, job_id: str, index: int | None = None, name: str = "") -> Path:
        if not (_SAFE_NAME.match(tenant) and _SAFE_NAME.match(job_id) and (not name or _SAFE_NAME.match(name))):
            raise ValueError("a tenant, job id or file name that is no plain file name")
        folder = self.root / tenant / job_id
        return folder if index is None else folder / f"{index:06d}.{name}"

    async def put(self, tenant: str, job_id: str, index: int, audio: bytes) -> str:
        """Write the segment's audio under a new name, and return the name."""
        name = secrets.token_hex(8)
        await asyncio.to_thread(_write_whole, self._path(tenant, job_id, index, name), audio)
        return name

    async def discard(self, tenant: str, job_id: str, index: int, name: str) -> None:
        await asyncio.to_thread(self._path(tenant, job_id, index, name).unlink, True)

    async def get(self, tenant: str, job_id: str, index: int, name: str) -> bytes | None:
        return await asyncio.to_thread(_read_or_none, self._path(tenant, job_id, index, name))

    async def drop(self, tenant: str, job_id: str) -> None:
        await asyncio.to_thread(shutil.rmtree, self._path(tenant, job_id), True)

    async def sweep(self, store: JobStore) -> int:
        """Remove the files of every job whose record is gone or whose audio expired; returns how many jobs."""
        removed = 0
        for tenant, job_id in await asyncio.to_thread(self._jobs):
            record = await store.get(tenant, job_id)
            if record is None or (record.expires_at is not None and now_s() >= record.expires_at):
                await self.drop(tenant, job_id)
                removed += 1
        return removed

    async def sweep_forever(self, store: JobStore, every_s: float) -> None:
        """:meth:`sweep` every ``every_s`` (on every replica: each removal is idempotent), until cancelled."""
        while True:
            await asyncio.sleep(every_s)
            try:
                await self.sweep(store)
            except STORAGE_ERRORS as exc:  # Redis or the volume (an OSError) out of reach: the next round tries again
                logger.warning("could not sweep the jobs' audio files: %r", exc)

    def _jobs(self) -> list[tuple[str, str]]:
        if not self.root.is_dir():
            return []
        return [(t.name, j.name) for t in self.root.iterdir() if t.is_dir() for j in t.iterdir() if j.is_dir()]


logger = naming.logger("jobs")
_SAFE_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")


def _write_whole(path: Path, audio: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_bytes(audio)
    temporary.replace(path)  # a reader sees the whole file or none


def _read_or_none(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


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
        job, texts, sizes = self._job_keys(tenant, job_id)
        done = int(await self._client.hget(job, "done") or 0)
        async with self._client.pipeline(transaction=False) as pipe:
            pipe.delete(job)
            pipe.delete(texts, sizes, *(self._audio_key(tenant, job_id, i) for i in range(done + 1)))
            pipe.zrem(self._key(tenant, "index"), job_id)
            deleted, *_ = await pipe.execute()
        if self.files is not None:
            await self.files.drop(tenant, job_id)
        return bool(deleted)


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
    }


def _record(values: list[bytes | None]) -> JobRecord | None:
    meta, status, done, chars, audio_ms, stored, completed_at, expires_at, error, reserved, charged = values
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
    )


def _texts(raw: Any) -> list[str]:
    """Members as read (bytes: the client does not decode, ``storage/redis.py``)."""
    return [member.decode() for member in raw]


def _int_or_none(value: bytes | None) -> int | None:
    return int(value) if value else None
