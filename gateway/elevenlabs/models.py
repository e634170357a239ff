"""ElevenLabs' model list, which its SDK asks for on OpenAI's path (``GET /v1/models``).

The two APIs share the path, in different shapes (OpenAI's ``{"object": "list", "data": [...]}``, ElevenLabs' bare
array). OpenAI's stays the answer there; a request that carries ElevenLabs' ``xi-api-key`` header and no
``Authorization`` is an ElevenLabs client (its SDKs send only that header; OpenAI's always send ``Authorization``)
and gets ElevenLabs' shape (``gateway/routes/catalog.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.elevenlabs.wire import ElevenLabsModel
from gateway.http.auth.security import XI_API_KEY

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from gateway.speech.routing import ModelRouter

__all__ = ["elevenlabs_models", "is_elevenlabs_client"]


def is_elevenlabs_client(headers: Mapping[str, str]) -> bool:
    """Whether a request comes from an ElevenLabs client: ``xi-api-key`` without ``Authorization``."""
    return XI_API_KEY in headers and "authorization" not in headers


def elevenlabs_models(router: ModelRouter, names: Iterable[str]) -> list[ElevenLabsModel]:
    """ElevenLabs' entries for the engines and aliases ``names``."""
    return [ElevenLabsModel(model_id=name, name=name, description=_description(router, name)) for name in names]


def _description(router: ModelRouter, name: str) -> str:
    alias = router.aliases.get(name)
    if alias is None:
        return f"The {name} engine."
    return f"An alias of {', '.join(alias.engines)}{' (the first that can answer)' if alias.fallback else ''}."
