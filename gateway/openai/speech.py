"""``POST /v1/audio/speech``: validate, then stream the reply back as audio or server-sent events."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from litestar import Controller, Request, Response, Router, post
from litestar.openapi.spec import OpenAPIMediaType, OpenAPIResponse, OpenAPIType, Operation, Schema
from litestar.params import JSONBody  # noqa: TC002 - Litestar reads the hints of handlers at runtime
from litestar.status_codes import HTTP_200_OK

from engines.remote.context import TIMESTAMPS_HEADER
from gateway.audio.formats import CONTENT_TYPES
from gateway.http.auth.dependencies import Caller  # noqa: TC001 - read at runtime, as JSONBody
from gateway.http.disconnect import unless_client_leaves
from gateway.http.errors import error_responses
from gateway.http.json_body import require_json
from gateway.http.released import ReleasedResponse, ReleasedServerSentEvent, ReleasedStream
from gateway.http.reply_headers import reply_headers
from gateway.http.request_record import http_record
from gateway.openai.speech_events import sse_events
from gateway.schemas import (
    MAX_INPUT_CHARS,
    EngineNodeSpeechRequest,
    SpeechRequest,
)
from gateway.state import gateway_state
from gateway.text import Markup

if TYPE_CHECKING:
    from auth import Principal
    from gateway.settings import ServerSettings, SpeechSettings

__all__ = ["EngineNodeSpeechController", "SpeechController", "speech_routes"]


_AUDIO_SCHEMA = Schema(type=OpenAPIType.STRING, format="binary")  # type: ignore[arg-type]
_EVENT_SCHEMA = Schema(
    type=OpenAPIType.STRING,
    description="speech.audio.delta events, then speech.audio.done; between them this gateway's extension "
    "speech.audio.timestamps events (word and character times, README: Use it)",
)


@dataclass
class SpeechOperation(Operation):
    """Declares the audio the route really sends: one content type per format, or server-sent events."""

    def __post_init__(self) -> None:
        content = {media_type: OpenAPIMediaType(schema=_AUDIO_SCHEMA) for media_type in CONTENT_TYPES.values()}
        content["text/event-stream"] = OpenAPIMediaType(schema=_EVENT_SCHEMA)
        if self.responses is not None:
            self.responses["200"] = OpenAPIResponse(
                description="The audio, sent with chunked transfer encoding as the engine produces it (a cache hit "
                "arrives whole, with Content-Length).",
                content=content,
            )


def _speech_route() -> post:
    """The route's declaration, the same on a front gateway and an engine node."""
    return post(
        status_code=HTTP_200_OK,
        operation_id="createSpeech",
        before_request=require_json,
        summary="Generates audio from the input text.",
        operation_class=SpeechOperation,
        responses=error_responses(400, 401, 403, 404, 413, 415, 429, 503),
    )


class SpeechController(Controller):
    path = "/v1/audio/speech"
    tags = ["Audio"]  # noqa: RUF012 - Litestar's declared type

    @_speech_route()
    async def create_speech(
        self,
        request: Request[Any, Any, Any],
        data: JSONBody[SpeechRequest],
        principal: Caller,
    ) -> Response[Any]:
        return await _speak(request, data, principal)


class EngineNodeSpeechController(Controller):
    """The route on an engine node (``server.profile: engine``): the same, and the front gateway's extension
    (``engines/remote/context.py``): ``x_tts_speaker`` in the body, ``X-TTS-Timestamps`` on the answer."""

    path = SpeechController.path
    tags = SpeechController.tags

    @_speech_route()
    async def create_speech(
        self,
        request: Request[Any, Any, Any],
        data: JSONBody[EngineNodeSpeechRequest],
        principal: Caller,
    ) -> Response[Any]:
        return await _speak(request, data, principal, engine_node=True)


async def _speak(
    request: Request[Any, Any, Any], data: SpeechRequest, principal: Principal, *, engine_node: bool = False
) -> Response[Any]:
    # The service straight from the state: as a second dependency beside ``principal`` Litestar would resolve
    # the two in a task group, a few tasks per request for nothing.
    speech = gateway_state(request.app).speech
    record = http_record(request.scope)
    # Until the first audio exists nothing else would notice the client hang up, and its queue place, engine job
    # and stream lease would stay taken; once the response streams, Litestar's response listens itself.
    # SSML when the input starts with <speak (docs/ssml.md); an engine node's segment is plain text, read by its front.
    spoken = speech.speak(principal, data, record, markup=Markup.SSML)
    reply = await unless_client_leaves(request.receive, spoken)
    headers = reply_headers(reply)
    if engine_node:  # how the words of its timestamps events were placed, for the front (engines/remote/context.py)
        headers[TIMESTAMPS_HEADER] = reply.alignment.kind
    # Released by the response however it ended (``gateway/http/released.py``): not in the audio iterator's
    # ``finally``, since a client gone while a write waited on its socket cancels the stream at that ``send``, outside
    # the iterator, which Litestar leaves suspended; and not as a Litestar ``background`` task, which runs only after a
    # body went out whole (an engine worker killed mid-stream left the lease held and the usage unrecorded).
    if data.stream_format == "sse":
        # An engine node's front always reads the word marks; any other caller gets them when it asks.
        events = sse_events(reply, timestamps=engine_node or data.word_timestamps)
        return ReleasedServerSentEvent(events, headers=headers, release=reply.close)
    media_type = CONTENT_TYPES[data.response_format]
    if reply.whole is not None:  # complete already: one body, without a streaming response's task group
        return ReleasedResponse(reply.whole, media_type=media_type, headers=headers, release=reply.close)
    return ReleasedStream(reply.audio(), media_type=media_type, headers=headers, release=reply.close)


def speech_routes(settings: SpeechSettings, server: ServerSettings) -> type[Controller] | Router:
    """The speech route; where tenants may send more than 4096 characters (``speech.max_input_chars``), behind a
    router that takes bodies long enough for them (JSON may spell a character in up to six bytes)."""
    if settings.max_input_chars <= MAX_INPUT_CHARS:
        return SpeechController
    longest = max(server.max_body_bytes, settings.max_input_chars * 6 + 16 * 1024)
    return Router(path="/", route_handlers=[SpeechController], request_max_body_size=longest)
