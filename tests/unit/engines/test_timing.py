"""Word marks (``engines/timing.py``): the words of a text, estimated and placed starts, what every mark keeps to."""

from __future__ import annotations

import itertools

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engines.base import CancelFlag, SynthesisRequest
from engines.synthetic import SyntheticEngine
from engines.timing import JobTiming, MarkedSynthesis, WordMark, WordStarts, syllables, word_spans

RATE = 24000
FRAME = RATE // 100


def tone(seconds: float, amplitude: float = 8000.0) -> npt.NDArray[np.int16]:
    t = np.arange(round(seconds * RATE)) / RATE
    return (np.sin(2 * np.pi * 220 * t) * amplitude).astype(np.int16)


def silence(seconds: float) -> npt.NDArray[np.int16]:
    return np.zeros(round(seconds * RATE), dtype=np.int16)


def marks_of(timing: JobTiming, audio: npt.NDArray[np.int16], chunk: int = 2400) -> list[WordMark]:
    marks: list[WordMark] = []
    for start in range(0, audio.size, chunk):
        timing.add_audio(audio[start : start + chunk])
        marks += timing.settled()
    return marks + list(timing.finish())


def assert_well_formed(text: str, marks: list[WordMark], samples: int) -> None:
    """Every word once, in order; starts never go back; each word ends before the next starts, within the audio."""
    assert [(m.char_start, m.char_end) for m in marks] == word_spans(text)
    for mark, following in itertools.pairwise(marks):
        assert mark.sample_end <= following.sample_start
    for mark in marks:
        assert 0 <= mark.sample_start <= mark.sample_end <= samples


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("Hello, world!", ["Hello", "world"]),
        ("Don't e-mail 3.5 or 1,000 U.S.A.", ["Don't", "e-mail", "3.5", "or", "1,000", "U", "S", "A"]),
        ("café naïve e\u0301te\u0301", ["café", "naïve", "e\u0301te\u0301"]),
        ("你好, world", ["你", "好", "world"]),
        ("— ... !!", []),
    ],
)
def test_the_words_of_a_text(text: str, words: list[str]) -> None:
    assert [text[start:end] for start, end in word_spans(text)] == words


def test_syllables_weigh_words() -> None:
    assert syllables("a") == 1
    assert syllables("information") == 4
    assert syllables("2024") > syllables("7")
    assert syllables("好") == 1


def test_estimated_starts_move_to_the_pauses_between_sentences() -> None:
    # Three "sentences" of unequal length, each a burst of sound, 300 ms of silence between them. The text's weights
    # alone put the boundaries off; each moves to where the sound after its pause begins.
    bursts = [0.5, 1.1, 0.4]
    audio = np.concatenate([silence(0.1), tone(bursts[0]), silence(0.3), tone(bursts[1]), silence(0.3), tone(0.4)])
    text = "Go. Information everywhere. Yes."
    marks = marks_of(JobTiming(text, RATE), audio)
    assert_well_formed(text, marks, audio.size)
    onsets = [0.1, 0.1 + bursts[0] + 0.3, 0.1 + bursts[0] + 0.3 + bursts[1] + 0.3]
    starts = {text[m.char_start : m.char_end]: m.sample_start / RATE for m in marks}
    assert starts["Go"] == pytest.approx(onsets[0], abs=0.011)
    assert starts["Information"] == pytest.approx(onsets[1], abs=0.011)
    assert starts["Yes"] == pytest.approx(onsets[2], abs=0.011)
    ends = {text[m.char_start : m.char_end]: m.sample_end / RATE for m in marks}
    assert ends["Go"] == pytest.approx(0.1 + bursts[0], abs=0.011)  # the word ends where its sound does
    assert ends["Yes"] == pytest.approx(audio.size / RATE, abs=0.011)


def test_placed_starts_are_kept_and_settle_as_the_audio_comes() -> None:
    text = "one two three four"
    timing = JobTiming(text, RATE)
    timing.add_starts(WordStarts(((0, 0), (4, 12000))))
    timing.add_audio(tone(0.4))
    assert timing.settled() == ()  # the audio has not reached the second word's start yet
    timing.add_audio(tone(0.2))
    settled = timing.settled()
    assert [(m.char_start, m.sample_start, m.sample_end) for m in settled] == [(0, 0, 12000)]
    timing.add_starts(WordStarts(((14, 30000), (5, 1), (9, 20000))))  # "two" again, then a start before the last
    timing.add_audio(tone(0.8))
    marks = [*settled, *timing.settled(), *timing.finish()]
    assert [m.sample_start for m in marks] == [0, 12000, 21000, 30000]  # three: halfway, by its weight
    assert_well_formed(text, marks, round(1.4 * RATE))


def test_a_text_without_words_has_no_marks() -> None:
    assert marks_of(JobTiming("... !", RATE), tone(0.5)) == []


def test_the_synthetic_engine_gets_estimated_marks() -> None:
    engine = SyntheticEngine({"seconds_per_char": 0.02})
    info = engine.load()
    text = "Tones that say nothing, estimated anyway."
    synthesis = MarkedSynthesis(engine, SynthesisRequest(text, "alloy"), CancelFlag(), info.sample_rate)
    samples, marks = 0, list[WordMark]()
    for chunk, settled in synthesis.chunks():
        samples += chunk.size
        marks += settled
    assert marks == []  # nothing is placed: all of it comes at the end
    marks = list(synthesis.finish())
    assert info.timestamps == "estimated"
    assert_well_formed(text, marks, samples)
    assert marks[0].sample_start == 0  # a tone from the first sample: the voice starts at once
    assert marks[-1].sample_end == samples


_WORDS = st.lists(st.sampled_from(["a", "word", "Hello", "3.5", "don't", "好", "information"]), min_size=0, max_size=12)
_GAPS = st.sampled_from([" ", ", ", ". ", " — ", "\n", "! "])


@settings(max_examples=60, deadline=None)
@given(
    words=_WORDS,
    gaps=st.lists(_GAPS, min_size=12, max_size=12),
    pieces=st.lists(st.tuples(st.booleans(), st.floats(0.01, 0.6)), min_size=1, max_size=8),
    chunk=st.integers(1, 9000),
    placed=st.lists(st.tuples(st.integers(0, 80), st.integers(0, 200_000)), max_size=6),
)
def test_marks_keep_to_the_text_and_the_audio(
    words: list[str],
    gaps: list[str],
    pieces: list[tuple[bool, float]],
    chunk: int,
    placed: list[tuple[int, int]],
) -> None:
    text = "".join(word + gap for word, gap in zip(words, gaps, strict=False)).strip()
    audio = np.concatenate([tone(seconds) if loud else silence(seconds) for loud, seconds in pieces])
    timing = JobTiming(text, RATE)
    timing.add_starts(WordStarts(tuple(sorted(placed, key=lambda p: p[1]))))
    assert_well_formed(text, marks_of(timing, audio, chunk), audio.size)
