"""ChatTTS engine — registered so that configuration, routing and fallback work today.

The loader, voices, incremental streaming and batching come with the ChatTTS engine issue; until then the engine
reports itself unavailable and every alias falls back to the next engine in its list.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engines.base import EngineInfo, EngineUnavailableError

if TYPE_CHECKING:
    from collections.abc import Generator, Mapping

    import numpy as np
    import numpy.typing as npt

    from engines.base import CancelToken, SynthesisRequest

__all__ = ["ChatTTSEngine"]


class ChatTTSEngine:
    """Placeholder for the ChatTTS engine: always unavailable, with the reason shown in ``/readyz``."""

    def __init__(self, options: Mapping[str, object] | None = None) -> None:
        self.options = dict(options or {})

    def load(self) -> EngineInfo:
        raise EngineUnavailableError("the ChatTTS engine is not built yet in this version; aliases fall back")

    def synthesize(
        self, request: SynthesisRequest, cancel: CancelToken
    ) -> Generator[npt.NDArray[np.int16], None, None]:
        raise EngineUnavailableError("the ChatTTS engine is not built yet in this version")
