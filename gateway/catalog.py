"""``GET /v1/models`` and ``GET /v1/audio/voices``: what the gateway can speak with, in OpenAI's list shape."""

from __future__ import annotations

from litestar import Controller, get
from litestar.status_codes import HTTP_404_NOT_FOUND

from gateway.errors import OpenAIError
from gateway.routing import ModelRouter
from gateway.schemas import ModelList, ModelObject, VoiceList, VoiceObject

__all__ = ["ModelsController", "VoicesController"]


class ModelsController(Controller):
    path = "/v1/models"
    tags = ["Models"]  # noqa: RUF012 - Litestar's declared type

    @get(operation_id="listModels", summary="Engines and the aliases that route to them.")
    async def list_models(self, router: ModelRouter) -> ModelList:
        return ModelList(data=[ModelObject(id=name) for name in router.model_names()])

    @get("/{model:str}", operation_id="retrieveModel", summary="One engine or alias.")
    async def retrieve_model(self, model: str, router: ModelRouter) -> ModelObject:
        if model not in router.model_names():
            raise OpenAIError(HTTP_404_NOT_FOUND, f"The model `{model}` does not exist.", param="model",
                              code="model_not_found")
        return ModelObject(id=model)


class VoicesController(Controller):
    path = "/v1/audio/voices"
    tags = ["Audio"]  # noqa: RUF012 - Litestar's declared type

    @get(operation_id="listVoices", summary="The voices of each model (or of one, with ?model=).")
    async def list_voices(self, router: ModelRouter, model: str | None = None) -> list[VoiceList]:
        names = router.model_names() if model is None else [model]
        return [_voices_of(router, name) for name in names]


def _voices_of(router: ModelRouter, model: str) -> VoiceList:
    info = router.resolve(model).status().info
    voices = info.voices if info is not None else ()
    return VoiceList(model=model, data=[VoiceObject(id=v.id, name=v.id, description=v.description) for v in voices])
