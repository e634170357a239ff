"""Word and character timestamps through the speech pipeline (``gateway/speech/alignment.py``): in output time, with
the time-stretch applied and each segment's offset added, kept by the cache; the characters derived from the words.

Synthetic engines run in threads under the real app (``tests/inprocess.py``); their tone restarts with each job and
lasts exactly ``SAMPLES_PER_CHAR`` per character, so where each segment's audio starts is known to the sample.
"""

from __future__ import annotations

import base64
import itertools
import json
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from litestar.testing import AsyncTestClient

from engines.base import SynthesisRequest
from engines.settings import engine_settings
from engines.timing import word_spans
from gateway.speech.alignment import Alignment, CharacterCursor, WordTime, character_times
from gateway.speech.segments import SegmentedStream, split_text
from tests.inprocess import ThreadBackend, in_process_app

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from litestar import Litestar

RATE = 24000
SAMPLES_PER_CHAR = 1200
OPTIONS = {"seconds_per_char": SAMPLES_PER_CHAR / RATE, "chunk_ms": 20}
MAX_SEGMENT_CHARS = 40
TEXT = (
    "The first sentence is long enough. Short one. Then a third sentence here. Four. "
    "And finally the fifth, which is the last."
)


def assert_characters_keep_to_the_audio(text: str, starts: list[float], ends: list[float], chars: list[str],
                                        audio_s: float) -> None:  # fmt: skip
    assert "".join(chars) == text
    assert all(a <= b for a, b in zip(starts, ends, strict=True))
    assert all(a <= b + 1e-9 for a, b in itertools.pairwise(starts))
    assert all(end <= b + 1e-9 for end, b in zip(ends, starts[1:], strict=False))  # never back: each ends first
    assert all(0 <= t <= audio_s + 1e-6 for t in starts + ends)


# --------------------------------------------------------------------------------------------- the characters
def test_characters_share_their_words_time_and_the_gaps_between_them() -> None:
    text = "Hi, you!"
    words = [WordTime(0, 2, 0.1, 0.3), WordTime(4, 7, 0.5, 0.8)]
    run = character_times(text, words, 1.0, 0, len(text))
    assert run.characters == list(text)
    assert run.starts == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8])
    assert run.ends == pytest.approx([0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1.0])


def test_elevenlabs_shapes_are_renderings_of_the_characters() -> None:
    run = character_times("Hi, you!", [WordTime(0, 2, 0.1, 0.3), WordTime(4, 7, 0.5, 0.8)], 1.0, 4, 8)
    assert run.rest_api() == {
        "characters": ["y", "o", "u", "!"],
        "character_start_times_seconds": [0.5, 0.6, 0.7, 0.8],
        "character_end_times_seconds": [0.6, 0.7, 0.8, 1.0],
    }
    assert run.stream_input(since_s=0.5) == {
        "chars": ["y", "o", "u", "!"],
        "charStartTimesMs": [0, 100, 200, 300],
        "charDurationsMs": [100, 100, 100, 200],
    }


@settings(max_examples=100, deadline=None)
@given(
    text=st.text(alphabet="ab .,!好\n", min_size=0, max_size=40),
    times=st.lists(st.floats(0, 10), min_size=80, max_size=80),
    audio_extra=st.floats(0, 2),
    cuts=st.lists(st.integers(0, 40), max_size=4),
)
def test_derived_characters_join_to_the_text_and_keep_to_the_audio(
    text: str, times: list[float], audio_extra: float, cuts: list[int]
) -> None:
    ordered = sorted(times)
    words = [WordTime(a, b, ordered[2 * i], ordered[2 * i + 1]) for i, (a, b) in enumerate(word_spans(text))]
    audio_s = (words[-1].end_s if words else 0.0) + audio_extra
    alignment = Alignment(text, words=words, audio_s=audio_s)
    whole = alignment.characters()
    assert_characters_keep_to_the_audio(text, whole.starts, whole.ends, whole.characters, audio_s)
    # Handed out run by run as the words become known, the runs join to the same.
    cursor, chars, starts = CharacterCursor(text), [], []
    for known in sorted({min(cut, len(words)) for cut in cuts}):
        if (run := cursor.advance(words[:known])) is not None:
            chars += run.characters
            starts += run.starts
    if (run := cursor.advance(words, audio_s)) is not None:
        chars += run.characters
        starts += run.starts
    assert (chars, starts) == (whole.characters, whole.starts)


# ------------------------------------------------------------------------------------------- segments, in the stream
async def test_the_marks_of_segments_add_up_to_the_whole() -> None:
    backend = ThreadBackend("tones", engine_settings(kind="synthetic", options=OPTIONS))
    await backend.start()
    texts = split_text(TEXT, MAX_SEGMENT_CHARS)
    samples = 0
    async with SegmentedStream.of(SynthesisRequest(TEXT, "alloy"), texts, backend.open_stream) as pcm:
        async for chunk in pcm:
            samples += len(chunk) // 2
            assert all(mark.sample_end <= samples for mark in pcm.marks)  # never ahead of the audio
    marks = pcm.marks
    assert [(m.char_start, m.char_end) for m in marks] == word_spans(TEXT)
    offset = 0
    for text in texts:  # each segment's first word starts where its tone does, its last ends where it ends
        first = next(m for m in marks if m.char_start == TEXT.index(text))
        last = next(m for m in marks if m.char_end == TEXT.index(text) + len(text.rstrip(".,")))
        assert first.sample_start == offset
        offset += len(text) * SAMPLES_PER_CHAR
        assert last.sample_end == offset
    assert samples == offset


# ------------------------------------------------------------------------------------------------------ over HTTP
def config() -> dict[str, Any]:
    return {
        "engines": {"chattts": None, "espeak": None, "tones": {"kind": "synthetic", "options": OPTIONS}},
        "aliases": {"tts-1": ["tones"], "tts-1-hd": ["tones"], "gpt-4o-mini-tts": ["tones"]},
        "speech": {"max_segment_chars": MAX_SEGMENT_CHARS},
    }


@pytest.fixture
async def http() -> AsyncIterator[AsyncTestClient[Litestar]]:
    async with AsyncTestClient(app=in_process_app(config())) as client:
        yield client


async def sse(http: AsyncTestClient[Litestar], text: str, **extra: Any) -> tuple[list[dict[str, Any]], bytes, str]:
    body = {
        "model": "tones",
        "input": text,
        "voice": "alloy",
        "response_format": "pcm",
        "stream_format": "sse",
        "word_timestamps": True,
    }
    response = await http.post("/v1/audio/speech", json=body | extra)
    assert response.status_code == 200, response.text
    events = [json.loads(line[len("data: ") :]) for line in response.text.splitlines() if line.startswith("data: ")]
    audio = b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta")
    return [e for e in events if e["type"] == "speech.audio.timestamps"], audio, response.headers["x-cache"]


def joined(events: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str], list[float], list[float]]:
    words = [word for event in events for word in event["words"]]
    chars = [c for event in events for c in event["alignment"]["characters"]]
    starts = [t for event in events for t in event["alignment"]["character_start_times_seconds"]]
    ends = [t for event in events for t in event["alignment"]["character_end_times_seconds"]]
    return words, chars, starts, ends


async def test_sse_timestamps_cover_the_text_with_segment_offsets_exact(http: AsyncTestClient[Litestar]) -> None:
    events, audio, _ = await sse(http, TEXT)
    audio_s = len(audio) / 2 / RATE
    words, chars, starts, ends = joined(events)
    assert [w["word"] for w in words] == [TEXT[a:b] for a, b in word_spans(TEXT)]
    assert all(e["kind"] == "estimated" for e in events)
    assert_characters_keep_to_the_audio(TEXT, starts, ends, chars, audio_s + 0.001)  # rounded to milliseconds
    offset = 0
    for text in split_text(TEXT, MAX_SEGMENT_CHARS):  # every segment's first word starts where its audio does
        first = next(w for w in words if w["char_start"] == TEXT.index(text))
        assert first["start"] == pytest.approx(offset * SAMPLES_PER_CHAR / RATE, abs=0.0005)
        offset += len(text)
    assert audio_s == pytest.approx(offset * SAMPLES_PER_CHAR / RATE)


async def test_at_speed_2_every_time_halves(http: AsyncTestClient[Litestar]) -> None:
    text = "Twice as fast, half the time. Every word of it."
    normal, normal_audio, _ = await sse(http, text)
    fast, fast_audio, _ = await sse(http, text, speed=2.0)
    assert len(fast_audio) == pytest.approx(len(normal_audio) / 2, rel=0.01)
    slow_words, fast_words = joined(normal)[0], joined(fast)[0]
    assert [w["word"] for w in fast_words] == [w["word"] for w in slow_words]
    for slow, quick in zip(slow_words, fast_words, strict=True):
        assert quick["start"] == pytest.approx(slow["start"] / 2, abs=0.001)
        assert quick["end"] == pytest.approx(slow["end"] / 2, abs=0.001)


async def test_a_cache_hit_has_the_same_timestamps(http: AsyncTestClient[Litestar]) -> None:
    text = "Spoken once, then answered from the cache."
    first, first_audio, first_cache = await sse(http, text)
    again, again_audio, again_cache = await sse(http, text)
    spaced, _, spaced_cache = await sse(http, "  Spoken   once,  then answered from the cache.")  # the same key
    assert (first_cache, again_cache, spaced_cache) == ("miss", "hit", "hit")
    assert again_audio == first_audio
    assert joined(again) == joined(first)
    spaced_words = joined(spaced)[0]
    assert [(w["start"], w["end"]) for w in spaced_words] == [(w["start"], w["end"]) for w in joined(first)[0]]
    assert [w["word"] for w in spaced_words] == [w["word"] for w in joined(first)[0]]
