"""OpenAI's server-sent events of ``POST /v1/audio/speech`` (``stream_format: "sse"``): a speech reply rendered in
OpenAI's wire format, and this gateway's ``speech.audio.timestamps`` extension."""

from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING

from gateway.speech.alignment import CharacterCursor

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from gateway.speech.alignment import Alignment, WordTime
    from gateway.speech.reply import SpeechReply

__all__ = ["sse_events"]


async def sse_events(reply: SpeechReply, *, timestamps: bool = False) -> AsyncIterator[str]:
    """``reply``'s ``speech.audio.delta`` events with base64 audio, then ``speech.audio.done`` with usage: OpenAI's
    stream, every event of OpenAI's schema. With ``timestamps`` (asked for: the request's ``word_timestamps``, or a
    front's request to an engine node), this gateway's extension ``speech.audio.timestamps`` between them too: the
    words and characters as they become known. Never unasked: a client that dispatches strictly on OpenAI's event
    types would break on a type it does not know."""
    cursor = CharacterCursor(reply.alignment.text)
    async for chunk in reply.timed():
        if chunk.audio:
            yield json.dumps({"type": "speech.audio.delta", "audio": base64.b64encode(chunk.audio).decode("ascii")})
        if timestamps and chunk.words and (event := _timestamps_event(chunk.words, cursor, reply.alignment)):
            yield event
    if timestamps and (event := _timestamps_event((), cursor, reply.alignment)):  # what follows the last word
        yield event
    yield json.dumps({"type": "speech.audio.done", "usage": reply.usage().model_dump()})


def _timestamps_event(words: tuple[WordTime, ...], cursor: CharacterCursor, alignment: Alignment) -> str | None:
    """``speech.audio.timestamps``: ``words`` and the characters up to the end of the last of them (to the end of the
    text once the audio has ended); ``None`` when there is nothing new."""
    characters = cursor.advance(alignment.words, alignment.audio_s)
    if not words and characters is None:
        return None
    text = alignment.text
    event: dict[str, object] = {
        "type": "speech.audio.timestamps",
        "kind": alignment.kind,
        "words": [
            {
                "word": text[w.char_start : w.char_end],
                "start": round(w.start_s, 3),
                "end": round(w.end_s, 3),
                "char_start": w.char_start,
                "char_end": w.char_end,
            }
            for w in words
        ],
        "char_start": characters.first if characters is not None else len(text),
        "alignment": (
            characters.rest_api()
            if characters is not None
            else {"characters": [], "character_start_times_seconds": [], "character_end_times_seconds": []}
        ),
    }
    return json.dumps(event)
