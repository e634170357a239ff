"""A job runner on an in-memory store with a stand-in for the speech service, for the tests of how a job meets its
segments' failures (``gateway/jobs/runner.py``): engines that cannot speak yet, faults of the gateway's own."""

from __future__ import annotations

import contextlib
from collections import Counter
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

from auth import ANONYMOUS
from auth.usage import MemoryUsageLedger
from gateway.jobs.records import JobRecord, now_s
from gateway.jobs.runner import JobRunner
from gateway.jobs.turns import TenantTurns
from storage import sortable_id

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from auth import AuthStore, Tenant
    from gateway.jobs.store import MemoryJobStore
    from gateway.schemas import SpeechRequest
    from gateway.speech.service import SpeechService

__all__ = ["TENANT", "Engines", "job", "runner"]

TENANT = ANONYMOUS.name


class Engines:
    """Stands in for the speech service: each segment's audio (two bytes a character), unless its model's engine
    refuses or fails it now (``down``: the error it raises, as the failover raises it); a job it is told ended is
    counted in a real ledger (``usage``), as the service counts it."""

    def __init__(self) -> None:
        self.down: dict[str, Exception] = {}
        self.tries: Counter[str] = Counter()
        self.spoken: list[str] = []
        self.usage = MemoryUsageLedger()

    async def speak(self, _principal: object, request: SpeechRequest, _record: object, **_: object) -> Any:
        self.tries[request.model] += 1
        if (error := self.down.get(request.model)) is not None:
            raise error
        self.spoken.append(request.input)
        return self._reply(request.input)

    @contextlib.asynccontextmanager
    async def _reply(self, text: str) -> AsyncIterator[SimpleNamespace]:
        clock = SimpleNamespace(seconds=len(text) / 100)
        yield SimpleNamespace(whole=b"\x00\x00" * len(text), characters=None, outcome=SimpleNamespace(clock=clock))

    def account_job(self, tenant: Tenant, characters: int, audio_seconds: float) -> None:
        self.usage.record_request(tenant, characters=characters, audio_seconds=audio_seconds, cache_hit=False)


async def job(store: MemoryJobStore, model: str, segments: list[str], *, tenant: Tenant = ANONYMOUS) -> str:
    """A new job of ``segments`` in ``model`` (the anonymous tenant's by default), as its creation stores it."""
    record = JobRecord(
        sortable_id("job_"),
        tenant.name,
        {"model": model, "voice": "alloy", "response_format": "pcm"},
        sum(map(len, segments)),
        len(segments),
        int(now_s()),
        generation=tenant.generation,
    )
    assert await store.create(record, segments, quota_bytes=10**9, max_jobs=100) is None
    return record.id


def runner(
    store: MemoryJobStore, engines: Engines, *, slots: int = 2, tenants: AuthStore | None = None, **options: Any
) -> JobRunner:
    """The runner of ``store``'s jobs through ``engines``, three tries a segment; ``tenants``: where it looks its
    jobs' tenants up (none but the anonymous one by default)."""
    speech = cast("SpeechService", engines)
    return JobRunner(store, speech, cast("AuthStore", tenants), TenantTurns(slots), segment_attempts=3, **options)
