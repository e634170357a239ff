"""``/v1/models`` and ``/v1/audio/voices``: what the gateway can speak with, and each tenant's custom voices.

``POST /v1/audio/voices`` takes two bodies on one route: OpenAI's form (an audio sample and a consent recording,
``gateway/routes/consents.py``), from which the engine makes the voice's speaker, and this gateway's JSON (an engine
speaker or a seed). Its handler reads the body itself and branches on the content type (``gateway/routes/_forms.py``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

from litestar import Controller, Request, Response, delete, get, post
from litestar.openapi.spec import Operation, RequestBody
from litestar.params import FromPath, Parameter
from litestar.status_codes import (
    HTTP_201_CREATED,
    HTTP_400_BAD_REQUEST,
    HTTP_404_NOT_FOUND,
    HTTP_413_REQUEST_ENTITY_TOO_LARGE,
    HTTP_415_UNSUPPORTED_MEDIA_TYPE,
)
from pydantic import BaseModel, ConfigDict, Field, model_validator

from engines.base import MAX_SPEAKER_CHARS, OPENAI_VOICES
from gateway.audio.samples import SAMPLE_RATE
from gateway.elevenlabs.errors import EXCEPTION_HANDLERS
from gateway.elevenlabs.errors import error_response as elevenlabs_error_response
from gateway.elevenlabs.models import elevenlabs_models, is_elevenlabs_client
from gateway.elevenlabs.wire import ElevenLabsModel
from gateway.http.auth.dependencies import Caller, ConsentsDep, Router, UploadsDep, VoicesDep
from gateway.http.errors import OpenAIError, error_responses
from gateway.http.errors import error_response as openai_error_response
from gateway.routes._forms import FORM, JSON, content_type_of, decode_upload, form_body, json_body, open_form
from gateway.routes.consents import UPLOAD_BODY_BYTES, cap_reached
from gateway.schemas import BuiltInVoice, ModelEngine, ModelList, ModelObject, VoiceDeleted, VoiceList, VoiceObject
from gateway.speech.voices import SEED_SPEAKER_PREFIX, CustomVoiceRecord, VoiceNameTakenError, new_voice
from gateway.state import gateway_state
from storage import MAX_PAGE

if TYPE_CHECKING:
    from engines.backend import EngineBackend

__all__ = ["CustomVoiceCreate", "ModelsController", "VoiceSampleCreate", "VoicesController", "in_the_callers_shape"]

MAX_TRANSCRIPT_CHARS = 4096
_SAMPLE = {"audio_sample": "the voice sample, at most 10 MiB, 1 to 30 s"}
VoiceName = Annotated[str, Field(min_length=1, max_length=64)]


class CustomVoiceCreate(BaseModel):
    """``POST /v1/audio/voices``: a name, the engine, and a speaker embedding or a seed to derive one."""

    model_config = ConfigDict(extra="forbid")

    name: VoiceName
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


class VoiceSampleCreate(BaseModel):
    """The text fields of OpenAI's form for ``POST /v1/audio/voices`` (beside the ``audio_sample`` file), and this
    gateway's ``transcript`` and ``model``."""

    model_config = ConfigDict(extra="forbid")

    name: VoiceName
    consent: Annotated[str, Field(min_length=1, max_length=256)]
    """The consent recording of the voice's speaker (``cons_...``, ``POST /v1/audio/voice_consents``)."""
    type: Literal["audio_sample"] = "audio_sample"
    """How the voice is made; ``prompt`` (voice design from a text prompt) is refused."""
    transcript: Annotated[str, Field(max_length=MAX_TRANSCRIPT_CHARS)] | None = None
    """What is said in the sample, exactly (an extension: ChatTTS conditions on the sample and its transcript, and
    refuses a sample without one)."""
    model: Annotated[str, Field(min_length=1, max_length=256)] = "chattts"
    """The engine (or an alias of it) that makes the voice and speaks with it (an extension)."""


@dataclass
class VoiceCreateOperation(Operation):
    """Declares both bodies the handler reads itself: OpenAI's form and the gateway's JSON."""

    def __post_init__(self) -> None:
        content = {FORM: form_body(VoiceSampleCreate, _SAMPLE), JSON: json_body(CustomVoiceCreate)}
        self.request_body = RequestBody(required=True, content=content)


def _model_not_found(model: str) -> OpenAIError:
    return OpenAIError(
        HTTP_404_NOT_FOUND, f"The model `{model}` does not exist.", param="model", code="model_not_found"
    )


def _voice_limit_reached(limit: int) -> OpenAIError:
    return cap_reached(limit, "custom voices", "voice_limit_reached")


def _voice_not_found(voice_id: str) -> OpenAIError:
    # Another tenant's voice is "not found" too: its id must not leak.
    return OpenAIError(
        HTTP_404_NOT_FOUND, f"Custom voice '{voice_id}' was not found.", param="voice_id", code="voice_not_found"
    )


def in_the_callers_shape(request: Request[Any, Any, Any], exc: Exception) -> Response[dict[str, Any]]:
    """``/v1/models`` answers both families: an ElevenLabs client (``xi-api-key``) hears its refusals (a wrong key, a
    limit) in ElevenLabs' shape, as it hears the list; so does the app's 404 for a path under no route."""
    if is_elevenlabs_client(request.headers):
        return elevenlabs_error_response(request, exc)
    return openai_error_response(request, exc)


class ModelsController(Controller):
    path = "/v1/models"
    tags = ["Models"]  # noqa: RUF012 - Litestar's declared type
    exception_handlers = dict.fromkeys(EXCEPTION_HANDLERS, in_the_callers_shape)

    @get(
        operation_id="listModels",
        summary="Engines and the aliases that route to them.",
        description="In OpenAI's list shape; a request with ElevenLabs' `xi-api-key` header and no `Authorization` "
        "(an ElevenLabs client) gets ElevenLabs' model list (an array) instead.",
        responses=error_responses(401, 503),
    )
    async def list_models(
        self, request: Request[Any, Any, Any], router: Router, principal: Caller
    ) -> ModelList | list[ElevenLabsModel]:
        names = router.model_names_for(principal.tenant)
        if is_elevenlabs_client(request.headers):
            return elevenlabs_models(router, names)
        return ModelList(data=[_model(router, name) for name in names])

    @get(
        "/{model:str}",
        operation_id="retrieveModel",
        summary="One engine or alias.",
        responses=error_responses(401, 404, 503),
    )
    async def retrieve_model(self, model: FromPath[str], router: Router, principal: Caller) -> ModelObject:
        if model not in router.model_names() or not principal.tenant.allows_model(model):
            raise _model_not_found(model)
        return _model(router, model)


def _model(router: Router, name: str) -> ModelObject:
    """``name`` in OpenAI's shape, with the engine that would serve it now (its figures once it has loaded)."""
    pool = router.resolve(name)
    if (info := pool.info) is None:
        return ModelObject(id=name)
    return ModelObject(id=name, engine=ModelEngine(name=pool.name, max_batch=None if info.remote else info.max_batch))


class VoicesController(Controller):
    path = "/v1/audio/voices"
    tags = ["Voices"]  # noqa: RUF012 - Litestar's declared type

    @get(
        operation_id="listVoices",
        summary="Built-in voices with the models that have them, and your custom voices.",
        responses=error_responses(400, 401, 404, 503),
    )
    async def list_voices(  # noqa: PLR0917 - Litestar's parameters
        self,
        router: Router,
        voices: VoicesDep,
        principal: Caller,
        model: Annotated[str | None, Parameter(description="Only the voices of this model.")] = None,
        after: Annotated[
            str | None,
            Parameter(description="Start after this custom voice id (a page's `last_id`).", max_length=256),
        ] = None,
        limit: Annotated[int, Parameter(description="Custom voices per page.", ge=1, le=MAX_PAGE)] = MAX_PAGE,
    ) -> VoiceList:
        models = router.model_names_for(principal.tenant)
        if model is not None:
            if model not in models:
                raise _model_not_found(model)
            models = [model]
        # The built-in voices are few and come whole on the first page; the tenant's own voices come a page at a time.
        builtin = router.builtin_voices(models) if after is None else []
        engines = {router.resolve(name).name for name in models}
        page = await voices.page(principal.tenant.name, after=after, limit=limit)
        custom = [_shown(voice) for voice in page.data if voice.model in engines]
        data: list[BuiltInVoice | VoiceObject] = [*builtin, *custom]
        return VoiceList(
            data=data,
            first_id=data[0].id if data else None,
            last_id=page.data[-1].id if page.data else None,
            has_more=page.has_more,
        )

    @get(
        "/{voice_id:str}",
        operation_id="retrieveVoice",
        summary="One of your custom voices.",
        responses=error_responses(401, 404, 503),
    )
    async def retrieve_voice(self, voice_id: FromPath[str], voices: VoicesDep, principal: Caller) -> VoiceObject:
        voice = await voices.get(principal.tenant.name, voice_id)
        if voice is None:
            raise _voice_not_found(voice_id)
        return _shown(voice)

    @post(
        status_code=HTTP_201_CREATED,
        operation_id="createVoice",
        summary="Create a custom voice for your tenant: from an audio sample and a consent (OpenAI's form), or from "
        "an engine speaker or a seed (JSON).",
        description="The form (`multipart/form-data`) takes OpenAI's `name`, `audio_sample`, `consent` and `type` "
        "(`audio_sample`; `prompt` is refused), and this gateway's `transcript` (what is said in the sample, "
        "exactly: ChatTTS needs it) and `model` (default `chattts`). The engine makes the voice's speaker from the "
        "sample; the sample itself is not kept. Counts as one request against your tenant's `requests_per_minute`.",
        operation_class=VoiceCreateOperation,
        request_max_body_size=UPLOAD_BODY_BYTES,
        responses=error_responses(400, 401, 404, 413, 415, 429, 503),
    )
    async def create_voice(  # noqa: PLR0917 - Litestar's parameters
        self,
        request: Request[Any, Any, Any],
        router: Router,
        voices: VoicesDep,
        consents: ConsentsDep,
        uploads: UploadsDep,
        principal: Caller,
    ) -> VoiceObject:
        state = gateway_state(request.app)
        limits = state.settings.voices
        # A voice is stored on every replica's behalf: it is a request like any other (429 over the tenant's limit),
        # counted before the body is read so that a tenant over its limit costs no upload or decoding.
        await state.admission.admit(principal.tenant, 0)
        if content_type_of(request) == FORM:
            voice = await _voice_from_sample(
                request, router, voices=voices, consents=consents, uploads=uploads, principal=principal
            )
        else:
            voice = await _voice_from_json(request, router, voices, principal)
        try:
            added = await voices.add(voice, max_per_tenant=limits.max_per_tenant)
        except VoiceNameTakenError:  # taken since the early check, by a request on any replica
            raise _name_taken(voice.name) from None
        if not added:
            raise _voice_limit_reached(limits.max_per_tenant)
        return _shown(voice)

    @delete(
        "/{voice_id:str}",
        status_code=200,
        operation_id="deleteVoice",
        summary="Delete one of your voices.",
        responses=error_responses(401, 404, 503),
    )
    async def delete_voice(self, voice_id: FromPath[str], voices: VoicesDep, principal: Caller) -> VoiceDeleted:
        if not await voices.delete(principal.tenant.name, voice_id):
            raise _voice_not_found(voice_id)
        return VoiceDeleted(id=voice_id, deleted=True)


def _shown(voice: CustomVoiceRecord) -> VoiceObject:
    return VoiceObject.model_validate(voice.public())


async def _voice_from_json(
    request: Request[Any, Any, Any], router: Router, voices: VoicesDep, principal: Caller
) -> CustomVoiceRecord:
    """Today's JSON form: an engine speaker or a seed."""
    if content_type_of(request) != JSON:
        content_type = request.headers.get("content-type", "")
        raise OpenAIError(
            HTTP_415_UNSUPPORTED_MEDIA_TYPE,
            f"Unsupported content type {content_type or '(none)'!r}: send application/json or multipart/form-data.",
            code="unsupported_media_type",
        )
    settings = gateway_state(request.app).settings
    body = await _json_body(request, settings.server.max_body_bytes)
    _refuse_prompt_voices(body)
    data = CustomVoiceCreate.model_validate(body)
    _check_speaker_size(data.speaker, settings.voices.max_speaker_chars)
    engine = _engine_of(router, principal, data.model, by_alias=False)
    await _check_name_free(voices, principal.tenant.name, data.name)
    speaker = data.speaker if data.speaker is not None else f"{SEED_SPEAKER_PREFIX}{data.seed}"
    # A speaker the engine could never speak with is refused now (400 naming `speaker`, or `model` for an engine that
    # takes no custom voices), not stored to fail on every later use.
    await engine.check_speaker(speaker)
    return new_voice(principal.tenant.name, data.name, engine.name, speaker)


async def _json_body(request: Request[Any, Any, Any], max_bytes: int) -> Any:
    """The decoded JSON body, held to ``server.max_body_bytes`` (the route itself takes uploads of 10 MiB)."""
    if (request.content_length or 0) > max_bytes or len(body := await request.body()) > max_bytes:
        raise OpenAIError(
            HTTP_413_REQUEST_ENTITY_TOO_LARGE, f"A JSON body may be at most {max_bytes} bytes.", code="body_too_large"
        )
    try:
        return json.loads(body)
    except ValueError:  # UnicodeDecodeError included
        raise OpenAIError(HTTP_400_BAD_REQUEST, "The body is not valid JSON.", code="invalid_json") from None


async def _voice_from_sample(
    request: Request[Any, Any, Any],
    router: Router,
    *,
    voices: VoicesDep,
    consents: ConsentsDep,
    uploads: UploadsDep,
    principal: Caller,
) -> CustomVoiceRecord:
    """OpenAI's form: the engine makes the speaker from the sample, with the tenant's consent."""
    state = gateway_state(request.app)
    upload = open_form(request, _SAMPLE, uploads=uploads, tenant=principal.tenant, admission=state.admission)
    async with upload as (texts, files):
        _refuse_prompt_voices(texts)
        form = VoiceSampleCreate.model_validate(texts)
        settings = state.settings
        backend = await _sample_engine(
            form, router, principal, voices=voices, consents=consents, max_voices=settings.voices.max_per_tenant
        )
        sample = await decode_upload(uploads, files.required("audio_sample"), "audio_sample")
    # The engine bounds the samples it takes (ChatTTS: a speaker prompt within MAX_SPEAKER_CHARS); a tighter
    # ``voices.max_speaker_chars`` is the gateway's own.
    speaker = await backend.speaker_from_sample(sample.pcm, SAMPLE_RATE, form.transcript or "")
    if len(speaker) > (limit := settings.voices.max_speaker_chars):
        raise OpenAIError(
            HTTP_400_BAD_REQUEST,
            f"The speaker made from this sample has {len(speaker)} characters, more than the {limit} allowed; "
            "send a shorter sample.",
            param="audio_sample",
            code="audio_too_long",
        )
    return new_voice(principal.tenant.name, form.name, backend.name, speaker, type="audio_sample", consent=form.consent)


async def _sample_engine(
    form: VoiceSampleCreate,
    router: Router,
    principal: Caller,
    *,
    voices: VoicesDep,
    consents: ConsentsDep,
    max_voices: int,
) -> EngineBackend:
    """The engine that will make the voice, once what is refused before decoding is refused: an unknown model, one
    that cannot clone, a tenant at its cap, a name taken, a consent the tenant does not have."""
    tenant = principal.tenant.name
    backend = _engine_of(router, principal, form.model, by_alias=True)
    if backend.info is not None and not backend.info.clones_voices:
        raise OpenAIError(
            HTTP_400_BAD_REQUEST,
            f"Model '{form.model}' cannot make a voice from an audio sample; use a model that can (chattts).",
            param="model",
            code="voice_cloning_unsupported",
        )
    existing = await voices.list(tenant)
    # An early answer, before the sample costs a decoding and an engine pass; the store's atomic add decides.
    if len(existing) >= max_voices:
        raise _voice_limit_reached(max_voices)
    if form.name in OPENAI_VOICES or any(voice.name == form.name for voice in existing):
        raise _name_taken(form.name)
    if await consents.get(tenant, form.consent) is None:
        raise OpenAIError(
            HTTP_404_NOT_FOUND,
            f"Consent recording '{form.consent}' was not found.",
            param="consent",
            code="consent_not_found",
        )
    return backend


def _refuse_prompt_voices(body: object) -> None:
    if isinstance(body, dict) and body.get("type") == "prompt":
        raise OpenAIError(
            HTTP_400_BAD_REQUEST,
            "Voices designed from a text prompt (type 'prompt') are not supported: no engine of this gateway can "
            "honour them. Make a voice from an audio sample (type 'audio_sample').",
            param="type",
            code="unsupported_value",
        )


def _engine_of(router: Router, principal: Caller, model: str, *, by_alias: bool) -> EngineBackend:
    """The engine a voice will belong to: an engine by its name, or (``by_alias``) the engine an alias serves with."""
    known = router.model_names() if by_alias else list(router.pools)
    if model not in known or not principal.tenant.allows_model(model):
        raise _model_not_found(model)
    return router.resolve(model)


async def _check_name_free(voices: VoicesDep, tenant: str, name: str) -> None:
    if name in OPENAI_VOICES or await voices.find_by_name(tenant, name) is not None:
        raise _name_taken(name)


def _name_taken(name: str) -> OpenAIError:
    return OpenAIError(
        HTTP_400_BAD_REQUEST, f"A voice named '{name}' already exists.", param="name", code="voice_exists"
    )


def _check_speaker_size(speaker: str | None, max_chars: int) -> None:
    if speaker is not None and len(speaker) > max_chars:
        raise OpenAIError(
            HTTP_400_BAD_REQUEST,
            f"Invalid value for 'speaker': at most {max_chars} characters (got {len(speaker)}).",
            param="speaker",
            code="string_above_max_length",
        )
