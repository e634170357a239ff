"""Planning a request: may the tenant use the model, which engine speaks it, with which voice, at which speed."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from litestar.status_codes import HTTP_400_BAD_REQUEST, HTTP_403_FORBIDDEN, HTTP_404_NOT_FOUND

from engines.base import SynthesisRequest
from gateway.http.errors import OpenAIError, UnknownVoiceError
from gateway.schemas import EngineNodeSpeechRequest

if TYPE_CHECKING:
    from auth import Principal, Tenant
    from engines.backend import EngineBackend
    from engines.base import EngineInfo
    from gateway.schemas import SpeechRequest
    from gateway.speech.routing import ModelRouter
    from gateway.speech.voices import VoiceStore

__all__ = ["Planner", "SpeechPlan", "Voice"]


@dataclass(frozen=True, slots=True)
class Voice:
    engine_voice: str
    speaker: str | None
    identity: str
    """What the voice sounds like, for the cache key: a built-in name or the hash of a custom speaker."""


@dataclass(frozen=True, slots=True)
class SpeechPlan:
    """A request with its engine, voice and the engine's view of it settled."""

    tenant: str
    request: SpeechRequest
    pool: EngineBackend
    info: EngineInfo | None
    voice: Voice
    synthesis: SynthesisRequest
    tempo: float
    """The time-stretch left for the encoder: requested speed over the speed the engine renders natively."""

    def for_text(self, text: str) -> SynthesisRequest:
        """The same voice and settings speaking other text (a segment of a realtime session)."""
        return replace(self.synthesis, text=text)

    def for_engine(self, pool: EngineBackend) -> SpeechPlan | None:
        """The same request planned for another engine of its alias (its voices and native speeds differ), for the
        failover; ``None`` when that engine cannot speak it: a custom voice (it belongs to one engine), a voice the
        engine does not offer, or an engine that has not loaded yet."""
        info = pool.info
        if pool is self.pool:
            return self
        if self.voice.speaker is not None or info is None or not info.offers_voice(self.voice.engine_voice):
            return None
        synthesis, tempo = _engine_request(self.request, info, self.voice)
        return replace(self, pool=pool, info=info, synthesis=replace(synthesis, text=self.synthesis.text), tempo=tempo)


class Planner:
    """Settles the engine and voice of requests: the models a tenant may use, aliases, built-in and custom voices."""

    def __init__(self, router: ModelRouter, voices: VoiceStore) -> None:
        self.router = router
        self._voices = voices

    async def plan(self, principal: Principal, request: SpeechRequest) -> SpeechPlan:
        """Check that the tenant may use the model, and settle the engine and the voice.

        Raises:
            OpenAIError: a model the tenant may not use (403), unknown model (404) or voice (400, 404).
        """
        tenant = principal.tenant
        if not tenant.allows_model(request.model):
            raise OpenAIError(
                HTTP_403_FORBIDDEN,
                f"Your tenant may not use the model `{request.model}`.",
                param="model",
                code="model_not_allowed",
            )
        pool = self.router.resolve(request.model)
        info = pool.info
        voice = await self._resolve_voice(tenant, request, pool.name, info)
        synthesis, tempo = _engine_request(request, info, voice)
        return SpeechPlan(tenant.name, request, pool, info, voice, synthesis, tempo)

    async def _resolve_voice(
        self,
        tenant: Tenant,
        request: SpeechRequest,
        engine: str,
        info: EngineInfo | None,
    ) -> Voice:
        if isinstance(request, EngineNodeSpeechRequest) and request.speaker is not None:
            # An engine node: the front gateway resolved its tenant's custom voice. Used, never stored.
            return Voice(request.voice_id, request.speaker, hashlib.sha256(request.speaker.encode()).hexdigest())
        if isinstance(request.voice, str):
            if info is not None and info.offers_voice(request.voice):
                return Voice(request.voice, None, request.voice)  # built-in: no store round trip
            custom = await self._voices.find_by_name(tenant.name, request.voice)
            if custom is None:
                return Voice(request.voice, None, request.voice)
        else:
            custom = await self._voices.get(tenant.name, request.voice.id)
            if custom is None:
                raise UnknownVoiceError(
                    HTTP_404_NOT_FOUND,
                    f"Custom voice '{request.voice.id}' was not found.",
                    voice_id=request.voice.id,
                    param="voice",
                    code="voice_not_found",
                )
        if custom.model != engine:
            message = f"Custom voice '{custom.id}' belongs to model '{custom.model}', not to '{engine}'."
            raise OpenAIError(HTTP_400_BAD_REQUEST, message, param="voice", code="invalid_value")
        return Voice(custom.id, custom.speaker, custom.speaker_sha256)


def _engine_request(request: SpeechRequest, info: EngineInfo | None, voice: Voice) -> tuple[SynthesisRequest, float]:
    """The engine's view of the request, and the time-stretch left for the encoder to apply."""
    speed = native = request.speed
    if info is not None:
        low, high = info.speed_range
        native = min(max(speed, low), high)
        if voice.speaker is None and not info.offers_voice(voice.engine_voice):
            known = sorted({v.id for v in info.voices})
            raise UnknownVoiceError(
                HTTP_400_BAD_REQUEST,
                f"Voice '{voice.engine_voice}' is not available for model "
                f"'{request.model}'. Voices: {', '.join(known)}.",
                voice_id=voice.engine_voice,
                param="voice",
                code="invalid_value",
            )
    synthesis = SynthesisRequest(
        text=request.input,
        voice=voice.engine_voice,
        speed=native,
        instructions=request.instructions,
        speaker=voice.speaker,
    )
    return synthesis, speed / native
