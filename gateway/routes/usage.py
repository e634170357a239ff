"""``GET /v1/usage``: what the calling tenant has used, and its standing against its monthly budgets."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from litestar import Controller, Request, get

from gateway.http.auth.dependencies import Caller, UsageDep
from gateway.http.errors import error_responses
from gateway.schemas import TenantUsage, UsageBudget
from gateway.state import gateway_state

if TYPE_CHECKING:
    from auth.limits import BudgetState

__all__ = ["UsageController", "usage_budget"]


def usage_budget(standing: BudgetState) -> UsageBudget | None:
    """A tenant's monthly standing as ``GET /v1/usage`` shows it; ``None`` for a tenant without a budget."""
    if not standing.counted:
        return None
    return UsageBudget(
        month=standing.month.name,
        resets_at=standing.month.end,
        characters_limit=standing.characters_limit,
        characters_used=standing.characters_used,
        audio_seconds_limit=standing.audio_seconds_limit,
        audio_seconds_used=None if standing.audio_seconds_used is None else round(standing.audio_seconds_used, 3),
    )


class UsageController(Controller):
    path = "/v1/usage"
    tags = ["Usage"]  # noqa: RUF012 - Litestar's declared type

    @get(
        operation_id="getUsage",
        summary="Requests, input characters, audio seconds, cache hits, rejections and the monthly budgets' standing.",
        responses=error_responses(401, 503),
    )
    async def get_usage(self, request: Request[Any, Any, Any], usage: UsageDep, principal: Caller) -> TenantUsage:
        record = await usage.get(principal.tenant)
        standing = await gateway_state(request.app).admission.budget(principal.tenant)
        return TenantUsage(tenant=principal.tenant.name, **asdict(record), budget=usage_budget(standing))
