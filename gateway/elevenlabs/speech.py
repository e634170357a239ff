"""``POST /v1/text-to-speech/{voice_id}`` (the whole audio) and ``…/stream`` (the audio as it is spoken), each also
``…/with-timestamps``: the audio in base64 JSON with the times of the text's characters (``timestamps.py``).

Both translate ElevenLabs' request into a :class:`~gateway.schemas.SpeechRequest` for 24 kHz PCM and speak it through
the one speech pipeline (:meth:`SpeechService.speak`: plan, limits, cache, single flight, fair scheduling, failover,
usage), then encode the PCM into the ``output_format`` asked for at the edge: the cache holds the PCM, so that a text
spoken through ElevenLabs' routes is a hit for OpenAI's ``pcm``, the realtime sessions and every other format alike.

The whole-audio route answers once the audio is complete, with ``Content-Length``, as ElevenLabs' does: an engine that
fails half way gets the client an error status, not a short file. The stream route sends the audio as it comes, and a
failure after its first bytes can only end it short (``gateway/http/tracking.py``), as on ``POST /v1/audio/speech``.

The times are the reply's own (:attr:`SpeechReply.alignment`: exact at segment boundaries, the engine's inside a
segment where it places its words, else estimated), the same for a cache hit, since the cache keeps them.
"""

from __future__ import annotations

import base64
from contextlib import aclosing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, TypeAlias

from litestar import Controller, Request, Response, post
from litestar.di import Dependency, Provide
from litestar.openapi.spec import OpenAPIMediaType, OpenAPIResponse, OpenAPIType, Operation, Schema
from litestar.params import JSONBody, Parameter, SkipValidationMarker
from litestar.response import Stream  # noqa: TC002 - Litestar reads the handlers' hints at runtime
from litestar.status_codes import HTTP_200_OK, HTTP_400_BAD_REQUEST
from pydantic import BaseModel  # noqa: TC002 - Litestar reads the handlers' hints at runtime

from gateway.audio import AudioFormat, open_encoding, output_sample_rate
from gateway.elevenlabs.errors import error_responses
from gateway.elevenlabs.formats import CONTENT_TYPES, DEFAULT_OUTPUT_FORMAT, OutputFormat, encoding_of
from gateway.elevenlabs.json_body import require_fastapi_json
from gateway.elevenlabs.timestamps import PendingCharacters, WholeUnits
from gateway.elevenlabs.wire import (
    AudioWithTimestamps,
    CharacterAlignment,
    TextToSpeechRequest,
    text_markup,
)
from gateway.http.auth.dependencies import Caller  # noqa: TC001 - read at runtime, as JSONBody
from gateway.http.disconnect import unless_client_leaves
from gateway.http.errors import OpenAIError, ResponseTruncatedError
from gateway.http.released import ReleasedResponse, ReleasedStream
from gateway.http.reply_headers import reply_headers
from gateway.http.request_record import http_record
from gateway.speech.alignment import CharacterCursor
from gateway.state import gateway_state

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping

    from litestar.handlers import HTTPRouteHandler

    from auth import Principal
    from gateway.audio import Encoding
    from gateway.schemas import SpeechRequest
    from gateway.speech.alignment import CharacterTimes
    from gateway.speech.reply import SpeechReply
    from gateway.text import Markup, Script

    TimedBody: TypeAlias = BaseModel
    """(Resolved at run time from each family's :class:`SpokenRoutes`.)"""

__all__ = [
    "Format",
    "Logging",
    "Spoken",
    "SpokenDep",
    "SpokenRoutes",
    "TextToSpeechController",
    "audio_route",
    "encoding_of",
    "speak_pcm",
    "spoken_routes",
    "streamed",
    "timed_audio",
    "timed_lines",
    "whole_audio",
]

PIPELINE_RATE = output_sample_rate(AudioFormat.PCM)
"""The rate of the PCM the pipeline speaks for these routes (24 kHz)."""
PCM_BYTES_PER_SECOND = 2 * PIPELINE_RATE
PATH = "/v1/text-to-speech"
JSON_LINES = "application/x-ndjson"

_AUDIO_SCHEMA = Schema(type=OpenAPIType.STRING, format="binary")  # type: ignore[arg-type]

VoiceId = Annotated[
    str,
    Parameter(
        description="A built-in voice (`GET /v1/voices`) or one of your custom voices (`voice_…`).",
        min_length=1,
        max_length=256,
    ),
]
Format = Annotated[
    OutputFormat,
    Parameter(description="`codec_rate[_kbps]`: the codec, its sample rate and (mp3, opus) its bit rate."),
]
Latency = Annotated[
    int | None,
    Parameter(description="Accepted (0 to 4) and ignored: audio always streams as it is spoken.", ge=0, le=4),
]
Logging = Annotated[bool | None, Parameter(description="Accepted and ignored: the gateway keeps no history.")]
SsmlParsing = Annotated[
    bool | None,
    Parameter(
        description="This gateway's extension, as ElevenLabs' WebSocket takes it: read the text as SSML (the subset of "
        '`docs/ssml.md`; `<speak>` optional). Without it only `<break time="…"/>` is honoured, as ElevenLabs does.'
    ),
]


@dataclass
class AudioOperation(Operation):
    """Declares the audio the routes really send: one content type per codec."""

    def __post_init__(self) -> None:
        content = {media_type: OpenAPIMediaType(schema=_AUDIO_SCHEMA) for media_type in CONTENT_TYPES.values()}
        if self.responses is not None:
            self.responses["200"] = OpenAPIResponse(description="The audio, in `output_format`.", content=content)


@dataclass
class JsonLinesOperation(Operation):
    """Declares the stream of JSON objects, one a line, that ``…/stream/with-timestamps`` sends."""

    def __post_init__(self) -> None:
        if self.responses is not None:
            line = Schema(
                type=OpenAPIType.STRING,
                description="One JSON object a line, each shaped as `AudioWithTimestamps`: a piece of the audio "
                "(whole samples for pcm, wav and G.711) and the characters whose times start in it (or `null`), "
                "times counted from the start of the whole audio.",
            )
            self.responses["200"] = OpenAPIResponse(
                description="The audio with its characters' times, as it is spoken.",
                content={JSON_LINES: OpenAPIMediaType(schema=line)},
            )


def audio_route(
    path: str,
    operation_id: str,
    summary: str,
    operation_class: type[Operation] = AudioOperation,
    signature_namespace: Mapping[str, Any] | None = None,
) -> post:
    return post(
        path,
        status_code=HTTP_200_OK,
        operation_id=operation_id,
        summary=summary,
        operation_class=operation_class,
        responses=error_responses(400, 401, 403, 404, 413, 422, 429, 503),
        signature_namespace=signature_namespace,
        before_request=require_fastapi_json,
    )


@dataclass
class Spoken:
    """A text being spoken for one of these routes: the reply (the response made of it releases it), the encoding
    ``output_format`` asked for and the response's headers. Each route answers it in its own shape."""

    reply: SpeechReply
    encoding: Encoding
    headers: dict[str, str]

    async def whole_audio(self, request: Request[Any, Any, Any]) -> bytes:
        """All of the audio in the encoding (:func:`whole_audio`), unless the client leaves first."""
        return await unless_client_leaves(request.receive, whole_audio(request, self.reply, self.encoding))

    async def whole_response(self, request: Request[Any, Any, Any]) -> Response[bytes]:
        """The whole audio, with ``Content-Length``."""
        audio = await self.whole_audio(request)
        return Response(audio, media_type=CONTENT_TYPES[self.encoding.codec], headers=self.headers)

    def streamed(self) -> Response[Any]:
        """The audio as it comes (:func:`streamed`)."""
        return streamed(self.reply, self.encoding, self.headers)

    def with_timestamps(self, audio: bytes, characters: CharacterTimes | None) -> BaseModel:
        """A piece of the audio with its characters' times: ``…/with-timestamps``' body, and each line of
        ``…/stream/with-timestamps`` (``AudioWithTimestamps``; a dialogue's says more)."""
        return timed_audio(audio, characters)

    async def timed_response(self, request: Request[Any, Any, Any]) -> Response[BaseModel]:
        """The whole audio with its characters' times."""
        audio = await self.whole_audio(request)
        return Response(self.with_timestamps(audio, self.reply.alignment.characters()), headers=self.headers)

    def timed_lines(self) -> Stream:
        """The audio as JSON lines, each rendered by :meth:`with_timestamps` (:func:`timed_lines`), the reply released
        however the stream ends."""
        lines = timed_lines(self.reply, self.encoding, self._line)
        return ReleasedStream(lines, media_type=JSON_LINES, headers=self.headers, release=self.reply.close)

    def _line(self, audio: bytes, characters: CharacterTimes | None) -> bytes:
        return self.with_timestamps(audio, characters).model_dump_json().encode() + b"\n"


async def speak_pcm(
    request: Request[Any, Any, Any],
    principal: Principal,
    speech_request: SpeechRequest,
    output_format: OutputFormat,
    *,
    markup: Markup,
    script: Script | None = None,
    dictionaries: list[tuple[str, str | None]] | None = None,
) -> Spoken:
    """Start speaking ``speech_request`` (24 kHz PCM) with ``markup`` honoured (or ``script``, read already: a
    dialogue's) and the pronunciation ``dictionaries`` named (``None``: the tenant's defaults), for a response in
    ``output_format``."""
    encoding = encoding_of(output_format)
    speech = gateway_state(request.app).speech
    record = http_record(request.scope)
    speaking = speech.speak(principal, speech_request, record, markup=markup, script=script, dictionaries=dictionaries)
    reply = await unless_client_leaves(request.receive, speaking)
    record.format = output_format.value  # the access log says what the client got
    headers = reply_headers(reply)
    # What the request was charged (its text as the dictionaries and markup made it spoken), as ElevenLabs' says.
    headers["x-character-count"] = str(len(reply.request.input) if reply.characters is None else reply.characters)
    headers["request-id"] = record.request_id
    return Spoken(reply, encoding, headers)


SpokenDep: TypeAlias = Annotated[Spoken, Dependency(kind="named"), SkipValidationMarker()]
"""What a route of these families speaks (provided as ``spoken``): the app's own object, not validated."""


async def _spoken_text(  # noqa: PLR0917 - the routes' parameters, read by Litestar
    request: Request[Any, Any, Any],
    voice_id: VoiceId,
    data: JSONBody[TextToSpeechRequest],
    principal: Caller,
    output_format: Format = DEFAULT_OUTPUT_FORMAT,
    optimize_streaming_latency: Latency = None,
    enable_logging: Logging = None,
    enable_ssml_parsing: SsmlParsing = None,
) -> Spoken:
    """What every text-to-speech route speaks (a dependency, so that the four routes take and document the same
    parameters from one place): the body's text in ``voice_id``'s voice, with the markup the query asks for and the
    dictionaries the body names."""
    return await speak_pcm(
        request,
        principal,
        data.speech_request(voice_id),
        output_format,
        markup=text_markup(enable_ssml_parsing),
        dictionaries=data.dictionaries(),
    )


@dataclass(frozen=True, slots=True)
class SpokenRoutes:
    """How the OpenAPI document names the four routes of a family of spoken text: the whole audio, the audio as it is
    spoken, each also ``…/with-timestamps``."""

    path: str
    """The whole audio's, below the controller's (``""``: the controller's own); the others add ``/stream``,
    ``/with-timestamps``."""
    operation_id: str
    """The whole audio's; the others add ``Stream``, ``WithTimestamps``."""
    whole: str
    stream: str
    with_timestamps: str
    stream_with_timestamps: str
    """The routes' summaries."""
    timed_body: type[BaseModel]
    """``…/with-timestamps``' body: what :meth:`Spoken.with_timestamps` makes for the family."""


def spoken_routes(
    routes: SpokenRoutes,
) -> tuple[HTTPRouteHandler, HTTPRouteHandler, HTTPRouteHandler, HTTPRouteHandler]:
    """The four handlers of ``routes``, for a controller that provides their :class:`Spoken` as ``spoken`` (which
    takes and documents the request's parameters): each answers it in its own shape, the same for every family."""
    path, operation_id = routes.path, routes.operation_id
    # Litestar reads the body's schema from the return annotation: ``TimedBody`` names the family's, resolved from the
    # handler's signature namespace.
    timed_body = {"TimedBody": routes.timed_body}

    @audio_route(path or "/", operation_id, routes.whole)
    async def convert(_controller: Controller, request: Request[Any, Any, Any], spoken: SpokenDep) -> Response[bytes]:
        return await spoken.whole_response(request)

    @audio_route(f"{path}/stream", f"{operation_id}Stream", routes.stream)
    async def stream(_controller: Controller, spoken: SpokenDep) -> Response[Any]:
        return spoken.streamed()

    @audio_route(
        f"{path}/with-timestamps",
        f"{operation_id}WithTimestamps",
        routes.with_timestamps,
        operation_class=Operation,  # the body's own schema
        signature_namespace=timed_body,
    )
    async def convert_with_timestamps(
        _controller: Controller, request: Request[Any, Any, Any], spoken: SpokenDep
    ) -> Response[TimedBody]:
        return await spoken.timed_response(request)

    @audio_route(
        f"{path}/stream/with-timestamps",
        f"{operation_id}StreamWithTimestamps",
        routes.stream_with_timestamps,
        operation_class=JsonLinesOperation,
    )
    async def stream_with_timestamps(_controller: Controller, spoken: SpokenDep) -> Stream:
        return spoken.timed_lines()

    return convert, stream, convert_with_timestamps, stream_with_timestamps


class TextToSpeechController(Controller):
    path = PATH
    dependencies = {"spoken": Provide(_spoken_text)}  # noqa: RUF012 - Litestar's declared type

    convert, stream, convert_with_timestamps, stream_with_timestamps = spoken_routes(
        SpokenRoutes(
            "/{voice_id:str}",
            "elevenLabsTextToSpeech",
            whole="ElevenLabs: the whole audio of the text, once it is complete (with Content-Length).",
            stream="ElevenLabs: the audio of the text, streamed as it is spoken.",
            with_timestamps="ElevenLabs: the whole audio of the text in base64, with when each of its characters is "
            "heard.",
            stream_with_timestamps="ElevenLabs: the audio of the text as it is spoken, in JSON lines with its "
            "characters' times.",
            timed_body=AudioWithTimestamps,
        )
    )


def streamed(reply: SpeechReply, encoding: Encoding, headers: dict[str, str]) -> Response[Any]:
    """The response that streams ``reply``'s audio in ``encoding`` as it comes (all at once for a cache hit), the
    reply released after it however it ended, as on ``POST /v1/audio/speech`` (``gateway/openai/speech.py``)."""
    media_type = CONTENT_TYPES[encoding.codec]
    if reply.whole is not None:  # a cache hit: complete already
        whole = encode_whole(reply.whole, encoding)
        return ReleasedResponse(whole, media_type=media_type, headers=headers, release=reply.close)
    audio = encoded_audio(reply.audio(), encoding)
    return ReleasedStream(audio, media_type=media_type, headers=headers, release=reply.close)


async def whole_audio(request: Request[Any, Any, Any], reply: SpeechReply, encoding: Encoding) -> bytes:
    """All of the reply's audio in ``encoding``, the reply released; an engine that fails half way raises its error
    (nothing has been sent: the client gets its status).

    Raises:
        OpenAIError: 400 ``audio_too_long``, as soon as the audio passes ``speech.max_whole_audio_s``: a whole
            response is held in memory, and a short text of long silences or spelled-out digits makes hours of it.
    """
    max_s = gateway_state(request.app).settings.speech.max_whole_audio_s
    most = int(max_s * PIPELINE_RATE) * 2
    async with reply:
        if reply.whole is not None:
            _check_whole(len(reply.whole), most, max_s)
            return encode_whole(reply.whole, encoding)
        try:
            async with aclosing(_within(reply.audio(), most, max_s)) as pcm:
                return b"".join([chunk async for chunk in encoded_audio(pcm, encoding)])
        except ResponseTruncatedError as cut:
            cause = cut.__cause__
            raise (cause if isinstance(cause, Exception) else cut) from None


async def _within(pcm: AsyncIterator[bytes], most: int, max_s: float) -> AsyncGenerator[bytes]:
    """``pcm`` until it passes ``most`` bytes (``max_s`` seconds), then :func:`_check_whole`'s error."""
    held = 0
    async for chunk in pcm:
        held += len(chunk)
        _check_whole(held, most, max_s)
        yield chunk


def _check_whole(held: int, most: int, max_s: float) -> None:
    if held > most:
        raise OpenAIError(
            HTTP_400_BAD_REQUEST,
            f"The audio is longer than the {max_s:g} s a whole response holds: ask the /stream route for it.",
            param="text",
            code="audio_too_long",
        )


def encode_whole(pcm: bytes, encoding: Encoding) -> bytes:
    encoder = open_encoding(encoding, PIPELINE_RATE)
    return encoder.encode(pcm) + encoder.finish()


async def encoded_audio(pcm: AsyncIterator[bytes], encoding: Encoding) -> AsyncIterator[bytes]:
    """The pipeline's PCM in ``encoding``, chunk by chunk as it arrives."""
    encoder = open_encoding(encoding, PIPELINE_RATE)
    async for chunk in pcm:
        if data := encoder.encode(chunk):
            yield data
    if tail := encoder.finish():
        yield tail


def timed_audio(audio: bytes, characters: CharacterTimes | None) -> AudioWithTimestamps:
    """ElevenLabs' object of a piece of audio and its characters' times; ``normalized_alignment`` the same, since
    the text is spoken as given."""
    alignment = CharacterAlignment.model_validate(characters.rest_api()) if characters is not None else None
    return AudioWithTimestamps(
        audio_base64=base64.b64encode(audio).decode("ascii"), alignment=alignment, normalized_alignment=alignment
    )


async def timed_lines(
    reply: SpeechReply, encoding: Encoding, line: Callable[[bytes, CharacterTimes | None], bytes]
) -> AsyncIterator[bytes]:
    """The reply's audio in ``encoding`` as JSON lines: each piece (whole samples where that matters) with the
    characters that start before the end of the PCM it was encoded from, times from the start of the audio; each
    rendered by ``line`` (``AudioWithTimestamps``, or a dialogue's, which says more).

    A character is known once its word is (with, or after, the audio in which the word starts); then it goes with
    the next piece of audio, or the last line.
    """
    alignment = reply.alignment
    cursor = CharacterCursor(alignment.text)
    pending = PendingCharacters()
    encoder = open_encoding(encoding, PIPELINE_RATE)
    units = WholeUnits(encoding)
    heard_s = 0.0
    async for chunk in reply.timed():
        if run := cursor.advance(alignment.words):
            pending.add(run)
        heard_s += len(chunk.audio) / PCM_BYTES_PER_SECOND
        if audio := units.take(encoder.encode(chunk.audio)):
            yield line(audio, pending.until(heard_s))
    if run := cursor.advance(alignment.words, alignment.audio_s):
        pending.add(run)
    audio = units.take(encoder.finish()) + units.rest()
    characters = pending.until()
    if audio or characters is not None:
        yield line(audio, characters)
