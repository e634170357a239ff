"""``POST /v1/text-to-dialogue`` (the whole audio) and ``…/stream`` (the audio as it is spoken), each also
``…/with-timestamps`` (the audio in base64 JSON with its characters' times and ``voice_segments``: which turn, in which
voice, is heard when): ElevenLabs' multi-speaker dialogue, each turn in its voice, one audio in order.

The turns become one script (``gateway/text``: a span per turn in its voice, its break tags as silences) spoken
through the one speech pipeline (:meth:`SpeechService.speak`): each turn is a segment job of its own through the
engine's fair scheduler, the whole is cached as one, and the PCM is encoded at the edge as on the text-to-speech
routes (``speech.py``).

The characters are the script's text (the turns' spoken texts, one space between two), as the SDK's
``convert_with_timestamps`` reads them; a voice segment is one turn's run of characters (``dialogue_input_index``:
the turn's place in ``inputs``), its times its first character's start and its last one's end. On the stream, each
line's segments cover that line's characters, their indexes counted in the whole text as its times are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from litestar import Controller, Request
from litestar.di import Provide
from litestar.params import JSONBody  # noqa: TC002 - Litestar reads the dependency's hints at runtime
from pydantic import BaseModel

from gateway.elevenlabs.formats import DEFAULT_OUTPUT_FORMAT
from gateway.elevenlabs.speech import Format, Logging, Spoken, SpokenRoutes, speak_pcm, spoken_routes, timed_audio
from gateway.elevenlabs.wire import CharacterAlignment, TextToDialogueRequest
from gateway.http.auth.dependencies import Caller  # noqa: TC001 - read at runtime, as JSONBody
from gateway.text import Markup
from gateway.text.breaks import read_breaks
from gateway.text.script import Speech

if TYPE_CHECKING:
    from gateway.speech.alignment import CharacterTimes

__all__ = ["DIALOGUE_PATH", "AudioWithVoiceSegments", "SpokenDialogue", "TextToDialogueController", "VoiceSegment"]

DIALOGUE_PATH = "/v1/text-to-dialogue"


class VoiceSegment(BaseModel):
    """A turn's run of the characters (the SDK's ``VoiceSegment``)."""

    voice_id: str
    start_time_seconds: float
    end_time_seconds: float
    character_start_index: int
    character_end_index: int
    """Exclusive."""
    dialogue_input_index: int
    """The turn's place in the request's ``inputs``."""


class AudioWithVoiceSegments(BaseModel):
    """``…/with-timestamps``' body, and each line of ``…/stream/with-timestamps`` (the SDK's
    ``AudioWithTimestampsAndVoiceSegmentsResponseModel``); ``normalized_alignment`` is ``alignment``."""

    audio_base64: str
    alignment: CharacterAlignment | None = None
    normalized_alignment: CharacterAlignment | None = None
    voice_segments: list[VoiceSegment]


_Turn = tuple[str, int, int]
"""A turn's voice and its characters ``[start, end)`` in the script's text."""


@dataclass
class SpokenDialogue(Spoken):
    """A dialogue being spoken, with where each of its turns lies in the script's text."""

    turns: list[_Turn]

    def with_timestamps(self, audio: bytes, characters: CharacterTimes | None) -> AudioWithVoiceSegments:
        """A piece of the audio with its characters' times and the turns those characters belong to."""
        segments = _segments(self.turns, characters) if characters is not None else []
        return AudioWithVoiceSegments(**dict(timed_audio(audio, characters)), voice_segments=segments)


async def _spoken_dialogue(
    request: Request[Any, Any, Any],
    data: JSONBody[TextToDialogueRequest],
    principal: Caller,
    output_format: Format = DEFAULT_OUTPUT_FORMAT,
    enable_logging: Logging = None,
) -> SpokenDialogue:
    """What every dialogue route speaks (a dependency, so that the four routes take and document the same parameters
    from one place): the dialogue, every turn in its voice."""
    spoken = await speak_pcm(
        request,
        principal,
        data.speech_request(),
        output_format,
        markup=Markup.PLAIN,
        script=data.script(),
        dictionaries=data.dictionaries(),
    )
    return SpokenDialogue(spoken.reply, spoken.encoding, spoken.headers, _turns(data))


class TextToDialogueController(Controller):
    path = DIALOGUE_PATH
    dependencies = {"spoken": Provide(_spoken_dialogue)}  # noqa: RUF012 - Litestar's declared type

    convert, stream, convert_with_timestamps, stream_with_timestamps = spoken_routes(
        SpokenRoutes(
            "",
            "elevenLabsTextToDialogue",
            whole="ElevenLabs: the whole audio of a dialogue, each turn in its voice.",
            stream="ElevenLabs: the audio of a dialogue, as it is spoken.",
            with_timestamps="ElevenLabs: the whole audio of a dialogue in base64, with its characters' times and each "
            "turn's segment.",
            stream_with_timestamps="ElevenLabs: the audio of a dialogue as it is spoken, in JSON lines with its "
            "characters' times and turns.",
            timed_body=AudioWithVoiceSegments,
        )
    )


def _turns(data: TextToDialogueRequest) -> list[_Turn]:
    """Where each turn's characters lie in the script's text (its spans joined by one space: ``Script.text``)."""
    turns: list[_Turn] = []
    offset = 0
    for turn in data.inputs:
        start = offset
        for part in read_breaks(turn.text).parts:
            if isinstance(part, Speech):
                offset += len(part.text.strip()) + 1
        turns.append((turn.voice_id, start, max(start, offset - 1)))
    return turns


def _segments(turns: list[_Turn], characters: CharacterTimes) -> list[VoiceSegment]:
    """The turns' runs among ``characters`` (indexes in the whole text; a space between two turns is neither's)."""
    first, stop = characters.first, characters.first + len(characters.characters)
    segments = []
    for index, (voice_id, start, end) in enumerate(turns):
        low, high = max(start, first), min(end, stop)
        if low >= high:
            continue
        segments.append(
            VoiceSegment(
                voice_id=voice_id,
                start_time_seconds=round(characters.starts[low - first], 3),
                end_time_seconds=round(characters.ends[high - 1 - first], 3),
                character_start_index=low,
                character_end_index=high,
                dialogue_input_index=index,
            )
        )
    return segments
