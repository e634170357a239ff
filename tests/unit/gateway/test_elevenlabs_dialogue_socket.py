"""The Text-to-Dialogue socket's alignment (``gateway/elevenlabs/dialogue_socket.py``): every message's alignment
restarts at zero, both clients' clocks stay on the audio: LiveKit's (each message's audio added) and Pipecat's (each
alignment's end added), and a piece's last alignment ends with a space, as on the text-to-speech sockets."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from gateway.elevenlabs.dialogue_socket import _Cast, _DialoguePiece
from gateway.speech.alignment import CharacterTimes

RATE = 24000
TAG = {"context_id": "c"}


def pcm(seconds: float) -> bytes:
    return bytes(2 * round(seconds * RATE))


def run(first: int, text: str, start_s: float, per_char_s: float) -> CharacterTimes:
    starts = [start_s + i * per_char_s for i in range(len(text))]
    return CharacterTimes(first, list(text), starts, [t + per_char_s for t in starts])


def clocks(messages: list[dict[str, Any]]) -> tuple[list[float], list[float], float]:
    """Each character's start on LiveKit's clock and on Pipecat's, and the audio's length (ms)."""
    heard = pipecat = 0.0
    on_livekit: list[float] = []
    on_pipecat: list[float] = []
    for message in messages:
        alignment = message.get("alignment")
        if alignment is not None:
            on_livekit += [heard + t for t in alignment["char_start_times_ms"]]
            on_pipecat += [pipecat + t for t in alignment["char_start_times_ms"]]
            pipecat += alignment["char_start_times_ms"][-1] + alignment["char_durations_ms"][-1]
        heard += len(base64.b64decode(message.get("audio", ""))) / 2 / RATE * 1000
    return on_livekit, on_pipecat, heard


def speak(piece: _DialoguePiece, chunks: list[tuple[float, CharacterTimes | None]]) -> list[dict[str, Any]]:
    messages: list[str] = []
    heard = 0.0
    for seconds, characters in chunks[:-1]:
        heard += seconds
        messages += piece.audio(pcm(seconds), characters, heard)
    seconds, characters = chunks[-1]
    messages += piece.end(pcm(seconds), characters, heard + seconds, 0.0)
    return [json.loads(m) for m in messages]


def test_each_alignment_spans_its_message_so_both_clocks_agree() -> None:
    # 0.1 s a character; each chunk's words are known with it, the last word reaching past the chunk's end.
    piece = _DialoguePiece(TAG, _Cast(["a"], "a"))
    messages = speak(piece, [(0.25, run(0, "Hel", 0.0, 0.1)), (0.3, run(3, "lo you", 0.3, 0.1)), (0.35, None)])
    audio = [m for m in messages if "audio" in m]
    livekit, pipecat, heard_ms = clocks(audio)
    expected = [i * 100 for i in range(10)]  # the last, the space after "you", at its end
    assert livekit == pytest.approx(expected, abs=1)
    assert pipecat == pytest.approx(expected, abs=1)
    assert "".join(c for m in audio if m["alignment"] for c in m["alignment"]["chars"]) == "Hello you "
    last = audio[-1]["alignment"]
    assert last["char_start_times_ms"][-1] + last["char_durations_ms"][-1] + 550 == pytest.approx(heard_ms, abs=1)
    assert messages[-1] == {"is_final_audio_for_turn": True, "context_id": "c"}


def test_audio_past_the_last_character_is_counted_into_the_next_alignment() -> None:
    """Audio that no character starts in (before the first word, or after the last word known) counts into the next
    alignment: Pipecat's clock stays exact; LiveKit's places that alignment's characters late by that audio's length,
    never by more (its clock is the audio's)."""
    piece = _DialoguePiece(TAG, _Cast(["a"], "a"))
    messages = speak(piece, [(0.2, None), (0.2, run(0, "Hi", 0.1, 0.1)), (0.2, run(2, " there", 0.4, 0.05))])
    livekit, pipecat, _ = clocks([m for m in messages if "audio" in m])
    expected = [100, 200, 400, 450, 500, 550, 600, 650, 650]  # the last, the space after "there"
    assert pipecat == pytest.approx(expected, abs=1)
    late = [200, 200] + [100] * 7  # the first message's 0.2 s; then the 0.1 s after "Hi" (known to end at 0.3 s)
    assert livekit == pytest.approx([t + d for t, d in zip(expected, late, strict=True)], abs=1)


def test_a_pieces_last_alignment_ends_with_a_space_that_lasts_to_its_audios_end() -> None:
    """As ElevenLabs' sockets end every generation's alignment: Pipecat completes a word at the space after it, so
    the last word of a turn gets its own time, and its clock stands at the piece's end, where the next piece's first
    character (no space before it) is counted from."""
    cast = _Cast(["a", "b"], "b")
    first = speak(_DialoguePiece(TAG, cast), [(0.2, run(0, "Hi.", 0.0, 0.05)), (0.1, None)])
    second = speak(_DialoguePiece(TAG, cast), [(0.2, run(0, "Yo.", 0.05, 0.05)), (0.0, None)])
    alignments = [m["alignment"] for m in [*first, *second] if m.get("alignment")]
    assert [c for a in alignments for c in a["chars"]] == [*"Hi. ", *"Yo. "]
    # "Hi." ends at 0.15 s of its piece's 0.3 s: the space after it lasts the rest, alone in the piece's last message.
    assert alignments[1] == {"chars": [" "], "char_start_times_ms": [0], "char_durations_ms": [150]}
    livekit, pipecat, heard_ms = clocks([m for m in [*first, *second] if "audio" in m])
    expected = [0, 50, 100, 150, 350, 400, 450, 500]
    assert pipecat == pytest.approx(expected, abs=1)
    # LiveKit's clock places the space late by the audio after "Hi." that the message before it held (as any owed).
    assert livekit == pytest.approx([*expected[:3], 200, *expected[4:]], abs=1)
    assert heard_ms == pytest.approx(500, abs=1)
