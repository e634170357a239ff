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

from gateway.jobs.store.base import JobStore, Refusal, SpokenSegment
from gateway.jobs.store.files import AudioFiles
from gateway.jobs.store.memory import MemoryJobStore
from gateway.jobs.store.redis import RedisJobStore

__all__ = ["AudioFiles", "JobStore", "MemoryJobStore", "RedisJobStore", "Refusal", "SpokenSegment"]
