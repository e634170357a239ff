"""Probes: ``/healthz`` (the process answers) and ``/readyz`` (at least one engine can take requests, and Redis
answers when the limits fail closed without it)."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Response, get
from litestar.openapi import ResponseSpec
from litestar.status_codes import HTTP_200_OK, HTTP_503_SERVICE_UNAVAILABLE

from gateway.http.dependencies import Router, StorageDep
from gateway.schemas import EngineReadiness, Readiness

__all__ = ["HealthController"]


class HealthController(Controller):
    tags = ["Operations"]  # noqa: RUF012 - Litestar's declared type

    @get("/healthz", operation_id="healthz", summary="Liveness: the server process answers.")
    async def healthz(self) -> dict[str, str]:
        return {"status": "ok"}

    @get(
        "/readyz",
        operation_id="readyz",
        summary="Readiness: 200 when at least one engine is ready.",
        responses={
            503: ResponseSpec(
                data_container=Readiness, description="Not ready: see the detail.", generate_examples=False
            )
        },
    )
    async def readyz(self, router: Router, storage: StorageDep) -> Response[Readiness]:
        engines = {name: _readiness(pool.status()) for name, pool in router.pools.items()}
        for name, engine in engines.items():
            engine.breaker = router.breaker_state(name)
        redis = await storage.state()
        ready = any(engine.state == "ready" for engine in engines.values()) and (
            redis != "unreachable" or not storage.required
        )
        return Response(
            Readiness(ready=ready, engines=engines, redis=redis),
            status_code=HTTP_200_OK if ready else HTTP_503_SERVICE_UNAVAILABLE,
        )


def _readiness(status: Any) -> EngineReadiness:
    readiness = EngineReadiness.model_validate(status, from_attributes=True)
    readiness.details = dict(status.info.details) if status.info is not None else {}
    return readiness
