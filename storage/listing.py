"""What every listing shares: ids that sort by creation time, a page of a listing with its cursor rule, and the
base of a store that keeps each tenant's listing in Redis.

A listing is ordered by id and a page starts right after its ``after`` cursor, as OpenAI's lists do. Ids from
:func:`sortable_id` begin with the time they were made, so that order is creation order, and a cursor stays valid
when the record it names was deleted meanwhile (the next page starts after where it stood).
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable

    from storage.redis import RedisClient

__all__ = ["MAX_PAGE", "Page", "RedisListing", "sortable_id"]

T = TypeVar("T")

MAX_PAGE = 100
"""The most records one page may hold: a listing never costs the event loop more than this many records' work."""

_RANDOM_BITS = 48
_last = (0, 0)


def sortable_id(prefix: str) -> str:
    """``prefix`` + 12 hex digits of milliseconds + 12 hex digits that order ids made in the same millisecond.

    Within a process ids strictly increase (the low digits count up inside one millisecond, from a random start); ids
    of different processes made in the same millisecond sort in no particular order among themselves.
    """
    global _last  # noqa: PLW0603 - one monotonic counter per process is the point
    now_ms = int(time.time() * 1000)
    last_ms, last_low = _last
    if now_ms <= last_ms:
        now_ms, low = last_ms, last_low + 1
        if low >= 1 << _RANDOM_BITS:  # 2^48 ids in one millisecond: move into the next one
            now_ms, low = now_ms + 1, secrets.randbits(_RANDOM_BITS - 1)
    else:
        low = secrets.randbits(_RANDOM_BITS - 1)  # half the range: room to count up
    _last = (now_ms, low)
    return f"{prefix}{now_ms:012x}{low:012x}"


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a listing: its records in order, and whether more follow the last one."""

    data: list[T]
    has_more: bool

    @classmethod
    def of(cls, ordered: list[T], limit: int) -> Page[T]:
        """The page from ``ordered``, which holds up to ``limit + 1`` records (one more tells whether more follow)."""
        return cls(ordered[:limit], len(ordered) > limit)


# One page of records in id order. KEYS: records, ids. ARGV: lower bound (BYLEX), count.
_PAGE_LUA = """
local ids = redis.call('ZRANGE', KEYS[2], ARGV[1], '+', 'BYLEX', 'LIMIT', 0, tonumber(ARGV[2]))
if #ids == 0 then return {} end
return redis.call('HMGET', KEYS[1], unpack(ids))
"""


class RedisListing(Generic[T]):
    """The base of a store that keeps each tenant's records in Redis: a hash of the records by id beside a sorted set
    of the ids, all at score 0 so that the set is in id order (a page is read in one round trip), and whatever else
    the store keeps of the tenant. Every key of a tenant carries its hash tag (``<prefix><name>:{<tenant>}``): one Redis
    Cluster slot, which a script that touches several of them needs.
    """

    def __init__(
        self,
        client: RedisClient,
        prefix: str,
        layout: tuple[str, ...],
        *,
        ids: str,
        decode: Callable[[bytes | str], T],
    ) -> None:
        """``layout``: the names of the tenant's keys, the records' hash first, in the order the store's scripts take
        them; ``ids``: the name of the sorted set of ids among them; ``decode``: a stored record."""
        self._client = client
        self._prefix = prefix
        self._layout = layout
        self._ids = layout.index(ids)
        self._decode = decode
        self._page = client.register_script(_PAGE_LUA)

    def _keys(self, tenant: str) -> tuple[str, ...]:
        """The tenant's keys, in the order of the layout."""
        return tuple(f"{self._prefix}{name}:{{{tenant}}}" for name in self._layout)

    async def get(self, tenant: str, record_id: str) -> T | None:
        raw = await self._client.hget(self._keys(tenant)[0], record_id)
        return self._decode(raw) if raw else None

    async def page(self, tenant: str, *, after: str | None, limit: int) -> Page[T]:
        """The records of the page after ``after``; an id whose record went meanwhile is passed over."""
        keys = self._keys(tenant)
        lower = "-" if after is None else f"({after}"
        raw = await self._page(keys=[keys[0], keys[self._ids]], args=[lower, limit + 1])
        found = Page.of([item for item in raw if item], limit)
        return Page([self._decode(item) for item in found.data], found.has_more)

    async def forget_tenant(self, tenant: str) -> None:
        await self._client.delete(*self._keys(tenant))
