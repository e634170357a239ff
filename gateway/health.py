"""Probes: ``/healthz`` (the process answers) and ``/readyz`` (at least one engine can take requests, and Redis
answers when the limits fail closed without it)."""

from __future__ import annotations

import asyncio
from typing import Any

from litestar import Controller, Response, get
from litestar.openapi import ResponseSpec
from litestar.status_codes import HTTP_200_OK, HTTP_503_SERVICE_UNAVAILABLE
from redis.exceptions import RedisError

from gateway.dependencies import Router, Tenants
from gateway.schemas import EngineReadiness, Readiness

__all__ = ["HealthController"]

_REDIS_PING_TIMEOUT_S = 0.5


class HealthController(Controller):
    tags = ["Operations"]  # noqa: RUF012 - Litestar's declared type

    @get("/healthz", operation_id="healthz", summary="Liveness: the server process answers.")
    async def healthz(self) -> dict[str, str]:
        return {"status": "ok"}

    @get("/readyz", operation_id="readyz", summary="Readiness: 200 when at least one engine is ready.",
         responses={503: ResponseSpec(data_container=Readiness, description="Not ready: see the detail.",
                                     generate_examples=False)})
    async def readyz(self, router: Router, tenancy: Tenants) -> Response[Readiness]:
        engines = {name: _readiness(pool.status()) for name, pool in router.pools.items()}
        redis = await _redis_state(tenancy)
        ready = any(engine.state == "ready" for engine in engines.values()) and (
            redis != "unreachable" or tenancy.limiter_fails_open)
        return Response(Readiness(ready=ready, engines=engines, redis=redis),
                        status_code=HTTP_200_OK if ready else HTTP_503_SERVICE_UNAVAILABLE)


def _readiness(status: Any) -> EngineReadiness:
    return EngineReadiness.model_validate(status, from_attributes=True)


async def _redis_state(tenancy: Tenants) -> str:
    if tenancy.redis is None:
        return "not configured"
    try:
        await asyncio.wait_for(tenancy.redis.ping(), _REDIS_PING_TIMEOUT_S)
    except (TimeoutError, RedisError, OSError):
        return "unreachable"
    return "ok"
