"""``create_app(settings)``: the Litestar application, wired in a few ``_configure_*`` steps."""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from litestar import Litestar
from litestar.datastructures import State
from litestar.di import Provide
from litestar.logging import LoggingConfig
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import ScalarRenderPlugin
from litestar.plugins.pydantic import PydanticPlugin

from engines.pool import EnginePool
from gateway.catalog import ModelsController, VoicesController
from gateway.errors import EXCEPTION_HANDLERS
from gateway.health import HealthController
from gateway.routing import ModelRouter
from gateway.settings import Settings, load_settings
from gateway.speech import SpeechController
from gateway.synthesis import SpeechService

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

__all__ = ["create_app"]

logger = logging.getLogger("tts_gateway")


def create_app(settings: Settings | None = None) -> Litestar:
    """Build the gateway; engines start in its lifespan and stop with it."""
    settings = settings or load_settings()
    return Litestar(
        route_handlers=[SpeechController, ModelsController, VoicesController, HealthController],
        lifespan=[_engine_pools(settings)],
        dependencies=_dependencies(),
        exception_handlers=EXCEPTION_HANDLERS,
        request_max_body_size=settings.server.max_body_bytes,
        plugins=[PydanticPlugin()],
        openapi_config=_openapi_config(),
        logging_config=_logging_config(settings),
        state=State({"settings": settings}),
    )


def _engine_pools(settings: Settings):  # type: ignore[no-untyped-def]
    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        pools = {name: EnginePool(name, engine) for name, engine in settings.engines.items()}
        for pool in pools.values():
            await pool.start()
        router = ModelRouter(pools, settings.aliases)
        app.state.router = router
        app.state.speech = SpeechService(router)
        logger.info("engines starting: %s; aliases: %s", ", ".join(pools), settings.aliases)
        try:
            yield
        finally:
            for pool in pools.values():
                await pool.stop()

    return lifespan


def _dependencies() -> dict[str, Provide]:
    def router(state: State) -> ModelRouter:
        return state.router  # type: ignore[no-any-return]

    def speech(state: State) -> SpeechService:
        return state.speech  # type: ignore[no-any-return]

    return {"router": Provide(router, sync_to_thread=False), "speech": Provide(speech, sync_to_thread=False)}


def _openapi_config() -> OpenAPIConfig:
    return OpenAPIConfig(
        title="tts-gateway",
        version="0.1.0",
        description="OpenAI-compatible speech gateway for ChatTTS.",
        path="/docs",
        render_plugins=[ScalarRenderPlugin()],
    )


def _logging_config(settings: Settings) -> LoggingConfig:
    level = settings.server.log_level.upper()
    return LoggingConfig(
        root={"level": level, "handlers": ["queue_listener"]},
        loggers={"tts_gateway": {"level": level, "propagate": True}},
        log_exceptions="debug",
    )
