"""From an engine's settings to the backend that serves it: worker processes for local kinds, HTTP for remote."""

from __future__ import annotations

from typing import TYPE_CHECKING

from engines.pool import EnginePool
from engines.remote.backend import RemoteEngine
from engines.settings import RemoteEngineSettings

if TYPE_CHECKING:
    from engines.backend import EngineBackend
    from engines.settings import AnyEngineSettings

__all__ = ["create_backend"]


def create_backend(name: str, settings: AnyEngineSettings) -> EngineBackend:
    """The backend of engine ``name``: a :class:`RemoteEngine` for ``kind: openai``, else an :class:`EnginePool`."""
    if isinstance(settings, RemoteEngineSettings):
        return RemoteEngine(name, settings)
    return EnginePool(name, settings)
