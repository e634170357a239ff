"""From an engine's settings to the backend that serves it: worker processes for local kinds, HTTP for remote."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engines.pool import EnginePool
from engines.remote.backend import RemoteEngine
from engines.settings import RemoteEngineSettings

if TYPE_CHECKING:
    from engines.backend import EngineBackend
    from engines.settings import AnyEngineSettings

__all__ = ["create_backend"]


def create_backend(
    name: str,
    settings: AnyEngineSettings,
    *,
    worker_logging: dict[str, Any] | None = None,
) -> EngineBackend:
    """The backend of engine ``name``: a :class:`RemoteEngine` for ``kind: openai``, else an :class:`EnginePool`.

    Args:
        worker_logging: A :func:`logging.config.dictConfig` mapping each worker process applies first, so that what
            it logs has the server's format (the composition root passes its JSON logging).
    """
    if isinstance(settings, RemoteEngineSettings):
        return RemoteEngine(name, settings)
    return EnginePool(name, settings, worker_logging=worker_logging)
