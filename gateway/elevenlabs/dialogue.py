"""``POST /v1/text-to-dialogue`` (the whole audio) and ``…/stream`` (the audio as it is spoken): ElevenLabs'
multi-speaker dialogue, each turn in its voice, one audio in order.

The turns become one script (``gateway/text``: a span per turn in its voice, its break tags as silences) spoken
through the one speech pipeline (:meth:`SpeechService.speak`): each turn is a segment job of its own through the
engine's fair scheduler, the whole is cached as one, and the PCM is encoded at the edge as on the text-to-speech
routes (``speech.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from litestar import Controller, Request, Response
from litestar.params import JSONBody  # noqa: TC002 - read at runtime, by Litestar

from gateway.elevenlabs.formats import CONTENT_TYPES, DEFAULT_OUTPUT_FORMAT
from gateway.elevenlabs.speech import (
    Format,
    Logging,
    audio_route,
    encoding_of,
    speak_pcm,
    streamed,
    whole_audio,
)
from gateway.elevenlabs.wire import TextToDialogueRequest  # noqa: TC001 - read at runtime, as JSONBody
from gateway.http.auth.dependencies import Caller  # noqa: TC001 - read at runtime, as JSONBody
from gateway.http.disconnect import unless_client_leaves
from gateway.text import Markup

if TYPE_CHECKING:
    from auth import Principal
    from gateway.elevenlabs.formats import OutputFormat
    from gateway.speech.service import SpeechReply

__all__ = ["DIALOGUE_PATH", "TextToDialogueController"]

DIALOGUE_PATH = "/v1/text-to-dialogue"


class TextToDialogueController(Controller):
    path = DIALOGUE_PATH
    tags = ["ElevenLabs"]  # noqa: RUF012 - Litestar's declared type

    @audio_route("/", "elevenLabsTextToDialogue", "ElevenLabs: the whole audio of a dialogue, each turn in its voice.")
    async def convert(
        self,
        request: Request[Any, Any, Any],
        data: JSONBody[TextToDialogueRequest],
        principal: Caller,
        output_format: Format = DEFAULT_OUTPUT_FORMAT,
        enable_logging: Logging = None,
    ) -> Response[bytes]:
        encoding = encoding_of(output_format)
        reply, headers = await _speak(request, principal, data, output_format)
        audio = await unless_client_leaves(request.receive, whole_audio(reply, encoding))
        return Response(audio, media_type=CONTENT_TYPES[encoding.codec], headers=headers)

    @audio_route("/stream", "elevenLabsTextToDialogueStream", "ElevenLabs: the audio of a dialogue, as it is spoken.")
    async def stream(
        self,
        request: Request[Any, Any, Any],
        data: JSONBody[TextToDialogueRequest],
        principal: Caller,
        output_format: Format = DEFAULT_OUTPUT_FORMAT,
        enable_logging: Logging = None,
    ) -> Response[Any]:
        encoding = encoding_of(output_format)
        reply, headers = await _speak(request, principal, data, output_format)
        return streamed(reply, encoding, headers)


async def _speak(
    request: Request[Any, Any, Any], principal: Principal, data: TextToDialogueRequest, output_format: OutputFormat
) -> tuple[SpeechReply, dict[str, str]]:
    """Start speaking the dialogue, every turn in its voice; the reply (the caller owns it) and the headers."""
    return await speak_pcm(
        request,
        principal,
        data.speech_request(),
        output_format,
        markup=Markup.PLAIN,
        script=data.script(),
        dictionaries=data.dictionaries(),
    )
