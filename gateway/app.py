"""``create_app(settings)``: the composition root. It builds the Litestar application, and in its lifespan the
engine pools and the app's one typed state (``gateway/services.py``, ``gateway/state.py``), and hands each handler
what it needs by name."""

from __future__ import annotations

import gc
import json
import logging
from contextlib import AsyncExitStack, asynccontextmanager
from functools import partial
from importlib.metadata import version
from typing import TYPE_CHECKING, Any, cast

from litestar import Litestar, Request
from litestar.datastructures import ResponseHeader
from litestar.di import Provide
from litestar.logging import LoggingConfig
from litestar.openapi import OpenAPIConfig
from litestar.plugins.prometheus import PrometheusConfig, PrometheusController
from litestar.plugins.pydantic import PydanticPlugin
from prometheus_client import REGISTRY

from engines.factory import create_backend
from engines.remote.context import engine_node_headers
from gateway.elevenlabs import elevenlabs_router
from gateway.http.auth.early_auth import credentials_before_body_middleware
from gateway.http.auth.security import provide_principal
from gateway.http.auth.service_token import service_token_middleware
from gateway.http.backpressure import send_timeout_middleware
from gateway.http.connection_refusals import REFUSAL_BODY
from gateway.http.errors import EXCEPTION_HANDLERS, refusal_body
from gateway.http.json_depth import json_depth_middleware
from gateway.http.routing_errors import routing_errors
from gateway.http.tracking import request_tracking_middleware
from gateway.native.jobs import jobs_router
from gateway.node.samples import EngineNodeController
from gateway.observability.metrics import PoolCollector, SpeechMetrics
from gateway.observability.tracing import Tracing
from gateway.openai.organization_usage import OrganizationUsageController
from gateway.openai.realtime.route import openai_realtime
from gateway.openai.speech import EngineNodeSpeechController, speech_routes
from gateway.realtime import realtime_speech
from gateway.routes.admin import AdminController
from gateway.routes.catalog import ModelsController, VoicesController, in_the_callers_shape
from gateway.routes.consents import VoiceConsentsController
from gateway.routes.docs import docs_assets_router, docs_render_plugin
from gateway.routes.health import HealthController
from gateway.routes.playground import playground_handlers
from gateway.routes.usage import UsageController
from gateway.services import open_state
from gateway.sessions.redaction import QueryTokenRedactor
from gateway.settings import Settings, load_settings
from gateway.speech.routing import ModelRouter
from gateway.state import gateway_state, installed
from lifecycle import naming
from storage.redis import pool_exhaustions

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from litestar.types import ASGIApp

    from engines.backend import EngineBackend
    from engines.settings import AnyEngineSettings
    from gateway.state import GatewayState
    from gateway.uploads import DecoderProcesses

__all__ = ["VERSION", "create_app", "openapi_document"]

logger = naming.logger()

VERSION = version("chattts-gateway")
"""The package's version (``pyproject.toml`` is its one source)."""


class MetricsController(PrometheusController):
    """``GET /metrics`` in Prometheus's text format; an operational endpoint, left out of the API document."""

    include_in_schema = False


# The metrics keep their former names and app_name label, which dashboards and alerts select on (lifecycle/naming.py).
_PROMETHEUS = PrometheusConfig(
    app_name="tts_gateway", prefix="tts_http", group_path=True, exclude=["^/metrics", "^/healthz", "^/readyz"]
)


def create_app(
    settings: Settings | None = None,
    *,
    pool_factory: Callable[[str, AnyEngineSettings], EngineBackend] | None = None,
    decoders: DecoderProcesses | None = None,
) -> Litestar:
    """Build the gateway; engines and services start in its lifespan and stop with it.

    Args:
        settings: Everything it is configured with (default: :func:`load_settings`).
        pool_factory: Builds each engine's backend (default: :func:`~engines.factory.create_backend`, worker
            processes, or HTTP for ``kind: openai``); the in-process tests run engines in threads behind the same
            interface.
        decoders: Upload decoder processes started and stopped by the caller (the in-process tests share one set
            across apps); by default each app starts its own.
    """
    settings = settings or load_settings()
    engine_node = settings.server.profile == "engine"
    tracing = Tracing(settings.tracing)
    return Litestar(
        route_handlers=[
            EngineNodeSpeechController if engine_node else speech_routes(settings.speech, settings.server),
            *([jobs_router(settings.jobs)] if settings.jobs.enabled and not engine_node else []),
            *([EngineNodeController] if engine_node else []),  # voice samples from the front: nodes only
            *([] if engine_node else [elevenlabs_router(settings)]),  # front gateways only
            ModelsController,
            VoicesController,
            VoiceConsentsController,
            UsageController,
            OrganizationUsageController,
            AdminController,
            HealthController,
            MetricsController,
            docs_assets_router(),
            *([realtime_speech, openai_realtime] if settings.realtime.enabled else []),
            *(playground_handlers() if settings.server.playground else []),
        ],
        lifespan=[
            _services(
                settings, pool_factory or partial(create_backend, worker_logging=_worker_logging(settings)), decoders
            )
        ],
        dependencies=_dependencies(),
        middleware=[
            request_tracking_middleware(_PROMETHEUS, tracing),
            send_timeout_middleware(settings.server.send_timeout_s),
            json_depth_middleware(settings.server.max_json_depth),
            *_engine_node_door(settings),
            credentials_before_body_middleware,
        ],
        # The routing's 404 and 405 in the words of the family whose routes the path falls under; under none, the
        # caller's (an ElevenLabs client's is ElevenLabs').
        exception_handlers=routing_errors(EXCEPTION_HANDLERS, unrouted=in_the_callers_shape),
        opt={REFUSAL_BODY: refusal_body},  # what the HTTP protocol refuses, in OpenAI's body unless a family says
        on_shutdown=[tracing.close],  # the last requests' spans go out too
        request_max_body_size=settings.server.max_body_bytes,
        # Litestar validates bodies with ``strict=False`` unless told ``True``, and an explicit ``False`` overrides the
        # fields' own ``strict=True`` (``speed: "2"`` would pass, where OpenAI refuses a string for a number); ``None``
        # leaves each field the strictness it declares.
        plugins=[PydanticPlugin(validate_strict=cast("bool", None))],
        # An engine node says so on every answer: its front gateways read it from the /readyz probe and only then
        # send it tenant contexts and custom voices' speakers (``engines/remote/context.py``).
        response_headers=[ResponseHeader(name=k, value=v) for k, v in engine_node_headers().items() if engine_node],
        openapi_config=_openapi_config(),
        logging_config=_logging_config(settings),
    )


def openapi_document() -> str:
    """The OpenAPI document of the app, as checked in under ``openapi/`` (stable key order, one trailing newline)."""
    schema = create_app(Settings()).openapi_schema.to_schema()
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def _engine_node_door(settings: Settings) -> list[Callable[[ASGIApp], ASGIApp]]:
    """On an engine node, the service token before every route but the probes
    (``gateway/http/auth/service_token.py``)."""
    token = settings.auth.service_token
    if settings.server.profile != "engine" or token is None:
        return []
    return [service_token_middleware(token.get_secret_value())]


def _services(
    settings: Settings,
    pool_factory: Callable[[str, AnyEngineSettings], EngineBackend],
    decoders: DecoderProcesses | None,
) -> Callable[[Litestar], Any]:
    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        # One exit stack for everything started here: whatever fails at start-up or at shutdown, what was started is
        # stopped (worker processes included), in the reverse order.
        async with AsyncExitStack() as stack:
            pools = await _start_pools(settings, pool_factory, stack)
            metrics = SpeechMetrics()
            stack.callback(metrics.unregister)
            router = ModelRouter(
                pools, settings.aliases, settings.failover, readiness=settings.readiness, fallbacks=metrics.fallbacks
            )
            state = await open_state(settings, router, metrics, stack, decoders=decoders)
            collector = PoolCollector(
                router,
                lambda: state.limiter.outage_count,
                lambda: pool_exhaustions(state.redis) if state.redis is not None else 0,
            )
            REGISTRY.register(collector)
            stack.callback(REGISTRY.unregister, collector)
            stack.enter_context(installed(app, state))  # the first thing stopped: no request sees a stopped service
            logger.info("engines starting: %s; aliases: %s", ", ".join(pools), settings.aliases)
            redactor = QueryTokenRedactor()
            uvicorn_errors = logging.getLogger("uvicorn.error")
            uvicorn_errors.addFilter(redactor)  # uvicorn logs WebSocket paths with their query
            stack.callback(uvicorn_errors.removeFilter, redactor)
            _freeze_what_start_up_made()
            stack.callback(gc.unfreeze)  # a process that starts apps again (the tests) must be able to collect them
            yield

    return lifespan


def _freeze_what_start_up_made() -> None:
    """Leave the objects of the start-up (the app, its routes and schemas: some 110,000) out of every later garbage
    collection: a full collection walked them all, a pause of the event loop many times longer than a request's own
    work, whatever the load (measured in BENCHMARKS.md's Redis section, the event-loop rows)."""
    gc.collect()
    gc.freeze()


async def _start_pools(
    settings: Settings, pool_factory: Callable[[str, AnyEngineSettings], EngineBackend], stack: AsyncExitStack
) -> dict[str, EngineBackend]:
    """Start every engine's pool, each stopped with ``stack`` (a pool that failed half way stops what it started)."""
    pools: dict[str, EngineBackend] = {}
    for name, engine in settings.engines.items():
        pool = pools[name] = pool_factory(name, engine)
        stack.push_async_callback(pool.stop)
        await pool.start()
    return pools


def _from_state(read: Callable[[GatewayState], object]) -> Provide:
    """A provider of one of the app's services, read from its typed state. Only HTTP handlers take these; each
    declares the type it gets (``gateway/http/auth/dependencies.py``)."""

    def provide(request: Request[Any, Any, Any]) -> object:
        return read(gateway_state(request.app))

    return Provide(provide, sync_to_thread=False)


def _dependencies() -> dict[str, Provide]:
    """Each service a handler may ask for, by parameter name (``gateway/http/auth/dependencies.py``)."""
    return {
        "router": _from_state(lambda state: state.router),
        "auth_store": _from_state(lambda state: state.auth_store),
        "usage": _from_state(lambda state: state.usage),
        "voices": _from_state(lambda state: state.voices),
        "consents": _from_state(lambda state: state.consents),
        "pronunciation": _from_state(lambda state: state.pronunciation),
        "storage": _from_state(lambda state: state.storage),
        "uploads": _from_state(lambda state: state.uploads),
        "principal": Provide(provide_principal),
    }


def _openapi_config() -> OpenAPIConfig:
    return OpenAPIConfig(
        title="chattts-gateway",
        version=VERSION,
        description="OpenAI-compatible speech gateway for ChatTTS.",
        path="/docs",
        render_plugins=[docs_render_plugin()],
    )


def _worker_logging(settings: Settings) -> dict[str, Any]:
    """What each engine worker process logs with: the same JSON lines, so that a failing job's traceback is one line
    too (workers are spawned fresh, without the server's logging)."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": "gateway.observability.logs.JsonLogFormatter"}},
        "handlers": {"json": {"class": "logging.StreamHandler", "formatter": "json"}},
        "root": {"level": settings.server.log_level.upper(), "handlers": ["json"]},
    }


def _logging_config(settings: Settings) -> LoggingConfig:
    """Every line one JSON object: the gateway's loggers, uvicorn's (``serve`` leaves its logging to this), Litestar's
    and whatever else reaches the root logger. Third-party libraries never log below info."""
    level = settings.server.log_level.upper()
    own = {"level": level, "handlers": ["json"], "propagate": False}
    return LoggingConfig(
        formatters={"json": {"()": "gateway.observability.logs.JsonLogFormatter"}},
        filters={
            "websocket_frames": {"()": "gateway.observability.logs.WebSocketFrameRedactor"},
            "logged_truncations": {"()": "gateway.observability.logs.LoggedTruncationFilter"},
        },
        handlers={"json": {"class": "logging.StreamHandler", "formatter": "json"}},
        loggers={
            naming.LOGGER_ROOT: own,
            "litestar": own,
            "uvicorn": own,
            "uvicorn.access": own,
            # websockets logs frames, their text included, on uvicorn's error logger at debug level
            "uvicorn.error": {"level": level, "filters": ["websocket_frames", "logged_truncations"], "propagate": True},
        },
        root={"level": "INFO" if level == "DEBUG" else level, "handlers": ["json"]},
        log_exceptions="debug",
    )
