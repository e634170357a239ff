"""``POST /v1/audio/speech``: validate, open the synthesis, stream it back as audio or server-sent events."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from litestar import Controller, post
from litestar.response import ServerSentEvent, Stream
from litestar.status_codes import HTTP_200_OK, HTTP_415_UNSUPPORTED_MEDIA_TYPE

from gateway.audio.formats import CONTENT_TYPES
from gateway.errors import OpenAIError
from gateway.schemas import SpeechRequest
from gateway.synthesis import SpeechService

if TYPE_CHECKING:
    from litestar.connection import ASGIConnection
    from litestar.handlers.base import BaseRouteHandler

__all__ = ["SpeechController"]

ENGINE_HEADER = "x-engine"


def require_json(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """Reject bodies that do not say they are JSON, as OpenAI does, before they are parsed."""
    content_type = connection.headers.get("content-type", "")
    if content_type.split(";")[0].strip().lower() != "application/json":
        raise OpenAIError(HTTP_415_UNSUPPORTED_MEDIA_TYPE,
                          f"Unsupported content type {content_type or '(none)'!r}: send application/json.",
                          code="unsupported_media_type")


class SpeechController(Controller):
    path = "/v1/audio/speech"
    tags = ["Audio"]  # noqa: RUF012 - Litestar's declared type

    @post(status_code=HTTP_200_OK, operation_id="createSpeech", guards=[require_json],
          summary="Generates audio from the input text.")
    async def create_speech(self, data: SpeechRequest, speech: SpeechService) -> Stream:
        prepared = await speech.open(data)
        headers = {ENGINE_HEADER: prepared.engine}
        if data.stream_format == "sse":
            return ServerSentEvent(prepared.sse_events(), headers=headers)
        return Stream(prepared.audio(), media_type=CONTENT_TYPES[data.response_format], headers=headers)
