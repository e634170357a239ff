"""An engine node's answer as server-sent events: its audio and the word marks its own engine placed.

A front asks an engine node (and only one: ``engines/remote/context.py``) for ``stream_format: "sse"`` with
``response_format: "pcm"``. The node answers, in order, OpenAI's ``speech.audio.delta`` events (base64 of its 24 kHz
PCM), this gateway's ``speech.audio.timestamps`` events (each word's characters in the request's text and its start
and end in seconds of the audio; a word comes after the audio it starts in) and ``speech.audio.done`` last; its
``X-TTS-Timestamps`` header (:data:`~engines.remote.context.TIMESTAMPS_HEADER`) says how its engine placed the words,
``exact`` for espeak-ng. :class:`NodeEvents` turns the events back into PCM and :class:`~engines.timing.WordMark` at
the front's sample rate, so that the front's time-stretch, encoders, cache and every dialect take them as a local
engine's: the words cross the hop as the node's engine placed them, not estimated again from the audio.

Written here: the events are a few fixed shapes from a node of the same version, and the parser must be fed the bytes
as they come (under the remote engine's per-chunk timeouts), which is all an SSE library would add.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import TYPE_CHECKING, Any, TypeAlias

from engines.timing import WordMark

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["MAX_EVENT_BYTES", "MalformedEventsError", "NodeEvents", "NodeItem"]

MAX_EVENT_BYTES = 4 * 1024 * 1024
"""The longest event a front takes from a node (a delta is a few kilobytes; a timestamps event of a 4096-character
text about 200 kB)."""

NodeItem: TypeAlias = bytes | tuple[WordMark, ...]
"""What the node's stream yields, in order: PCM, or the marks of words whose audio came before them."""

_SAMPLE_BYTES = 2


class MalformedEventsError(ValueError):
    """The node's answer is not the event stream of a node of this version."""


class NodeEvents:
    """Feed it the bytes of a node's answer as they come; it hands out PCM and marks in the order the node sent them.

    ``marks``: take the node's words (its answer said how its engine placed them); otherwise its timestamps events
    are passed over. A mark's samples never go back, and it never outlasts the PCM handed out before it.
    """

    def __init__(self, text_length: int, sample_rate: int, *, marks: bool) -> None:
        self._text_length = text_length
        self._sample_rate = sample_rate
        self._marks = marks
        self._buffer = b""
        self._data: list[bytes] = []
        self._samples = 0
        self._last_start = 0
        self._last_char = 0
        self.done = False

    def feed(self, data: bytes) -> list[NodeItem]:
        """The items whose events are complete with ``data``.

        Raises:
            MalformedEventsError: an event that is not JSON of a known shape, or longer than :data:`MAX_EVENT_BYTES`.
        """
        self._buffer += data
        items: list[NodeItem] = []
        for line in self._complete_lines():
            if line.startswith(b"data:"):
                self._data.append(line[5:].removeprefix(b" "))
            elif not line and self._data:
                payload, self._data = b"\n".join(self._data), []
                items.extend(self._event(_json(payload)))
        if len(self._buffer) + sum(map(len, self._data)) > MAX_EVENT_BYTES:
            raise MalformedEventsError(f"an event longer than {MAX_EVENT_BYTES} bytes")
        return items

    def _complete_lines(self) -> Iterator[bytes]:
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            yield line.removesuffix(b"\r")

    def _event(self, event: dict[str, Any]) -> list[NodeItem]:
        kind = event.get("type")
        if self.done:
            raise MalformedEventsError(f"an event after speech.audio.done: {kind!r}")
        if kind == "speech.audio.delta":
            pcm = _base64(event.get("audio"))
            self._samples += len(pcm) // _SAMPLE_BYTES
            return [pcm] if pcm else []
        if kind == "speech.audio.timestamps":
            marks = self._words(event.get("words")) if self._marks else ()
            return [marks] if marks else []
        if kind == "speech.audio.done":
            self.done = True
            return []
        raise MalformedEventsError(f"an event of unknown type {kind!r}")

    def _words(self, words: object) -> tuple[WordMark, ...]:
        if not isinstance(words, list):
            raise MalformedEventsError("timestamps without a list of words")
        return tuple(self._mark(word) for word in words)

    def _mark(self, word: object) -> WordMark:
        """A word in samples of the audio, kept within what came before it and after the words before it."""
        try:
            fields = word if isinstance(word, dict) else {}
            char_start, char_end = int(fields["char_start"]), int(fields["char_end"])
            start_s, end_s = float(fields["start"]), float(fields["end"])
        except (KeyError, TypeError, ValueError):
            raise MalformedEventsError(f"a word of an unknown shape: {str(word)[:200]}") from None
        if not self._last_char <= char_start < char_end <= self._text_length:
            raise MalformedEventsError(f"a word out of the text or out of order: [{char_start}, {char_end})")
        start = min(max(self._last_start, round(start_s * self._sample_rate)), self._samples)
        end = min(max(start, round(end_s * self._sample_rate)), self._samples)
        self._last_start, self._last_char = start, char_end
        return WordMark(char_start, char_end, start, end)


def _json(payload: bytes) -> dict[str, Any]:
    try:
        event = json.loads(payload)
    except ValueError:
        raise MalformedEventsError(f"an event that is not JSON: {payload[:200]!r}") from None
    if not isinstance(event, dict):
        raise MalformedEventsError(f"an event that is not an object: {payload[:200]!r}")
    return event


def _base64(audio: object) -> bytes:
    if not isinstance(audio, str):
        raise MalformedEventsError("a delta without audio")
    try:
        return base64.b64decode(audio, validate=True)
    except binascii.Error:
        raise MalformedEventsError("a delta whose audio is not base64") from None
