"""Probes: ``/healthz`` (the process answers) and ``/readyz`` (at least one engine can take requests)."""

from __future__ import annotations

from litestar import Controller, Response, get
from litestar.status_codes import HTTP_200_OK, HTTP_503_SERVICE_UNAVAILABLE

from gateway.routing import ModelRouter
from gateway.schemas import EngineReadiness, Readiness

__all__ = ["HealthController"]


class HealthController(Controller):
    tags = ["Operations"]  # noqa: RUF012 - Litestar's declared type

    @get("/healthz", operation_id="healthz", summary="Liveness: the server process answers.")
    async def healthz(self) -> dict[str, str]:
        return {"status": "ok"}

    @get("/readyz", operation_id="readyz", summary="Readiness: 200 when at least one engine is ready.")
    async def readyz(self, router: ModelRouter) -> Response[Readiness]:
        engines = {name: _readiness(pool.status()) for name, pool in router.pools.items()}
        ready = any(engine.state == "ready" for engine in engines.values())
        return Response(Readiness(ready=ready, engines=engines),
                        status_code=HTTP_200_OK if ready else HTTP_503_SERVICE_UNAVAILABLE)


def _readiness(status: object) -> EngineReadiness:
    return EngineReadiness.model_validate(status, from_attributes=True)
