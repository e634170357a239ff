"""``/v1/models`` and ``/v1/audio/voices``: what the gateway can speak with, and each tenant's custom voices."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from litestar import Controller, Request, delete, get, post
from litestar.params import FromPath, JSONBody, Parameter
from litestar.status_codes import HTTP_201_CREATED, HTTP_400_BAD_REQUEST, HTTP_404_NOT_FOUND
from pydantic import BaseModel, ConfigDict, Field, model_validator

from engines.base import OPENAI_VOICES
from gateway.http.dependencies import Caller, Router, VoicesDep
from gateway.http.errors import OpenAIError, error_responses
from gateway.schemas import ModelList, ModelObject
from gateway.speech.voices import SEED_SPEAKER_PREFIX, CustomVoiceRecord, new_voice

if TYPE_CHECKING:
    from gateway.settings import VoicesSettings
    from gateway.speech.service import SpeechService

__all__ = ["CustomVoiceCreate", "ModelsController", "VoicesController"]

MAX_SPEAKER_CHARS = 16384


class CustomVoiceCreate(BaseModel):
    """``POST /v1/audio/voices``: a name, the engine, and a speaker embedding or a seed to derive one."""

    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, Field(min_length=1, max_length=64)]
    model: str = "chattts"
    """The engine the voice belongs to."""
    speaker: Annotated[str, Field(min_length=1, max_length=MAX_SPEAKER_CHARS)] | None = None
    """The engine's speaker embedding (ChatTTS: its ``spk_emb`` base16384 string)."""
    seed: Annotated[int, Field(ge=0, le=2**31 - 1)] | None = None
    """A seed the engine derives a speaker from, repeatably."""

    @model_validator(mode="after")
    def _one_speaker_source(self) -> CustomVoiceCreate:
        if (self.speaker is None) == (self.seed is None):
            raise ValueError("give exactly one of `speaker` and `seed`")
        return self


def _model_not_found(model: str) -> OpenAIError:
    return OpenAIError(
        HTTP_404_NOT_FOUND, f"The model `{model}` does not exist.", param="model", code="model_not_found"
    )


def _voice_not_found(voice_id: str) -> OpenAIError:
    # Another tenant's voice is "not found" too: its id must not leak.
    return OpenAIError(
        HTTP_404_NOT_FOUND, f"Custom voice '{voice_id}' was not found.", param="voice_id", code="voice_not_found"
    )


class ModelsController(Controller):
    path = "/v1/models"
    tags = ["Models"]  # noqa: RUF012 - Litestar's declared type

    @get(
        operation_id="listModels",
        summary="Engines and the aliases that route to them.",
        responses=error_responses(401, 503),
    )
    async def list_models(self, router: Router, principal: Caller) -> ModelList:
        names = [n for n in router.model_names() if principal.tenant.allows_model(n)]
        return ModelList(data=[ModelObject(id=name) for name in names])

    @get(
        "/{model:str}",
        operation_id="retrieveModel",
        summary="One engine or alias.",
        responses=error_responses(401, 404, 503),
    )
    async def retrieve_model(self, model: FromPath[str], router: Router, principal: Caller) -> ModelObject:
        if model not in router.model_names() or not principal.tenant.allows_model(model):
            raise _model_not_found(model)
        return ModelObject(id=model)


class VoicesController(Controller):
    path = "/v1/audio/voices"
    tags = ["Voices"]  # noqa: RUF012 - Litestar's declared type

    @get(
        operation_id="listVoices",
        summary="Built-in voices with the models that have them, and your custom voices.",
        responses=error_responses(400, 401, 404, 503),
    )
    async def list_voices(
        self,
        router: Router,
        voices: VoicesDep,
        principal: Caller,
        model: Annotated[str | None, Parameter(description="Only the voices of this model.")] = None,
    ) -> dict[str, Any]:
        models = [n for n in router.model_names() if principal.tenant.allows_model(n)]
        if model is not None:
            if model not in models:
                raise _model_not_found(model)
            models = [model]
        builtin = _builtin_voices(router, models)
        engines = {router.resolve(name).name for name in models}
        custom = [v.public() | {"custom": True} for v in await voices.list(principal.tenant.name) if v.model in engines]
        return {"object": "list", "data": builtin + custom}

    @get(
        "/{voice_id:str}",
        operation_id="retrieveVoice",
        summary="One of your custom voices.",
        responses=error_responses(401, 404, 503),
    )
    async def retrieve_voice(self, voice_id: FromPath[str], voices: VoicesDep, principal: Caller) -> dict[str, Any]:
        voice = await voices.get(principal.tenant.name, voice_id)
        if voice is None:
            raise _voice_not_found(voice_id)
        return voice.public() | {"custom": True}

    @post(
        status_code=HTTP_201_CREATED,
        operation_id="createVoice",
        summary="Create a custom voice for your tenant.",
        description="Counts as one request against your tenant's `requests_per_minute`.",
        responses=error_responses(400, 401, 404, 429, 503),
    )
    async def create_voice(
        self,
        request: Request[Any, Any, Any],
        data: JSONBody[CustomVoiceCreate],
        router: Router,
        voices: VoicesDep,
        principal: Caller,
    ) -> dict[str, Any]:
        limits: VoicesSettings = request.app.state.settings.voices
        _check_speaker_size(data, limits.max_speaker_chars)
        speech: SpeechService = request.app.state.speech
        # A voice is stored on every replica's behalf: it is a request like any other (429 over the tenant's limit).
        await speech.admission.admit(principal.tenant, 0)
        voice = await _new_custom_voice(data, router, voices, principal)
        if not await voices.add(voice, max_per_tenant=limits.max_per_tenant):
            raise OpenAIError(
                HTTP_400_BAD_REQUEST,
                f"Your tenant has {limits.max_per_tenant} custom voices, the most it may have; delete one first.",
                code="voice_limit_reached",
            )
        return voice.public() | {"custom": True}

    @delete(
        "/{voice_id:str}",
        status_code=200,
        operation_id="deleteVoice",
        summary="Delete one of your voices.",
        responses=error_responses(401, 404, 503),
    )
    async def delete_voice(self, voice_id: FromPath[str], voices: VoicesDep, principal: Caller) -> dict[str, Any]:
        if not await voices.delete(principal.tenant.name, voice_id):
            raise _voice_not_found(voice_id)
        return {"id": voice_id, "object": "voice.deleted", "deleted": True}


async def _new_custom_voice(
    data: JSONBody[CustomVoiceCreate],
    router: Router,
    voices: VoicesDep,
    principal: Caller,
) -> CustomVoiceRecord:
    tenant = principal.tenant.name
    if data.model not in router.pools or not principal.tenant.allows_model(data.model):
        raise _model_not_found(data.model)
    if data.name in OPENAI_VOICES or await voices.find_by_name(tenant, data.name) is not None:
        raise OpenAIError(
            HTTP_400_BAD_REQUEST, f"A voice named '{data.name}' already exists.", param="name", code="voice_exists"
        )
    speaker = data.speaker if data.speaker is not None else f"{SEED_SPEAKER_PREFIX}{data.seed}"
    return new_voice(tenant, data.name, data.model, speaker)


def _check_speaker_size(data: CustomVoiceCreate, max_chars: int) -> None:
    if data.speaker is not None and len(data.speaker) > max_chars:
        raise OpenAIError(
            HTTP_400_BAD_REQUEST,
            f"Invalid value for 'speaker': at most {max_chars} characters (got {len(data.speaker)}).",
            param="speaker",
            code="string_above_max_length",
        )


def _builtin_voices(router: Router, models: list[str]) -> list[dict[str, Any]]:
    by_voice: dict[str, dict[str, Any]] = {}
    for model in models:
        info = router.resolve(model).info
        for voice in info.voices if info is not None else ():
            entry = by_voice.setdefault(
                voice.id,
                {
                    "object": "voice",
                    "id": voice.id,
                    "name": voice.id,
                    "description": voice.description,
                    "models": [],
                    "custom": False,
                },
            )
            entry["models"].append(model)
    return list(by_voice.values())
