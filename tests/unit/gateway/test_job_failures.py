"""What a failed job keeps, and whose usage it counts in (``JobRunner.fail``): what it spoke, counted in the usage of
the tenant generation that made it, never in a tenant created again under the same name."""

from __future__ import annotations

import asyncio

import pytest

from auth import ANONYMOUS, MemoryAuthStore, Tenant
from auth.settings import TenantLimits
from gateway.jobs.store import MemoryJobStore, SpokenSegment
from tests.job_runs import TENANT, Engines, job, runner

TEXT = "The fox ran through the wood."
NEVER_VALID = "x" * 100_001
"""A segment longer than a speech request may be: it fails its job at once, without a try."""


class SlowCommits(MemoryJobStore):
    """A store whose commits take ``delay_s`` each (a busy Redis, a slow volume)."""

    def __init__(self, delay_s: float) -> None:
        super().__init__(ttl_s=60)
        self.delay_s = delay_s

    async def commit(self, tenant: str, job_id: str, index: int, spoken: SpokenSegment) -> bool:
        await asyncio.sleep(self.delay_s)
        return await super().commit(tenant, job_id, index, spoken)


async def test_a_job_failing_on_a_segment_keeps_and_counts_the_one_spoken_before() -> None:
    """The segment before the failing one is still being committed when the job fails: its commit finishes first
    (before, it was cancelled, and the job failed at 0 characters done, charged nothing, having spoken one)."""
    store, engines = SlowCommits(0.3), Engines()
    job_id = await job(store, "tts-1", [TEXT, NEVER_VALID])
    await asyncio.wait_for(runner(store, engines).run(TENANT, job_id), 10)
    record = await store.get(TENANT, job_id)
    assert record is not None
    assert (record.status, record.segments_done, record.characters_done) == ("failed", 1, len(TEXT))
    usage = await engines.usage.get(ANONYMOUS)
    assert (usage.requests, usage.input_characters) == (1, len(TEXT))


async def test_a_commit_that_does_not_finish_holds_the_failure_up_for_a_bounded_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("gateway.jobs.runner._COMMIT_GRACE_S", 0.2)
    store, engines = SlowCommits(3600), Engines()
    job_id = await job(store, "tts-1", [TEXT, NEVER_VALID])
    await asyncio.wait_for(runner(store, engines).run(TENANT, job_id), 5)
    record = await store.get(TENANT, job_id)
    assert record is not None and (record.status, record.segments_done) == ("failed", 0)


@pytest.mark.parametrize("created_again", [True, False])
async def test_a_deleted_tenants_failed_job_counts_in_its_retired_usage(created_again: bool) -> None:
    """Its tenant deleted (its usage retired) while the job ran, maybe created again under the name meanwhile: what
    the job spoke goes to the deleted generation's retired usage, as what the deletion cancelled does."""
    store, engines, tenants = MemoryJobStore(ttl_s=60), Engines(), MemoryAuthStore()
    old = await tenants.put_tenant(Tenant("acme", TenantLimits(), None))
    job_id = await job(store, "tts-1", [TEXT, TEXT], tenant=old)
    assert await store.start("acme", job_id) is not None
    assert await store.commit("acme", job_id, 0, SpokenSegment(b"\0\0" * len(TEXT), len(TEXT), 300, len(TEXT)))
    await tenants.delete_tenant("acme")
    await engines.usage.retire(old)
    new = await tenants.put_tenant(Tenant("acme", TenantLimits(), None)) if created_again else None

    await runner(store, engines, tenants=tenants).fail("acme", job_id, "A segment could not be spoken: it broke")

    if new is not None:
        assert (await engines.usage.get(new)).requests == 0  # before: the new tenant was charged the old one's job
    [retired] = await engines.usage.retired("acme")
    assert retired.generation == old.generation
    assert (retired.usage.requests, retired.usage.input_characters, retired.usage.audio_seconds) == (1, len(TEXT), 0.3)
