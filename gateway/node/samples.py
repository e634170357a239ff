"""An engine node's routes for the voices of its front gateways: ``POST /v1/engine/speaker_from_sample`` makes a
voice's speaker from a sample, ``POST /v1/engine/check_speaker`` says whether its engine could speak with a speaker a
tenant gave (a speaker string or ``seed:N``).

Registered only on engine nodes (``server.profile: engine``): on a front gateway the paths do not exist. The caller
is the front (the node's service token, ``gateway/services.py``); for a sample, the front has decoded the tenant's
recording to mono 16-bit PCM and sends it in base64 with its transcript, and stores the speaker it gets back. The node
keeps nothing. The wire shapes are part of the two-tier extension (``engines/remote/context.py``).
"""

from __future__ import annotations

import base64
import binascii
import math
from typing import Annotated

from litestar import Controller, post
from litestar.params import JSONBody
from litestar.status_codes import HTTP_200_OK, HTTP_204_NO_CONTENT
from pydantic import BaseModel, ConfigDict, Field, field_validator

from engines.base import MAX_SPEAKER_CHARS
from engines.remote.context import SAMPLE_ROUTE, SPEAKER_CHECK_ROUTE
from engines.samples import MAX_SAMPLE_BYTES, MAX_TRANSCRIPT_CHARS
from gateway.http.auth.dependencies import Caller, Router
from gateway.http.errors import error_responses
from gateway.http.json_body import require_json

__all__ = ["EngineNodeController", "SpeakerCheckRequest", "SpeakerFromSample", "SpeakerFromSampleRequest"]

_MAX_PCM_BASE64 = 4 * math.ceil(MAX_SAMPLE_BYTES / 3)
# The largest sample in base64, its transcript (4 bytes a character at most in UTF-8) and the JSON around them: a
# front never sends more; this route alone takes more than ``server.max_body_bytes``.
_MAX_BODY_BYTES = _MAX_PCM_BASE64 + 4 * MAX_TRANSCRIPT_CHARS + 4096


class SpeakerFromSampleRequest(BaseModel):
    """A voice sample from the front gateway."""

    model_config = ConfigDict(extra="forbid")

    model: Annotated[str, Field(min_length=1, max_length=256)]
    """The node's engine (or alias) to make the speaker with."""
    transcript: Annotated[str, Field(min_length=1, max_length=MAX_TRANSCRIPT_CHARS)]
    """What is said in the sample, exactly."""
    sample_rate: Annotated[int, Field(ge=8000, le=192000)]
    pcm: Annotated[bytes, Field(min_length=2, max_length=MAX_SAMPLE_BYTES)]
    """The sample: base64 of mono signed 16-bit little-endian PCM."""

    @field_validator("pcm", mode="before")
    @classmethod
    def _from_base64(cls, value: object) -> bytes:
        if not isinstance(value, str) or len(value) > _MAX_PCM_BASE64:
            raise ValueError(f"base64 text of at most {MAX_SAMPLE_BYTES} bytes")
        try:
            return base64.b64decode(value, validate=True)
        except binascii.Error:
            raise ValueError("not base64") from None


class SpeakerFromSample(BaseModel):
    """The speaker the node's engine made: the front sends it back as ``x_tts_speaker`` for that voice."""

    speaker: str


class SpeakerCheckRequest(BaseModel):
    """A custom voice's speaker from the front gateway, to be checked before the front stores the voice."""

    model_config = ConfigDict(extra="forbid")

    model: Annotated[str, Field(min_length=1, max_length=256)]
    """The node's engine (or alias) the voice is for."""
    speaker: Annotated[str, Field(min_length=1, max_length=MAX_SPEAKER_CHARS)]
    """The engine's speaker string, or ``seed:N``."""


class EngineNodeController(Controller):
    """The engine node's routes for its front gateways (beside ``POST /v1/audio/speech``)."""

    path = "/v1"
    tags = ["Engine node"]  # noqa: RUF012 - Litestar's declared type

    @post(
        SAMPLE_ROUTE,
        status_code=HTTP_200_OK,
        operation_id="createSpeakerFromSample",
        summary="Makes an engine speaker from a voice sample (engine nodes only; the front gateway's service token).",
        before_request=require_json,
        request_max_body_size=_MAX_BODY_BYTES,
        responses=error_responses(400, 401, 404, 413, 415, 503),
    )
    async def speaker_from_sample(
        self, data: JSONBody[SpeakerFromSampleRequest], router: Router, principal: Caller
    ) -> SpeakerFromSample:
        del principal  # asked for its check alone: only the service token admits on an engine node
        backend = router.resolve(data.model)
        speaker = await backend.speaker_from_sample(data.pcm, data.sample_rate, data.transcript)
        return SpeakerFromSample(speaker=speaker)

    @post(
        SPEAKER_CHECK_ROUTE,
        status_code=HTTP_204_NO_CONTENT,
        operation_id="checkSpeaker",
        summary="Checks that the engine could speak with a custom voice's speaker (engine nodes only; the front "
        "gateway's service token).",
        before_request=require_json,
        responses=error_responses(400, 401, 404, 415, 503),
    )
    async def check_speaker(self, data: JSONBody[SpeakerCheckRequest], router: Router, principal: Caller) -> None:
        del principal  # asked for its check alone: only the service token admits on an engine node
        await router.resolve(data.model).check_speaker(data.speaker)
