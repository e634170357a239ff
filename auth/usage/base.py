"""The usage ledger's contract (:class:`UsageLedger`), its records, and the counting rules both ledgers share."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from auth.tenants import Tenant

__all__ = [
    "BUCKET_RETENTION_S",
    "BUCKET_WIDTHS",
    "DEFAULT_RETIRED_RETENTION_S",
    "BucketUsage",
    "BucketWidth",
    "RetiredUsage",
    "UsageLedger",
    "UsageRecord",
    "UsageUnavailableError",
]


DEFAULT_RETIRED_RETENTION_S = 90 * 24 * 3600
"""How long a deleted tenant's usage stays listed for the operator."""

_REJECTION = "rejections:"  # field prefix: one counter per rejection reason
_RETIRED_AT = "retired_at"  # field of a retired record: when its tenant was deleted
_FLOAT_FIELDS = frozenset({"audio_seconds", _RETIRED_AT})
_RETRY_S = 1.0  # between tries to write waiting increments while Redis is unreachable
_APPLIED_TTL_S = 7 * 24 * 3600  # how long Redis remembers the last batch it applied from a process

BucketWidth = Literal["1m", "1h", "1d"]
BUCKET_WIDTHS: dict[BucketWidth, int] = {"1m": 60, "1h": 3600, "1d": 86400}
"""Each bucket width in seconds; buckets start at multiples of their width since the Unix epoch (a day at 00:00 UTC)."""
BUCKET_RETENTION_S: dict[BucketWidth, int] = {"1m": 2 * 86400, "1h": 35 * 86400, "1d": 400 * 86400}
"""How long a bucket of each width is kept after it starts: minutes two days, hours 35 days, days 400 days."""

_BUCKET = "bucket\x1f"  # field prefix of a bucket's count: bucket<US>width<US>start<US>model<US>key id<US>counter
_SEP = "\x1f"

Counters = dict[str, float]
"""Field name -> value; rejections are ``rejections:<reason>`` fields."""

Owner = tuple[str, str]
"""Whose usage: a tenant's name and generation."""

Batch = tuple[int, Counters]
"""Increments written together, with their number in the writing process's sequence."""


@dataclass(frozen=True, slots=True)
class UsageRecord:
    """What one tenant (one generation of it) has used since its usage was first recorded."""

    requests: int = 0
    input_characters: int = 0
    audio_seconds: float = 0.0
    cache_hits: int = 0
    rejections: dict[str, int] = field(default_factory=dict)
    """Refused requests by reason (``requests``, ``characters``, ``concurrency``, ...)."""


@dataclass(frozen=True, slots=True)
class BucketUsage:
    """What one tenant spoke in one time bucket with one model and one API key."""

    tenant: str
    start: int
    """Unix time the bucket starts."""
    model: str | None
    api_key_id: str | None
    """The key's id; ``None`` for a JSON Web Token or an open gateway's caller."""
    characters: int
    requests: int


@dataclass(frozen=True, slots=True)
class RetiredUsage:
    """The usage of a deleted tenant, kept apart for the operator."""

    tenant: str
    generation: str
    retired_at: float
    """Unix time of the deletion."""
    usage: UsageRecord


class UsageUnavailableError(Exception):
    """The usage store cannot be read now (Redis unreachable); recording still works."""


class UsageLedger(Protocol):
    """Where usage is counted; every replica of a deployment should share one."""

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
        """Count one served request (written in the background), in the tenant's totals and in this minute's, hour's
        and day's buckets under ``model`` and ``api_key_id``."""
        ...

    def record_rejection(self, tenant: Tenant, reason: str) -> None:
        """Count one refused request (written in the background)."""
        ...

    async def get(self, tenant: Tenant) -> UsageRecord:
        """The tenant's usage (all zero for a tenant never seen)."""
        ...

    async def many(self, tenants: Iterable[Tenant]) -> list[UsageRecord]:
        """The usage of each of ``tenants``, in their order, read together."""
        ...

    async def buckets(self, tenants: Sequence[Tenant], width: BucketWidth, starts: Sequence[int]) -> list[BucketUsage]:
        """What ``tenants`` spoke in the buckets of ``width`` starting at ``starts``, read together: one entry per
        tenant, bucket, model and key with usage (none for a bucket no longer kept)."""
        ...

    async def retire(self, tenant: Tenant) -> None:
        """The tenant was deleted: keep its usage apart (what its streams in flight add goes there too)."""
        ...

    async def retired(self, tenant: str) -> list[RetiredUsage]:
        """The retired usage of every deleted tenant of this name still kept, oldest deletion first."""
        ...

    async def close(self) -> None:
        """Write what is waiting (briefly, if Redis answers) and stop."""
        ...


def _owner(tenant: Tenant) -> Owner:
    return tenant.name, tenant.generation


def _request_increments(  # noqa: PLR0917 - a request's counts
    characters: int, audio_seconds: float, cache_hit: bool, model: str | None, api_key_id: str | None, now: float
) -> Counters:
    increments = {
        "requests": 1,
        "input_characters": characters,
        "audio_seconds": audio_seconds,
        "cache_hits": 1 if cache_hit else 0,
    }
    for width, seconds in BUCKET_WIDTHS.items():
        group = _SEP.join(
            (_BUCKET.removesuffix(_SEP), width, str(int(now // seconds * seconds)), model or "", api_key_id or "")
        )
        increments[f"{group}{_SEP}characters"] = characters
        increments[f"{group}{_SEP}requests"] = 1
    return increments


def _bucket_field(name: str) -> tuple[BucketWidth, int, str] | None:
    """A bucket's field: its width, start and the rest (``model<US>key<US>counter``); ``None`` for a total's."""
    if not name.startswith(_BUCKET):
        return None
    width, start, rest = name.removeprefix(_BUCKET).split(_SEP, 2)
    return width, int(start), rest  # type: ignore[return-value]


def _bucket_usage(tenant: str, start: int, fields: Mapping[str, float]) -> list[BucketUsage]:
    """The entries of one bucket, from its fields ``model<US>key<US>counter``."""
    groups: dict[tuple[str, str], dict[str, float]] = {}
    for name, value in fields.items():
        model, key, counter = name.split(_SEP)
        groups.setdefault((model, key), {})[counter] = value
    return [
        BucketUsage(tenant, start, model or None, key or None, int(c.get("characters", 0)), int(c.get("requests", 0)))
        for (model, key), c in sorted(groups.items())
    ]


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


def _to_retired(tenant: str, generation: str, counters: Mapping[str, float]) -> RetiredUsage:
    return RetiredUsage(tenant, generation, counters.get(_RETIRED_AT, 0.0), _to_record(counters))
