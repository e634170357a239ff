"""The pieces of ``…/stream/with-timestamps``: audio cut at whole units, and characters handed out by their times.

ElevenLabs' REST stream sends one JSON object a line, each with a piece of the audio and the characters whose times
fall in it, every time counted from the start of the whole audio (its WebSocket, by contrast, restarts them at zero
in every message: :meth:`CharacterTimes.stream_input`). A client joins the characters and keeps the times as they are:
ElevenLabs' own example extends one list of characters and one of times line after line, and Pipecat's
``ElevenLabsHttpTTSService`` adds an offset only between two requests, never between two lines of one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.audio import Codec
from gateway.speech.alignment import CharacterTimes

if TYPE_CHECKING:
    from gateway.audio import Encoding

__all__ = ["PendingCharacters", "WholeUnits"]

_UNIT_BYTES = {Codec.PCM: 2, Codec.WAV: 2, Codec.MULAW: 1, Codec.ALAW: 1}
"""Bytes of a sample where a piece must hold whole ones (16-bit PCM, its WAV header 44 bytes long; G.711); the
containers (MP3 frames, Ogg pages) are read from the pieces joined, and are cut anywhere."""


class WholeUnits:
    """Cuts encoded audio into pieces of whole samples (raw PCM, WAV, G.711): a piece a client decodes alone."""

    def __init__(self, encoding: Encoding) -> None:
        self._unit = _UNIT_BYTES.get(Codec(encoding.codec), 1)
        self._held = b""

    def take(self, data: bytes) -> bytes:
        """``data`` after what was held back, less a partial sample at its end (held for the next piece)."""
        data = self._held + data
        keep = len(data) - len(data) % self._unit
        self._held = data[keep:]
        return data[:keep]

    def rest(self) -> bytes:
        """What was held back (nothing, unless the audio ended in half a sample)."""
        held, self._held = self._held, b""
        return held


class PendingCharacters:
    """Characters with their times, known but not sent yet, handed out by the time they start."""

    def __init__(self) -> None:
        self._first = 0
        self._characters: list[str] = []
        self._starts: list[float] = []
        self._ends: list[float] = []

    def add(self, run: CharacterTimes) -> None:
        """Characters that follow the ones added before."""
        if not self._characters:
            self._first = run.first
        self._characters += run.characters
        self._starts += run.starts
        self._ends += run.ends

    def until(self, seconds: float | None = None) -> CharacterTimes | None:
        """The pending characters that start before ``seconds`` (all of them when ``None``); ``None`` when none do.
        Their starts never go back, so they are the first ones."""
        count = len(self._characters)
        if seconds is not None:
            count = next((i for i, start in enumerate(self._starts) if start >= seconds), count)
        if count == 0:
            return None
        run = CharacterTimes(self._first, self._characters[:count], self._starts[:count], self._ends[:count])
        self._first += count
        del self._characters[:count], self._starts[:count], self._ends[:count]
        return run
