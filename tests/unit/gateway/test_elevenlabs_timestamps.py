"""The pieces of ElevenLabs' ``…/stream/with-timestamps``: whole samples, characters by their start times."""

from __future__ import annotations

from gateway.audio import Codec, Encoding
from gateway.elevenlabs.timestamps import PendingCharacters, WholeUnits
from gateway.speech.alignment import CharacterTimes


def test_pcm_pieces_hold_whole_samples_and_mp3_any_bytes() -> None:
    pcm = WholeUnits(Encoding(Codec.PCM, 16000))
    assert (pcm.take(b"abc"), pcm.take(b"de"), pcm.take(b"f"), pcm.rest()) == (b"ab", b"cd", b"ef", b"")
    mp3 = WholeUnits(Encoding(Codec.MP3, 44100, 128))
    assert (mp3.take(b"abc"), mp3.rest()) == (b"abc", b"")


def test_characters_go_out_by_their_start_times_in_order() -> None:
    pending = PendingCharacters()
    pending.add(CharacterTimes(0, list("ab "), [0.0, 0.1, 0.2], [0.1, 0.2, 0.3]))
    pending.add(CharacterTimes(3, list("cd"), [0.3, 0.4], [0.4, 0.5]))

    assert pending.until(0.0) is None
    first = pending.until(0.25)
    assert first == CharacterTimes(0, list("ab "), [0.0, 0.1, 0.2], [0.1, 0.2, 0.3])
    assert pending.until() == CharacterTimes(3, list("cd"), [0.3, 0.4], [0.4, 0.5])
    assert pending.until() is None
