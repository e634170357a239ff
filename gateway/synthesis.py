"""From a validated :class:`SpeechRequest` to encoded audio leaving as the engine speaks.

:meth:`SpeechService.open` waits for the engine's first PCM chunk before the response starts, so that a request
that fails early gets a clean HTTP error; after that the audio streams and a failure can only end the stream.
"""

from __future__ import annotations

import base64
import json
import logging
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING

from litestar.status_codes import HTTP_400_BAD_REQUEST

from engines.base import SynthesisRequest
from gateway.audio import open_encoder
from gateway.errors import OpenAIError
from gateway.schemas import SpeechUsage

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from engines.base import EngineInfo
    from engines.pool import SynthesisStream
    from gateway.routing import ModelRouter
    from gateway.schemas import SpeechRequest

__all__ = ["PreparedSpeech", "SpeechService"]

logger = logging.getLogger("tts_gateway.speech")

_OUTPUT_FRAMES_PER_SECOND = 50  # usage counts output audio in 20 ms frames


class PreparedSpeech:
    """A synthesis that has produced its first audio; iterate :meth:`audio` or :meth:`sse_events` exactly once."""

    def __init__(
        self, *, request: SpeechRequest, engine: str, tempo: float, pcm: SynthesisStream, first: bytes,
        resources: AsyncExitStack,
    ) -> None:
        self.request = request
        self.engine = engine
        self._tempo = tempo
        self._pcm = pcm
        self._first = first
        self._resources = resources
        self.samples = 0

    async def audio(self) -> AsyncIterator[bytes]:
        """The encoded audio, chunk by chunk; leaving early (client gone) cancels the synthesis."""
        async with self._resources:
            encoder = open_encoder(self.request.response_format, self._pcm.sample_rate, self._tempo)
            async for pcm in self._pcm_chunks():
                if data := encoder.encode(pcm):
                    yield data
            if data := encoder.finish():
                yield data

    async def sse_events(self) -> AsyncIterator[str]:
        """``speech.audio.delta`` events with base64 audio, then ``speech.audio.done`` with usage."""
        async for data in self.audio():
            yield json.dumps({"type": "speech.audio.delta", "audio": base64.b64encode(data).decode("ascii")})
        yield json.dumps({"type": "speech.audio.done", "usage": self.usage().model_dump()})

    def usage(self) -> SpeechUsage:
        audio_seconds = self.samples / self._pcm.sample_rate / self._tempo
        output = round(audio_seconds * _OUTPUT_FRAMES_PER_SECOND)
        characters = len(self.request.input)
        return SpeechUsage(input_tokens=characters, output_tokens=output, total_tokens=characters + output)

    async def _pcm_chunks(self) -> AsyncIterator[bytes]:
        chunk = self._first
        while chunk:
            self.samples += len(chunk) // 2
            yield chunk
            chunk = await anext(self._pcm, b"")


class SpeechService:
    """Routes a request to an engine, opens the synthesis and hands back audio that streams."""

    def __init__(self, router: ModelRouter) -> None:
        self.router = router

    async def open(self, request: SpeechRequest) -> PreparedSpeech:
        """Start synthesizing ``request``; returns once the engine produced its first audio.

        Raises:
            OpenAIError: unknown model (404) or a voice the engine does not have (400).
            EngineNotReadyError, EngineOverloadedError, SynthesisFailedError: the engine cannot serve it now.
        """
        pool = self.router.resolve(request.model)
        # info is None until a worker has loaded; the engine then checks the voice itself.
        synthesis, tempo = _engine_request(request, pool.status().info)
        resources = AsyncExitStack()
        try:
            pcm = await resources.enter_async_context(pool.open_stream(synthesis))
            first = await anext(pcm, b"")
        except BaseException:
            await resources.aclose()
            raise
        return PreparedSpeech(request=request, engine=pool.name, tempo=tempo, pcm=pcm, first=first, resources=resources)


def _engine_request(request: SpeechRequest, info: EngineInfo | None) -> tuple[SynthesisRequest, float]:
    """The engine's view of the request, and the time-stretch left for the encoder to apply."""
    speed = request.speed
    native = speed
    if info is not None:
        low, high = info.speed_range
        native = min(max(speed, low), high)
        voices = {voice.id for voice in info.voices}
        if isinstance(request.voice, str) and request.voice not in voices:
            raise OpenAIError(HTTP_400_BAD_REQUEST, f"Voice '{request.voice}' is not available for model "
                              f"'{request.model}'. Voices: {', '.join(sorted(voices))}.", param="voice",
                              code="invalid_value")
    if not isinstance(request.voice, str):
        raise OpenAIError(HTTP_400_BAD_REQUEST, f"Custom voice '{request.voice.id}' was not found.", param="voice",
                          code="voice_not_found")
    synthesis = SynthesisRequest(text=request.input, voice=request.voice, speed=native,
                                 instructions=request.instructions)
    return synthesis, speed / native
