"""What every listing shares: ids that sort by creation time, and a page of a listing with its cursor rule.

A listing is ordered by id and a page starts right after its ``after`` cursor, as OpenAI's lists do. Ids from
:func:`sortable_id` begin with the time they were made, so that order is creation order, and a cursor stays valid
when the record it names was deleted meanwhile (the next page starts after where it stood).
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["MAX_PAGE", "Page", "sortable_id"]

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
