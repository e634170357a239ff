"""Usage accounting per tenant: requests, input characters, audio seconds, cache hits and rejections.

Usage belongs to a tenant's generation (:attr:`~auth.tenants.Tenant.generation`), as its cached audio does: a tenant
deleted and created again under the same name starts empty. A deleted tenant's usage is retired, not lost: it is kept
apart, with what its streams still in flight add to it, for ``retired_retention_s``, and listed for the operator.

Recording never waits for Redis: increments gather in memory and a background task writes them (one round trip for
all that gathered meanwhile), off the response path. While Redis is unreachable they wait and are written once it is
back, so nothing recorded is lost; reading usage writes what is waiting first.

Usage is also kept per time bucket (a minute, an hour, a day), by model and API key, for the organization Usage API
(``GET /v1/organization/usage/audio_speeches``): each recorded request adds its characters and one request to the
bucket of each width it falls in, written with the rest of its batch. Buckets are kept for
:data:`BUCKET_RETENTION_S` (per width), and belong to the tenant's generation as the totals do: the buckets of one
generation add up to its totals, as long as they are kept.

A write whose answer never came (the connection broke, the master died) may have been applied all the same, and is
tried again: each write is a batch numbered in its process's sequence, and the script applies a batch only if its
number is past the last one it applied from that process, so a batch tried twice counts once. (What no failover can
keep: a write the old master acknowledged but had not yet replicated, milliseconds' worth, is lost.)
"""

from __future__ import annotations

from auth.usage.base import (
    BUCKET_RETENTION_S,
    BUCKET_WIDTHS,
    DEFAULT_RETIRED_RETENTION_S,
    BucketUsage,
    BucketWidth,
    RetiredUsage,
    UsageLedger,
    UsageRecord,
    UsageUnavailableError,
)
from auth.usage.memory import MemoryUsageLedger
from auth.usage.redis import RedisUsageLedger

__all__ = [
    "BUCKET_RETENTION_S",
    "BUCKET_WIDTHS",
    "DEFAULT_RETIRED_RETENTION_S",
    "BucketUsage",
    "BucketWidth",
    "MemoryUsageLedger",
    "RedisUsageLedger",
    "RetiredUsage",
    "UsageLedger",
    "UsageRecord",
    "UsageUnavailableError",
]
