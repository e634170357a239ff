"""``/v1/audio/voice_consents``: a tenant's consent recordings, as OpenAI's API has them.

A voice made from an audio sample (``POST /v1/audio/voices``) names one of these. The gateway decodes the recording,
bounds it and keeps a compact Ogg/Opus copy for audit; it does not check what is said in it (no speech recognition):
the operator answers for the consent, the gateway for keeping its evidence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from litestar import Controller, Request, delete, get, post
from litestar.openapi.spec import Operation, RequestBody
from litestar.params import FromPath, JSONBody, Parameter
from litestar.status_codes import HTTP_200_OK, HTTP_201_CREATED, HTTP_400_BAD_REQUEST, HTTP_404_NOT_FOUND
from pydantic import BaseModel, ConfigDict, Field

from gateway.audio.samples import MAX_RECORDING_BYTES, encode_for_audit
from gateway.http.auth.dependencies import Caller, ConsentsDep, UploadsDep, VoicesDep
from gateway.http.errors import OpenAIError, error_responses
from gateway.http.json_body import require_json
from gateway.routes._forms import FORM, decode_upload, form_body, in_audio_thread, open_form
from gateway.schemas import VoiceConsentDeleted, VoiceConsentList, VoiceConsentObject
from gateway.speech.consents import new_consent
from gateway.state import gateway_state

if TYPE_CHECKING:
    from gateway.speech.consents import ConsentRecord

__all__ = ["UPLOAD_BODY_BYTES", "VoiceConsentCreate", "VoiceConsentUpdate", "VoiceConsentsController", "cap_reached"]

UPLOAD_BODY_BYTES = MAX_RECORDING_BYTES + 64 * 1024
"""The largest body of an upload route: a 10 MiB recording, and room for the other fields and the form's framing."""
_RECORDING = {"recording": "the consent recording, at most 10 MiB, 1 to 30 s"}
# BCP 47 as clients send it: a 2-3 letter language, then subtags (en, en-US, zh-Hant-TW, es-419).
_LANGUAGE_TAG = r"^[A-Za-z]{2,3}(-[A-Za-z0-9]{1,8})*$"
ConsentName = Annotated[str, Field(min_length=1, max_length=128)]


class VoiceConsentCreate(BaseModel):
    """The text fields of ``POST /v1/audio/voice_consents`` (beside the ``recording`` file)."""

    model_config = ConfigDict(extra="forbid")

    name: ConsentName
    """The label of this consent recording."""
    language: Annotated[str, Field(min_length=2, max_length=35, pattern=_LANGUAGE_TAG)]
    """The BCP 47 tag of the consent phrase's language (``en-US``)."""


class VoiceConsentUpdate(BaseModel):
    """``POST /v1/audio/voice_consents/{consent_id}``: a new label (the recording never changes)."""

    model_config = ConfigDict(extra="forbid")

    name: ConsentName


@dataclass
class ConsentCreateOperation(Operation):
    """Declares the form the handler reads itself (``gateway/routes/_forms.py``)."""

    def __post_init__(self) -> None:
        self.request_body = RequestBody(required=True, content={FORM: form_body(VoiceConsentCreate, _RECORDING)})


def cap_reached(limit: int, kept: str, code: str) -> OpenAIError:
    """A tenant holds as many of what it keeps here (``kept``: consent recordings, custom voices) as it may."""
    return OpenAIError(
        HTTP_400_BAD_REQUEST, f"Your tenant has {limit} {kept}, the most it may have; delete one first.", code=code
    )


def _consent_limit_reached(limit: int) -> OpenAIError:
    return cap_reached(limit, "consent recordings", "consent_limit_reached")


def _not_found(consent_id: str) -> OpenAIError:
    # Another tenant's consent is "not found" too: its id must not leak.
    return OpenAIError(
        HTTP_404_NOT_FOUND, f"Consent recording '{consent_id}' was not found.", param="consent_id", code="not_found"
    )


def _found(consent: ConsentRecord | None, consent_id: str) -> ConsentRecord:
    """The tenant's consent recording ``consent_id`` as its store found it, else 404."""
    if consent is None:
        raise _not_found(consent_id)
    return consent


def _shown(consent: ConsentRecord) -> VoiceConsentObject:
    return VoiceConsentObject.model_validate(consent.public())


class VoiceConsentsController(Controller):
    path = "/v1/audio/voice_consents"
    tags = ["Voices"]  # noqa: RUF012 - Litestar's declared type

    @post(
        status_code=HTTP_201_CREATED,
        operation_id="createVoiceConsent",
        summary="Upload a consent recording (mp3, wav, ogg, aac, flac, webm or mp4; at most 10 MiB, 1 to 30 s).",
        description="Kept for audit as 16 kbit/s Ogg/Opus, not as uploaded. What is said in it is not checked. "
        "Counts as one request against your tenant's `requests_per_minute`.",
        operation_class=ConsentCreateOperation,
        request_max_body_size=UPLOAD_BODY_BYTES,
        responses=error_responses(400, 401, 413, 415, 429, 503),
    )
    async def create_consent(
        self, request: Request[Any, Any, Any], consents: ConsentsDep, uploads: UploadsDep, principal: Caller
    ) -> VoiceConsentObject:
        state = gateway_state(request.app)
        limits, admission = state.settings.voices, state.admission
        # Counted before the upload is read: a tenant over its limit costs the gateway no decoding.
        await admission.admit(principal.tenant, 0)
        upload = open_form(request, _RECORDING, uploads=uploads, tenant=principal.tenant, admission=admission)
        async with upload as (texts, files):
            form = VoiceConsentCreate.model_validate(texts)
            cap = limits.max_consents_per_tenant
            # An early answer, before the recording costs a decoding; the store's atomic add decides.
            if len((await consents.page(principal.tenant.name, after=None, limit=cap)).data) >= cap:
                raise _consent_limit_reached(cap)
            recording = await decode_upload(uploads, files.required("recording"), "recording")
        audit = await in_audio_thread(encode_for_audit, recording.pcm)
        consent = new_consent(principal.tenant.name, form.name, form.language, recording.duration_s)
        if not await consents.add(consent, audit, max_per_tenant=limits.max_consents_per_tenant):
            raise _consent_limit_reached(limits.max_consents_per_tenant)
        return _shown(consent)

    @get(
        operation_id="listVoiceConsents",
        summary="Your consent recordings, oldest first, a page at a time.",
        responses=error_responses(400, 401, 503),
    )
    async def list_consents(
        self,
        consents: ConsentsDep,
        principal: Caller,
        after: Annotated[str | None, Parameter(description="Start after this consent id.", max_length=256)] = None,
        limit: Annotated[int, Parameter(description="Consents per page.", ge=1, le=100)] = 20,
    ) -> VoiceConsentList:
        return VoiceConsentList.of_records(await consents.page(principal.tenant.name, after=after, limit=limit), _shown)

    @get(
        "/{consent_id:str}",
        operation_id="retrieveVoiceConsent",
        summary="One of your consent recordings.",
        responses=error_responses(401, 404, 503),
    )
    async def retrieve_consent(
        self, consent_id: FromPath[str], consents: ConsentsDep, principal: Caller
    ) -> VoiceConsentObject:
        return _shown(_found(await consents.get(principal.tenant.name, consent_id), consent_id))

    @post(
        "/{consent_id:str}",
        status_code=HTTP_200_OK,
        operation_id="updateVoiceConsent",
        summary="Rename one of your consent recordings.",
        before_request=require_json,
        responses=error_responses(400, 401, 404, 415, 503),
    )
    async def update_consent(
        self,
        consent_id: FromPath[str],
        data: JSONBody[VoiceConsentUpdate],
        consents: ConsentsDep,
        principal: Caller,
    ) -> VoiceConsentObject:
        return _shown(_found(await consents.rename(principal.tenant.name, consent_id, data.name), consent_id))

    @delete(
        "/{consent_id:str}",
        status_code=HTTP_200_OK,
        operation_id="deleteVoiceConsent",
        summary="Delete one of your consent recordings (once no voice of yours was made with it).",
        responses=error_responses(400, 401, 404, 503),
    )
    async def delete_consent(
        self, consent_id: FromPath[str], consents: ConsentsDep, voices: VoicesDep, principal: Caller
    ) -> VoiceConsentDeleted:
        tenant = principal.tenant.name
        _found(await consents.get(tenant, consent_id), consent_id)
        # The recording is the evidence for the voices made with it: it goes only after them.
        if using := [voice.id for voice in await voices.list(tenant) if voice.consent == consent_id]:
            raise OpenAIError(
                HTTP_400_BAD_REQUEST,
                f"Consent recording '{consent_id}' is the consent of your voices {', '.join(using)}; "
                "delete them first.",
                param="consent_id",
                code="consent_in_use",
            )
        if not await consents.delete(tenant, consent_id):
            raise _not_found(consent_id)
        return VoiceConsentDeleted(id=consent_id, deleted=True)
