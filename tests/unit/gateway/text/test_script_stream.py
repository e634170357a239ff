"""A script's segments as one stream (``gateway/speech/segments.py``): jobs and exact silences in order, each job in
its own voice, word marks moved by the silences; on the synthetic engine in a thread (``tests/inprocess.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from engines.base import SynthesisRequest
from engines.errors import EngineNotReadyError, SynthesisFailedError
from engines.settings import engine_settings
from gateway.speech.segments import SegmentedStream, script_segments
from gateway.text import Script, Silence, Speech
from tests.inprocess import ThreadBackend

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

RATE = 24_000
SAMPLES_PER_CHAR = 240  # 0.01 s a character


@pytest.fixture
async def engine() -> AsyncIterator[ThreadBackend]:
    options = {"seconds_per_char": SAMPLES_PER_CHAR / RATE, "chunk_ms": 20}
    backend = ThreadBackend("tones", engine_settings(kind="synthetic", options=options), capacity=4)
    await backend.start()
    yield backend
    await backend.stop()


def stream(engine: ThreadBackend, script: Script, max_chars: int = 300) -> SegmentedStream:
    whole = SynthesisRequest(script.text, "alloy")
    jobs = [
        SynthesisRequest(p.text, p.voice or "alloy") if isinstance(p, Speech) else p for p in script.parts
    ]  # what the planner makes of it, at speed 1
    segments, offsets = script_segments(jobs, whole.text, max_chars)
    return SegmentedStream(segments, engine.open_stream, offsets, engine)


async def test_silences_are_exact_zeros_between_the_jobs_and_move_the_words(engine: ThreadBackend) -> None:
    script = Script((Silence(0.25), Speech("one two"), Silence(1.5), Speech("three", "onyx")))
    async with stream(engine, script) as pcm:
        audio = b"".join([chunk async for chunk in pcm])
        marks = list(pcm.marks)
    lead, first, pause = RATE // 4, 7 * SAMPLES_PER_CHAR, RATE * 3 // 2
    assert len(audio) // 2 == lead + first + pause + 5 * SAMPLES_PER_CHAR
    assert not audio[: 2 * lead].strip(b"\0")
    assert not audio[2 * (lead + first) : 2 * (lead + first + pause)].strip(b"\0")
    assert [script.text[m.char_start : m.char_end] for m in marks] == ["one", "two", "three"]
    assert marks[0].sample_start >= lead
    assert marks[2].sample_start >= lead + first + pause


async def test_a_long_span_is_cut_into_jobs_of_its_own_voice(engine: ThreadBackend) -> None:
    script = Script((Speech("First part here. Second part here.", "onyx"), Silence(0.1), Speech("End.")))
    segments, offsets = script_segments(
        [SynthesisRequest(script.parts[0].text, "onyx"), Silence(0.1), SynthesisRequest("End.", "alloy")],  # type: ignore[union-attr]
        script.text,
        20,
    )
    assert [(s.text, s.voice) if isinstance(s, SynthesisRequest) else s for s in segments] == [
        ("First part here.", "onyx"), ("Second part here.", "onyx"), Silence(0.1), ("End.", "alloy"),
    ]  # fmt: skip
    assert offsets == [0, 17, 34, 35]  # a silence: where the text before it ends


async def test_a_leading_silence_waits_for_the_first_audio(engine: ThreadBackend) -> None:
    """Nothing goes out before the engine's first audio: a job that fails before it can still be retried."""
    async with stream(engine, Script((Silence(1.0), Speech("boom #fail")))) as pcm:
        with pytest.raises(SynthesisFailedError):
            await anext(aiter(pcm))


async def test_silences_alone_are_zeros_at_the_engines_rate_and_ask_it_for_no_job(engine: ThreadBackend) -> None:
    """A text of breaks alone: an engine may not be able to say nothing, so it is not asked to."""
    async with stream(engine, Script((Silence(1.0), Silence(0.5)))) as pcm:
        chunks = [chunk async for chunk in pcm]
    assert (pcm.sample_rate, pcm.info) == (RATE, engine.info)
    assert len(b"".join(chunks)) == 2 * RATE * 3 // 2
    assert not b"".join(chunks).strip(b"\0")
    assert len(chunks) > 1  # in pieces, as an engine's audio would come: nothing waits for a first job
    assert (engine.served, list(pcm.marks)) == (0, [])


async def test_silences_alone_for_an_engine_not_loaded_are_not_ready() -> None:
    """As a request for that engine would be (the failover tries the next engine of the alias)."""
    loading = ThreadBackend("loading", engine_settings(kind="synthetic", options={}))
    with pytest.raises(EngineNotReadyError, match="'loading'"):
        async with stream(loading, Script((Silence(1.0),))):
            pass
