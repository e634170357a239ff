"""``create_app(settings)``: the Litestar application, wired in a few ``_configure_*`` steps."""

from __future__ import annotations

import json
import logging
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from litestar import Litestar
from litestar.datastructures import State
from litestar.di import Provide
from litestar.logging import LoggingConfig
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import ScalarRenderPlugin
from litestar.plugins.prometheus import PrometheusConfig, PrometheusController
from litestar.plugins.pydantic import PydanticPlugin
from prometheus_client import REGISTRY

from engines.pool import EnginePool
from gateway.admin import AdminController
from gateway.backpressure import send_timeout_middleware
from gateway.catalog import ModelsController, VoicesController
from gateway.errors import EXCEPTION_HANDLERS
from gateway.health import HealthController
from gateway.observability import PoolCollector, SpeechMetrics, request_tracking_middleware
from gateway.playground import playground_handlers
from gateway.realtime import realtime_speech
from gateway.realtime.redaction import QueryTokenRedactor
from gateway.routing import ModelRouter
from gateway.security import provide_principal
from gateway.settings import Settings, load_settings
from gateway.speech import SpeechController
from gateway.synthesis import SpeechService
from gateway.tenancy import Tenancy, open_tenancy
from gateway.usage import UsageController

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

__all__ = ["create_app", "openapi_document"]

logger = logging.getLogger("tts_gateway")

VERSION = "0.1.0"
class MetricsController(PrometheusController):
    """``GET /metrics`` in Prometheus's text format; an operational endpoint, left out of the API document."""

    include_in_schema = False


_PROMETHEUS = PrometheusConfig(app_name="tts_gateway", prefix="tts_http", group_path=True,
                               exclude=["^/metrics", "^/healthz", "^/readyz"])


def create_app(settings: Settings | None = None) -> Litestar:
    """Build the gateway; engines and tenancy services start in its lifespan and stop with it."""
    settings = settings or load_settings()
    return Litestar(
        route_handlers=[SpeechController, ModelsController, VoicesController, UsageController, AdminController,
                        HealthController, MetricsController,
                        *([realtime_speech] if settings.realtime.enabled else []),
                        *(playground_handlers() if settings.server.playground else [])],
        lifespan=[_services(settings)],
        dependencies=_dependencies(),
        middleware=[request_tracking_middleware(_PROMETHEUS), send_timeout_middleware(settings.server.send_timeout_s)],
        exception_handlers=EXCEPTION_HANDLERS,
        request_max_body_size=settings.server.max_body_bytes,
        plugins=[PydanticPlugin()],
        openapi_config=_openapi_config(),
        logging_config=_logging_config(settings),
        state=State({"settings": settings}),
    )


def openapi_document() -> str:
    """The OpenAPI document of the app, as checked in under ``openapi/`` (stable key order, one trailing newline)."""
    schema = create_app(Settings()).openapi_schema.to_schema()
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def _services(settings: Settings) -> Callable[[Litestar], Any]:
    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        pools = {name: EnginePool(name, engine) for name, engine in settings.engines.items()}
        for pool in pools.values():
            await pool.start()
        router = ModelRouter(pools, settings.aliases)
        tenancy = await open_tenancy(settings)
        metrics = SpeechMetrics()
        collector = PoolCollector(router, lambda: tenancy.limiter.outage_count)
        REGISTRY.register(collector)
        app.state.update(router=router, tenancy=tenancy, speech=SpeechService(router, tenancy, metrics))
        logger.info("engines starting: %s; aliases: %s", ", ".join(pools), settings.aliases)
        redactor = QueryTokenRedactor()
        logging.getLogger("uvicorn.error").addFilter(redactor)  # uvicorn logs WebSocket paths with their query
        try:
            yield
        finally:
            logging.getLogger("uvicorn.error").removeFilter(redactor)
            REGISTRY.unregister(collector)
            metrics.unregister()
            await tenancy.close()
            for pool in pools.values():
                await pool.stop()

    return lifespan


def _dependencies() -> dict[str, Provide]:
    def router(state: State) -> ModelRouter:
        return state.router  # type: ignore[no-any-return]

    def tenancy(state: State) -> Tenancy:
        return state.tenancy  # type: ignore[no-any-return]

    return {
        "router": Provide(router, sync_to_thread=False),
        "tenancy": Provide(tenancy, sync_to_thread=False),
        "principal": Provide(provide_principal),
    }


def _openapi_config() -> OpenAPIConfig:
    return OpenAPIConfig(
        title="tts-gateway",
        version=VERSION,
        description="OpenAI-compatible speech gateway for ChatTTS.",
        path="/docs",
        render_plugins=[ScalarRenderPlugin()],
    )


def _logging_config(settings: Settings) -> LoggingConfig:
    level = settings.server.log_level.upper()
    return LoggingConfig(
        formatters={"json": {"()": "gateway.observability.JsonLogFormatter"}},
        handlers={"json": {"class": "logging.StreamHandler", "formatter": "json"}},
        loggers={"tts_gateway": {"level": level, "handlers": ["json"], "propagate": False}},
        log_exceptions="debug",
    )
