"""Shared storage plumbing: the process's one Redis client, what counts as "unreachable", and the outage latch.

``auth`` (keys, limits, usage) and ``gateway`` (cache, voices, probes) all store through the client that the
composition root (``gateway/app.py``) builds here once, so every part shares one connection pool and one timeout
policy, and a Redis URL (one Redis, a Sentinel-managed master or a Redis Cluster, with an ACL user or TLS:
``storage/redis_url.py``) means the same to all of them.
"""

from __future__ import annotations

from storage.listing import MAX_PAGE, Page, RedisListing, sortable_id
from storage.outage import STORAGE_ERRORS, OutageLatch
from storage.redis import RedisClient, connect_redis
from storage.redis_url import InvalidRedisURLError, redact_redis_url

__all__ = [
    "MAX_PAGE",
    "STORAGE_ERRORS",
    "InvalidRedisURLError",
    "OutageLatch",
    "Page",
    "RedisClient",
    "RedisListing",
    "connect_redis",
    "redact_redis_url",
    "sortable_id",
]
