"""espeak-ng places its words exactly: the marks of its streams against espeak-ng's own word events, read by a binding
of their own in a process of their own (``tests/espeak_events.py``)."""

from __future__ import annotations

import pytest

from engines.base import CancelFlag, SynthesisRequest
from engines.espeak import EspeakEngine
from engines.timing import MarkedSynthesis, WordMark, word_spans
from tests.espeak_events import TOLERANCE_S, espeak_events, first_events

TEXT = "Héllo wörld, this is 3.5 tests. Then a second sentence\u0000 — with more words, and a pause!"


def engine_marks(text: str, voice: str, speed: float) -> tuple[list[WordMark], int, int]:
    engine = EspeakEngine()
    info = engine.load()
    synthesis = MarkedSynthesis(engine, SynthesisRequest(text, voice, speed), CancelFlag(), info.sample_rate)
    marks: list[WordMark] = []
    samples = 0
    for chunk, settled in synthesis.chunks():
        samples += chunk.size
        marks += settled
    return [*marks, *synthesis.finish()], samples, info.sample_rate


@pytest.mark.parametrize(("voice", "speed"), [("nova", 1.0), ("onyx", 1.6), ("sage", 0.7)])
def test_word_starts_are_espeaks_own(voice: str, speed: float) -> None:
    marks, samples, rate = engine_marks(TEXT, voice, speed)
    reference = espeak_events(TEXT, voice, speed)
    # The same synthesis, within a few milliseconds: espeak carries a little state from one synthesis to the next.
    assert abs(reference["samples"] - samples) / rate < TOLERANCE_S
    assert [(m.char_start, m.char_end) for m in marks] == word_spans(TEXT)
    # The NUL is not spoken (espeak never sees it): espeak's offsets after it are one short of the request's.
    expected = first_events(TEXT, reference, skipped=TEXT.index("\0"))
    assert len(expected) == len(marks)  # espeak named every word
    errors = {
        TEXT[marks[w].char_start : marks[w].char_end]: marks[w].sample_start / rate - s for w, s in expected.items()
    }
    assert max(map(abs, errors.values())) <= TOLERANCE_S, errors
