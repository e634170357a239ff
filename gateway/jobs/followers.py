"""Following jobs' progress (``/events``): one poll of the store per job per process, whatever the number of
followers, and a cap on the followers one tenant may have at once.

Each follower polling the store on its own made 200 followers of one job 200 reads every ``poll_s`` (0.65 of a core
on the process they shared, and every other request 4.6 times slower there). Here the first follower of a job starts
one poll, which hands each new reading to every follower of the job, and stops when its last follower left or the
job ended.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import TYPE_CHECKING

from gateway.jobs.records import ACTIVE
from lifecycle import BackgroundTasks, naming
from storage import STORAGE_ERRORS

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, Callable

    from gateway.jobs.records import JobRecord
    from gateway.jobs.store import JobStore

__all__ = ["FollowerPlace", "JobFollowers"]

logger = naming.logger("jobs")


class FollowerPlace:
    """One follower's place in its tenant's cap, given back once (:meth:`release`)."""

    def __init__(self, counts: Counter[str], tenant: str) -> None:
        self._counts = counts
        self.tenant = tenant
        self._held = True
        counts[tenant] += 1

    def release(self) -> None:
        if not self._held:
            return
        self._held = False
        self._counts[self.tenant] -= 1
        if self._counts[self.tenant] <= 0:
            del self._counts[self.tenant]

    def __del__(self) -> None:
        if self._held:  # a safety net: the event stream releases its place when it ends
            logger.warning("a job follower's place was not given back; releasing it")
            self.release()


class _JobPoll:
    """The one poll of a job's record, handing each reading to every follower of the job."""

    def __init__(self, store: JobStore, record: JobRecord, every_s: float) -> None:
        self.record: JobRecord | None = record
        self.readings = 0
        self.followers = 0
        self.ended = False
        self._store = store
        self._every_s = every_s
        self._changed = asyncio.Event()

    async def run(self, on_end: Callable[[_JobPoll], None]) -> None:
        """Read the record every ``every_s`` while the job runs and someone follows it."""
        try:
            while self.record is not None and self.record.status in ACTIVE:
                await asyncio.sleep(self._every_s)
                if not self.followers:
                    return
                try:
                    self.record = await self._store.get(self.record.tenant, self.record.id)
                except STORAGE_ERRORS as exc:  # the store out of reach: the next reading tries again
                    logger.debug("could not read a followed job: %r", exc)
                    continue
                self.readings += 1
                self._wake()
        finally:
            self.ended = True
            on_end(self)
            self._wake()

    async def after(self, reading: int) -> int:
        """Wait for a reading later than ``reading`` (or the poll's end); returns the latest reading's number."""
        while self.readings == reading and not self.ended:
            await self._changed.wait()
        return self.readings

    def _wake(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()


class JobFollowers:
    """The followers of jobs on this process.

    Args:
        store: Where the jobs are read.
        poll_s: How often a followed job is read.
        max_per_tenant: Followers one tenant may have at once (``jobs.max_followers_per_tenant``).
    """

    def __init__(self, store: JobStore, poll_s: float, max_per_tenant: int) -> None:
        self._store = store
        self._poll_s = poll_s
        self.max_per_tenant = max_per_tenant
        self._counts: Counter[str] = Counter()
        self._polls: dict[tuple[str, str], _JobPoll] = {}
        self._tasks = BackgroundTasks("the jobs' followers")

    def admit(self, tenant: str) -> FollowerPlace | None:
        """A place for one more follower of the tenant's; ``None`` when it has ``max_per_tenant`` already."""
        if self._counts[tenant] >= self.max_per_tenant:
            return None
        return FollowerPlace(self._counts, tenant)

    def following(self, tenant: str) -> int:
        """The tenant's followers now."""
        return self._counts[tenant]

    def polls(self) -> int:
        """The jobs polled now (one poll per followed job)."""
        return len(self._polls)

    async def readings(self, record: JobRecord) -> AsyncGenerator[JobRecord | None]:
        """The job's record each time the job's one poll read it anew, until the job ended (or is gone)."""
        poll = self._join(record)
        poll.followers += 1
        try:
            seen = poll.readings
            while (latest := await poll.after(seen)) != seen:  # the same: the poll ended without a new reading
                seen = latest
                yield poll.record
        finally:
            poll.followers -= 1

    def _join(self, record: JobRecord) -> _JobPoll:
        key = (record.tenant, record.id)
        poll = self._polls.get(key)
        if poll is None:  # no poll of the job, or one that ended: it left the table as it ended
            poll = self._polls[key] = _JobPoll(self._store, record, self._poll_s)
            self._tasks.spawn(poll.run(lambda ended: self._left(key, ended)))
        return poll

    def _left(self, key: tuple[str, str], poll: _JobPoll) -> None:
        if self._polls.get(key) is poll:
            del self._polls[key]

    async def close(self) -> None:
        await self._tasks.close()
