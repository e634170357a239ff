"""espeak-ng's own word events for a text, read straight from its library: the reference the word marks are checked
against. Written apart from ``engines/espeak`` on purpose (its own binding of ``espeak_EVENT``, reading the events'
milliseconds where the engine reads their samples), and run in a process of its own (:func:`espeak_events`; ``python
-m tests.espeak_events VOICE RATE PITCH`` with the text on standard input, JSON out), since espeak keeps its state per
process.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from typing import Any

import espeakng_loader

from engines.espeak.voices import ESPEAK_VOICES
from engines.timing import word_spans

__all__ = ["TOLERANCE_S", "espeak_events", "first_events", "main"]

TOLERANCE_S = 0.050
"""How far a word's start may be from espeak-ng's own event (the issue's bound)."""


def espeak_events(text: str, voice: str, speed: float) -> dict[str, Any]:
    """espeak-ng's word events for ``text`` spoken by the engine's ``voice`` at ``speed`` (the engine's rate and
    pitch): ``{"sample_rate", "samples", "words": [{"char", "length", "ms"}]}``, characters counted from 0."""
    spoken = next(v for v in ESPEAK_VOICES if v.id == voice)
    rate = round(175 * speed)
    result = subprocess.run(
        [sys.executable, "-m", "tests.espeak_events", spoken.espeak_name, str(rate), str(spoken.pitch)],
        input=text.replace("\0", ""),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    events: dict[str, Any] = json.loads(result.stdout)
    return events


def first_events(text: str, events: dict[str, Any], *, skipped: int | None = None) -> dict[int, float]:
    """The first of espeak-ng's events in each word of ``text`` (by the word's index), in seconds; ``skipped``: the
    offset of a character espeak was not given (a NUL), after which its offsets are one short."""
    spans = word_spans(text)
    firsts: dict[int, float] = {}
    for event in events["words"]:
        char = event["char"] + (1 if skipped is not None and event["char"] >= skipped else 0)
        word = next(i for i, (_, end) in enumerate(spans) if char < end)
        firsts.setdefault(word, event["ms"] / 1000)
    return firsts


class _Event(ctypes.Structure):
    _fields_ = (
        ("type", ctypes.c_int),
        ("unique_identifier", ctypes.c_uint),
        ("text_position", ctypes.c_int),
        ("length", ctypes.c_int),
        ("audio_position", ctypes.c_int),
        ("sample", ctypes.c_int),
        ("user_data", ctypes.c_void_p),
        ("id", ctypes.c_char * 8),
    )


def main() -> None:
    voice, rate, pitch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    text = sys.stdin.read()
    lib = ctypes.CDLL(str(espeakng_loader.get_library_path()))
    sample_rate = lib.espeak_Initialize(2, 100, os.fsencode(str(espeakng_loader.get_data_path())), 0x8000)
    words: list[dict[str, Any]] = []
    samples = [0]

    def on_audio(_wav: Any, count: int, events: Any) -> int:
        samples[0] += max(0, count)
        index = 0
        while events[index].type != 0:
            event = events[index]
            if event.type == 1:  # espeakEVENT_WORD
                words.append({"char": event.text_position - 1, "length": event.length, "ms": event.audio_position})
            index += 1
        return 0

    callback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(_Event))(on_audio)
    lib.espeak_SetSynthCallback(callback)
    lib.espeak_SetVoiceByName(voice.encode())
    lib.espeak_SetParameter(1, rate, 0)
    lib.espeak_SetParameter(3, pitch, 0)
    data = text.encode() + b"\0"
    lib.espeak_Synth.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int, ctypes.c_uint,
                                 ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p]  # fmt: skip
    lib.espeak_Synth(data, len(data), 0, 1, 0, 1, None, None)
    json.dump({"sample_rate": sample_rate, "samples": samples[0], "words": words}, sys.stdout)


if __name__ == "__main__":
    main()
