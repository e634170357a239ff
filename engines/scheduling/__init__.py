"""Scheduling an engine's slots across tenants, the same for every backend.

- ``fair_queue``: per-tenant queues served in weighted-fair order with strict priority classes and per-tenant caps;
- ``slots``: who gets the next free slot (at once, kept for a tenant below its share, or from the queues);
- ``work``: what a request costs, as the seconds of speech its text should make.
"""

from engines.scheduling.fair_queue import (
    DEFAULT_SHARE,
    PRIORITIES,
    Priority,
    QueueFullError,
    Scheduling,
    TenantQueueFullError,
    TenantScheduler,
    TenantShare,
)
from engines.scheduling.slots import Grant, SlotScheduler, SlotSource
from engines.scheduling.work import expected_speech_s

__all__ = [
    "DEFAULT_SHARE",
    "PRIORITIES",
    "Grant",
    "Priority",
    "QueueFullError",
    "Scheduling",
    "SlotScheduler",
    "SlotSource",
    "TenantQueueFullError",
    "TenantScheduler",
    "TenantShare",
    "expected_speech_s",
]
