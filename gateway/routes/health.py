"""Probes: ``/healthz`` (the process answers) and ``/readyz`` (what the gateway must serve can be answered, and Redis
answers when the limits fail closed without it).

A Redis that refuses writes (full, or a replica) shows in ``/readyz`` without making it fail: every replica meets the
same Redis, so taking one out of its load balancer would fix nothing and only move its traffic to the others.

What must be answerable comes from :meth:`~gateway.speech.routing.ModelRouter.requirements`: by default every alias,
by its first engine or, for an alias with ``fallback``, by any of its engines. A breaker is not counted: an open one
closes only through the trial requests that a pod out of its Service would never get.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from litestar import Controller, Request, Response, get
from litestar.openapi import ResponseSpec
from litestar.status_codes import HTTP_200_OK, HTTP_503_SERVICE_UNAVAILABLE
from pydantic import BaseModel, Field

from gateway.http.auth.dependencies import Router, StorageDep
from gateway.http.auth.service_token import presents_service_token
from gateway.state import gateway_state

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["HealthController"]

_READY = "every model in `required` has a ready engine"


class Health(BaseModel):
    status: Literal["ok"] = "ok"


class EndpointReadiness(BaseModel):
    """One upstream address of a remote (``kind: openai``) engine."""

    url: str
    """The configured base URL."""
    address: str | None
    """The IP address it resolved to; ``null`` when the host name does not resolve."""
    state: str
    """``healthy`` (its last probe answered 200) or ``unhealthy`` (taken out until a probe answers again)."""
    in_flight: int
    breaker: str
    """This address's circuit breaker: ``closed``, ``open`` (no requests) or ``half_open`` (trying again)."""
    reason: str | None
    """Why it is ``unhealthy``: its probe's failure, an unreachable request or a name that does not resolve; ``null``
    while healthy."""
    last_error: str | None
    """The last failure of a request sent to it (what its breaker counts), kept after it recovers; ``null`` until one
    fails. Probes never replace it: the cause of a failure outlives what the probes see after it."""


class EngineReadiness(BaseModel):
    state: str
    reason: str | None
    workers: int
    ready_workers: int
    busy_workers: int
    active_jobs: int
    queued: int
    restarts: int
    pids: list[int]
    details: dict[str, str] = {}
    """What the engine reports about itself (weights, device, text normalizer, ...)."""
    breaker: str | None = None
    """The local engine's circuit breaker: ``closed``, ``open`` (requests fail fast, aliases fall through) or
    ``half_open`` (trying again); ``null`` for an engine without one."""
    endpoints: list[EndpointReadiness] | None = None
    """A remote engine's upstream addresses (state, requests in flight, breaker, last error); ``null`` for local
    engines."""


class Readiness(BaseModel):
    ready: bool
    reason: str
    """Why the gateway is ready or not: which models cannot be answered and what their engines are doing, or Redis."""
    required: dict[str, list[str]]
    """What must be answerable for the gateway to be ready: each alias (or engine, by its own name) with the engines
    of which one must be ready (``readiness.engines`` when set; else every alias, by its first engine or, with
    ``fallback``, any of its engines; with no alias, every engine)."""
    engines: dict[str, EngineReadiness]
    redis: str
    """``ok``, ``unreachable`` or ``not configured``."""
    refusing_writes: list[str] = Field(default_factory=list)
    """The stores whose writes Redis refuses now while it answers (e.g. ``cache``: Redis is at ``maxmemory`` under
    ``noeviction``). It leaves ``ready`` as it is: every replica meets the same Redis, so leaving the load balancer
    would fix nothing."""
    warnings: list[str] = Field(default_factory=list)
    """What an operator should fix about Redis memory without the gateway being unready: an eviction policy that may
    evict API keys, tenants, voices and usage, and each episode of refused writes with what the store does meanwhile."""


class HealthController(Controller):
    tags = ["Operations"]  # noqa: RUF012 - Litestar's declared type

    @get("/healthz", operation_id="healthz", summary="Liveness: the server process answers.")
    async def healthz(self) -> Health:
        return Health()

    @get(
        "/readyz",
        operation_id="readyz",
        summary="Readiness: 200 when every model the gateway must serve has a ready engine.",
        responses={
            503: ResponseSpec(
                data_container=Readiness, description="Not ready: see the reason.", generate_examples=False
            )
        },
    )
    async def readyz(self, request: Request[Any, Any, Any], router: Router, storage: StorageDep) -> Response[Readiness]:
        engines = {name: _readiness(pool.status()) for name, pool in router.pools.items()}
        for name, engine in engines.items():
            engine.breaker = router.breaker_state(name)
        required = router.requirements()
        problems = _unanswerable(required, engines)
        redis = await storage.state()
        if redis == "unreachable" and storage.required:
            problems.append("Redis is unreachable and the limits fail closed without it (limits.fail_mode: closed)")
        body = Readiness(
            ready=not problems,
            reason="; ".join(problems) or _READY,
            required={model: list(candidates) for model, candidates in required.items()},
            engines=engines,
            redis=redis,
            refusing_writes=storage.refusing_writes(),
            warnings=storage.warnings(),
        )
        if not _may_see_internals(request):
            body = _without_internals(body)
        return Response(body, status_code=HTTP_503_SERVICE_UNAVAILABLE if problems else HTTP_200_OK)


def _may_see_internals(request: Request[Any, Any, Any]) -> bool:
    """An engine node shows its workers' pids and its engines' details to its front gateways only (the service token):
    an orchestrator's probe needs the status code alone."""
    settings = gateway_state(request.app).settings
    token = settings.auth.service_token
    if settings.server.profile != "engine" or token is None:
        return True
    return presents_service_token(request.headers, token.get_secret_value())


def _without_internals(body: Readiness) -> Readiness:
    engines = {
        name: engine.model_copy(update={"reason": None, "pids": [], "details": {}, "endpoints": None})
        for name, engine in body.engines.items()
    }
    reason = _READY if body.ready else "not ready (the detail is for callers with the service token)"
    return body.model_copy(update={"engines": engines, "reason": reason, "warnings": []})


def _readiness(status: Any) -> EngineReadiness:
    readiness = EngineReadiness.model_validate(status, from_attributes=True)
    readiness.details = dict(status.info.details) if status.info is not None else {}
    return readiness


def _unanswerable(required: Mapping[str, tuple[str, ...]], engines: Mapping[str, EngineReadiness]) -> list[str]:
    """What cannot be answered, one line per set of engines (seven OpenAI names waiting for ChatTTS are one line)."""
    waiting: dict[tuple[str, ...], list[str]] = {}
    for model, candidates in required.items():
        if not any(engines[name].state == "ready" for name in candidates):
            waiting.setdefault(candidates, []).append(model)
    return [_problem(models, candidates, engines) for candidates, models in waiting.items()]


def _problem(models: list[str], candidates: tuple[str, ...], engines: Mapping[str, EngineReadiness]) -> str:
    states = ", ".join(_state(name, engines[name]) for name in candidates)
    if models == list(candidates):  # an engine required by its own name
        return states
    return f"{', '.join(models)} cannot be answered: {states}"


def _state(name: str, engine: EngineReadiness) -> str:
    return f"{name} is {engine.state}" + (f" ({engine.reason})" if engine.reason else "")
