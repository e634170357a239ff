"""The monthly budgets' contract (``characters_per_month``, ``audio_seconds_per_month``), through the limiter, against
both storages (memory, and Redis on a real redis-server): what one month admits, what a refusal consumes, and when
the month starts again."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pytest

from auth.limits import BudgetState, Month, QuotaExceededError, TenantRateLimiter
from auth.settings import TenantLimits
from tests.auth_backends import MEMORY

if TYPE_CHECKING:
    from collections.abc import Callable


@pytest.fixture(params=["memory", "redis"])
def limiter(request: pytest.FixtureRequest, make_limiter: Callable[..., TenantRateLimiter]) -> TenantRateLimiter:
    uri = MEMORY if request.param == "memory" else str(request.getfixturevalue("redis_url"))
    return make_limiter(uri)


async def _spent_audio(limiter: TenantRateLimiter, tenant: str, limits: TenantLimits, seconds: float) -> BudgetState:
    """The standing once the audio spent in the background has landed."""
    async with asyncio.timeout(5):
        while ((standing := await limiter.budget(tenant, limits)).audio_seconds_used or 0) < seconds:
            await asyncio.sleep(0.01)
    return standing


async def test_characters_per_month_admit_up_to_the_line(limiter: TenantRateLimiter, tenant: str) -> None:
    limits = TenantLimits(characters_per_month=120)
    first = await limiter.admit(tenant, limits, 50)
    second = await limiter.admit(tenant, limits, 50)
    assert first.budget is not None and first.budget.characters_used == 50
    assert second.budget is not None and second.budget.characters_used == 100
    with pytest.raises(QuotaExceededError) as refused:
        await limiter.admit(tenant, limits, 50)
    assert refused.value.reason == "characters_per_month"
    assert refused.value.asked == 50
    assert refused.value.standing.characters_used == 100  # the refusal consumed nothing
    month = Month.at(time.time())
    assert refused.value.retry_after_s == pytest.approx(month.end - time.time(), abs=2)
    assert (await limiter.admit(tenant, limits, 20)).budget == BudgetState(month, 120, 120, None, 0.0)


async def test_a_budget_spent_by_one_tenant_leaves_the_others_alone(limiter: TenantRateLimiter, tenant: str) -> None:
    limits = TenantLimits(characters_per_month=10)
    await limiter.admit(tenant, limits, 10)
    with pytest.raises(QuotaExceededError):
        await limiter.admit(tenant, limits, 1)
    other = await limiter.admit(f"{tenant}-other", limits, 10)
    assert other.budget is not None and other.budget.characters_used == 10


async def test_a_budget_refusal_consumes_no_window(limiter: TenantRateLimiter, tenant: str) -> None:
    limits = TenantLimits(characters_per_month=10, requests_per_minute=5, characters_per_minute=100)
    await limiter.admit(tenant, limits, 10)
    for _ in range(3):
        with pytest.raises(QuotaExceededError):
            await limiter.admit(tenant, limits, 5)
    state = await limiter.state(tenant, limits)
    assert (state.remaining_requests, state.remaining_tokens) == (4, 90)


async def test_audio_seconds_refuse_the_request_after_the_line(limiter: TenantRateLimiter, tenant: str) -> None:
    limits = TenantLimits(audio_seconds_per_month=3.0)
    await limiter.admit(tenant, limits, 40)
    limiter.spend(tenant, limits, "audio_seconds_per_month", 2.5)  # under the line: the next request is admitted ...
    await _spent_audio(limiter, tenant, limits, 2.5)
    await limiter.admit(tenant, limits, 40)
    limiter.spend(tenant, limits, "audio_seconds_per_month", 2.5)  # ... and may finish past it
    standing = await _spent_audio(limiter, tenant, limits, 5.0)
    assert standing.audio_seconds_used == pytest.approx(5.0)
    assert standing.fraction_used("audio_seconds_per_month") == pytest.approx(5.0 / 3.0)
    with pytest.raises(QuotaExceededError) as refused:
        await limiter.admit(tenant, limits, 1)
    assert refused.value.reason == "audio_seconds_per_month"
    assert standing.characters_used == 80  # the month is counted whole while the tenant has a budget


async def test_characters_counted_after_the_work_refuse_what_follows(limiter: TenantRateLimiter, tenant: str) -> None:
    limits = TenantLimits(characters_per_month=100)
    await limiter.admit(tenant, limits, 0)  # a speech job: admitted as a request, its characters counted as it ends
    limiter.spend(tenant, limits, "characters_per_month", 150)
    async with asyncio.timeout(5):
        while ((await limiter.budget(tenant, limits)).characters_used or 0) < 150:
            await asyncio.sleep(0.01)
    with pytest.raises(QuotaExceededError) as refused:
        await limiter.admit(tenant, limits, 0)  # past the line: even a request of no characters
    assert refused.value.reason == "characters_per_month"


async def test_a_tenant_without_a_budget_counts_no_month(limiter: TenantRateLimiter, tenant: str) -> None:
    limits = TenantLimits()
    state = await limiter.admit(tenant, limits, 10**6)
    limiter.spend(tenant, limits, "audio_seconds_per_month", 100.0)
    assert state.budget is None
    standing = await limiter.budget(tenant, limits)
    assert not standing.counted
    assert (standing.characters_used, standing.audio_seconds_used) == (None, None)


async def test_a_budget_over_a_session_refuses_its_segments(limiter: TenantRateLimiter, tenant: str) -> None:
    limits = TenantLimits(characters_per_month=30)
    await limiter.admit(tenant, limits, 0)  # the session, counted as a request
    await limiter.admit(tenant, limits, 30, count_request=False)
    with pytest.raises(QuotaExceededError):
        await limiter.admit(tenant, limits, 1, count_request=False)


@pytest.mark.parametrize(
    ("moment", "start", "end"),
    [
        ("2026-12-31T23:59:59", "2026-12-01T00:00:00", "2027-01-01T00:00:00"),
        ("2028-02-10T12:00:00", "2028-02-01T00:00:00", "2028-03-01T00:00:00"),  # a leap year's February
        ("2027-03-01T00:00:00", "2027-03-01T00:00:00", "2027-04-01T00:00:00"),
    ],
)
def test_the_month_is_the_calendar_month_in_utc(moment: str, start: str, end: str) -> None:
    def unix(iso: str) -> int:
        return int(datetime.fromisoformat(iso).replace(tzinfo=UTC).timestamp())

    month = Month.at(unix(moment))
    assert (month.start, month.end) == (unix(start), unix(end))
    assert month.name == start[:7]


async def test_a_tenant_created_again_has_a_budget_of_its_own(limiter: TenantRateLimiter, tenant: str) -> None:
    limits = TenantLimits(characters_per_month=10, audio_seconds_per_month=1.0)
    await limiter.admit(tenant, limits, 10, generation="aaaa")
    again = await limiter.admit(tenant, limits, 10, generation="bbbb")  # same name, another tenant
    assert again.budget is not None and again.budget.characters_used == 10
    limiter.spend(tenant, limits, "audio_seconds_per_month", 2.0, generation="aaaa")  # the old one's stream ends late
    async with asyncio.timeout(5):
        while ((await limiter.budget(tenant, limits, generation="aaaa")).audio_seconds_used or 0) < 2.0:
            await asyncio.sleep(0.01)
    standing = await limiter.budget(tenant, limits, generation="bbbb")
    assert (standing.characters_used, standing.audio_seconds_used) == (10, 0.0)
