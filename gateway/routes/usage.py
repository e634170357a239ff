"""``GET /v1/usage``: what the calling tenant has used."""

from __future__ import annotations

from dataclasses import asdict

from litestar import Controller, get

from gateway.http.auth.dependencies import Caller, UsageDep
from gateway.http.errors import error_responses
from gateway.schemas import TenantUsage

__all__ = ["UsageController"]


class UsageController(Controller):
    path = "/v1/usage"
    tags = ["Usage"]  # noqa: RUF012 - Litestar's declared type

    @get(
        operation_id="getUsage",
        summary="Requests, input characters, audio seconds, cache hits and rejections.",
        responses=error_responses(401, 503),
    )
    async def get_usage(self, usage: UsageDep, principal: Caller) -> TenantUsage:
        record = await usage.get(principal.tenant)
        return TenantUsage(tenant=principal.tenant.name, **asdict(record))
