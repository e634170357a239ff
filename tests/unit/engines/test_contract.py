"""The engine contract: one suite, run against every engine that can load here (as Litestar does for its stores)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np
import pytest

from engines.base import (
    MAX_SPEAKER_CHARS,
    OPENAI_VOICES,
    CancelFlag,
    CloningEngine,
    Engine,
    EngineUnavailableError,
    InvalidSynthesisRequestError,
    SynthesisRequest,
)
from engines.registry import ENGINE_KINDS, create_engine
from engines.samples import speaker_from_sample
from tests.chattts_assets import chattts_engine_options

if TYPE_CHECKING:
    from collections.abc import Iterator

    from engines.base import EngineInfo

pytestmark = pytest.mark.slow  # runs ChatTTS: left out of `make quick`

TEXT = "The quick brown fox jumps over the lazy dog. It was not amused."


LOADABLE_KINDS = ["synthetic", "espeak", "chattts"]


def _options(kind: str) -> dict[str, object]:
    # ChatTTS runs on tiny random-weight assets generated for the session (no real weights here).
    return chattts_engine_options() if kind == "chattts" else {}


@pytest.fixture(scope="module", params=LOADABLE_KINDS)
def loaded(request: pytest.FixtureRequest) -> tuple[Engine, EngineInfo]:
    engine = create_engine(request.param, _options(request.param))
    return engine, engine.load()


def speak(engine: Engine, text: str = TEXT, voice: str = "alloy", speed: float = 1.0) -> np.ndarray:
    chunks = list(engine.synthesize(SynthesisRequest(text=text, voice=voice, speed=speed), CancelFlag()))
    assert all(c.dtype == np.int16 and c.ndim == 1 for c in chunks)
    return np.concatenate(chunks)


def test_engine_implements_the_protocol(loaded: tuple[Engine, EngineInfo]) -> None:
    engine, info = loaded
    assert isinstance(engine, Engine)
    assert 8000 <= info.sample_rate <= 48000
    assert info.max_batch >= 1
    low, high = info.speed_range
    assert 0.25 <= low <= 1.0 <= high <= 4.0


def test_every_openai_voice_is_offered(loaded: tuple[Engine, EngineInfo]) -> None:
    _, info = loaded
    assert {v.id for v in info.voices} >= set(OPENAI_VOICES)


def test_speech_is_audible_and_long_enough(loaded: tuple[Engine, EngineInfo]) -> None:
    engine, info = loaded
    audio = speak(engine)
    seconds = len(audio) / info.sample_rate
    assert 1.0 < seconds < 15.0
    assert np.sqrt(np.mean(audio.astype(np.float64) ** 2)) > 300


def test_voices_sound_different(loaded: tuple[Engine, EngineInfo]) -> None:
    engine, _ = loaded
    clips = {voice: speak(engine, "Hello there.", voice) for voice in ("alloy", "onyx", "nova")}
    assert not np.array_equal(clips["alloy"][:4000], clips["onyx"][:4000])
    assert not np.array_equal(clips["onyx"][:4000], clips["nova"][:4000])


def test_same_request_same_duration(loaded: tuple[Engine, EngineInfo]) -> None:
    # Not bit-identical in general (espeak's klatt voices add noise; ChatTTS samples), but the same length.
    engine, _ = loaded
    first, second = len(speak(engine, "Hello there.")), len(speak(engine, "Hello there."))
    assert abs(first - second) <= 0.05 * first


def test_native_speed_changes_duration_when_offered(loaded: tuple[Engine, EngineInfo]) -> None:
    engine, info = loaded
    low, high = info.speed_range
    if (low, high) == (1.0, 1.0):
        pytest.skip("this engine has no native rate control; the gateway time-stretches (tested end to end)")
    normal = len(speak(engine))
    assert len(speak(engine, speed=high)) < 0.8 * normal
    assert len(speak(engine, speed=low)) > 1.25 * normal


def test_unknown_voice_is_an_invalid_request(loaded: tuple[Engine, EngineInfo]) -> None:
    engine, _ = loaded
    with pytest.raises(InvalidSynthesisRequestError) as raised:
        speak(engine, voice="no-such-voice")
    assert raised.value.param == "voice"


def test_streams_several_chunks(loaded: tuple[Engine, EngineInfo]) -> None:
    engine, _ = loaded
    chunks = list(engine.synthesize(SynthesisRequest(text=TEXT * 3, voice="alloy"), CancelFlag()))
    assert len(chunks) >= 5


def test_cancel_stops_promptly_and_engine_stays_usable(loaded: tuple[Engine, EngineInfo]) -> None:
    engine, info = loaded
    cancel = CancelFlag()
    stream: Iterator[np.ndarray] = engine.synthesize(SynthesisRequest(text=TEXT * 20, voice="echo"), cancel)
    received = [next(stream)]
    cancel.set()
    started = time.monotonic()
    received.extend(stream)
    assert time.monotonic() - started < 1.0
    assert sum(len(c) for c in received) / info.sample_rate < 20  # far less than the whole text
    assert len(speak(engine, "Still here.")) > 0


def test_an_engine_that_clones_speaks_with_the_voice_of_a_sample(loaded: tuple[Engine, EngineInfo]) -> None:
    engine, info = loaded
    t = np.arange(2 * info.sample_rate) / info.sample_rate
    pcm = (np.sin(2 * np.pi * 150 * t) * 8000).astype("<i2").tobytes()
    if not info.clones_voices:
        with pytest.raises(InvalidSynthesisRequestError, match="cannot make a voice"):
            speaker_from_sample(engine, info, pcm, info.sample_rate, "This is my voice.")
        return
    assert isinstance(engine, CloningEngine)
    speaker = speaker_from_sample(engine, info, pcm, info.sample_rate, "This is my voice.")
    assert 0 < len(speaker) <= MAX_SPEAKER_CHARS
    assert speaker_from_sample(engine, info, pcm, info.sample_rate, "This is my voice.") == speaker
    request = SynthesisRequest(text="Something new.", voice="voice_x", speaker=speaker, seed=1)
    assert np.concatenate(list(engine.synthesize(request, CancelFlag()))).size > 0


def test_odd_input_does_not_crash(loaded: tuple[Engine, EngineInfo]) -> None:
    engine, _ = loaded
    for text in ("🙂 emoji", "<speak>tags</speak> & ampersands", "nul\x00byte", "x" * 4096, "....", "日本語のテキスト"):
        chunks = list(engine.synthesize(SynthesisRequest(text=text, voice="sage"), CancelFlag()))
        assert all(c.dtype == np.int16 for c in chunks)


@pytest.mark.parametrize("kind", sorted(ENGINE_KINDS))
def test_every_registered_kind_loads_or_says_why(kind: str) -> None:
    engine = create_engine(kind, {})
    try:
        said = engine.load().name
    except EngineUnavailableError as exc:
        said = str(exc)  # the reason /readyz shows
    assert said
