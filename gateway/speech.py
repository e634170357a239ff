"""``POST /v1/audio/speech``: validate, then stream the reply back as audio or server-sent events."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from litestar import Controller, Request, post
from litestar.params import JSONBody
from litestar.response import ServerSentEvent, Stream
from litestar.status_codes import HTTP_200_OK, HTTP_415_UNSUPPORTED_MEDIA_TYPE

from gateway.audio.formats import CONTENT_TYPES
from gateway.dependencies import Caller, Speech
from gateway.errors import OpenAIError
from gateway.observability import RequestRecord, request_record
from gateway.schemas import SpeechRequest

if TYPE_CHECKING:
    from litestar.connection import ASGIConnection
    from litestar.handlers.base import BaseRouteHandler

__all__ = ["SpeechController"]


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
    async def create_speech(
        self, request: Request[Any, Any, Any], data: JSONBody[SpeechRequest], speech: Speech, principal: Caller,
    ) -> Stream:
        record = request_record(request.scope) or RequestRecord("-", "POST", self.path)
        reply = await speech.speak(principal, data, record)
        if data.stream_format == "sse":
            return ServerSentEvent(reply.sse_events(), headers=reply.headers)
        return Stream(reply.audio(), media_type=CONTENT_TYPES[data.response_format], headers=reply.headers)
