"""What a failed job keeps, and whose usage it counts in (``JobRunner.fail``): what it spoke, counted in the usage of
the tenant generation that made it, never in a tenant created again under the same name."""

from __future__ import annotations

import pytest

from auth import MemoryAuthStore, Tenant
from auth.settings import TenantLimits
from gateway.jobs.store import MemoryJobStore, SpokenSegment
from tests.job_runs import Engines, job, runner

TEXT = "The fox ran through the wood."


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
