"""The espeak engine against the real espeak-ng shipped by the ``espeakng-loader`` wheel (nothing is mocked)."""

from __future__ import annotations

import itertools
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import espeakng_loader
import numpy as np
import pytest

from engines.base import OPENAI_VOICES, Engine, EngineInfo, InvalidSynthesisRequestError, SynthesisRequest
from engines.espeak import EspeakEngine

if TYPE_CHECKING:
    import numpy.typing as npt

HELLO = "Hello world, this is a test."
LONG_TEXT = " ".join(f"This is sentence number {n}, which the engine should speak without trouble." for n in range(20))
LONGEST_TEXT = (LONG_TEXT + " ") * 3  # ~4.7k characters: about four minutes of speech, over half a second to make
MALE = ("onyx", "echo", "ash", "ballad", "verse")
FEMALE = ("nova", "shimmer", "coral", "sage", "marin")
NEUTRAL = ("alloy", "fable", "cedar")
REPO_ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def engine() -> EspeakEngine:
    return EspeakEngine()


@pytest.fixture(scope="module")
def info(engine: EspeakEngine) -> EngineInfo:
    return engine.load()


@pytest.fixture(scope="module")
def longest_text_seconds(engine: EspeakEngine, info: EngineInfo) -> float:
    """How long espeak takes to speak all of ``LONGEST_TEXT``; stopping early must take a small part of that."""
    del info  # loaded
    started = time.perf_counter()
    _speak(engine, LONGEST_TEXT)
    return time.perf_counter() - started


def _speak(engine: EspeakEngine, text: str, voice: str = "alloy", speed: float = 1.0) -> list[npt.NDArray[np.int16]]:
    return list(engine.synthesize(SynthesisRequest(text, voice, speed), threading.Event()))


def _joined(chunks: list[npt.NDArray[np.int16]]) -> npt.NDArray[np.float64]:
    return np.concatenate(chunks).astype(np.float64) if chunks else np.zeros(0)


def _rms(samples: npt.NDArray[np.float64]) -> float:
    return float(np.sqrt(np.mean(samples**2))) if samples.size else 0.0


def _median_pitch(samples: npt.NDArray[np.float64], rate: int) -> float:
    """Median fundamental frequency of the voiced 40 ms frames, by autocorrelation."""
    frame = int(0.04 * rate)
    shortest, longest = rate // 400, rate // 60
    pitches = []
    for start in range(0, samples.size - frame, frame // 2):
        window = samples[start : start + frame] - samples[start : start + frame].mean()
        if _rms(window) < 500:
            continue
        spectrum = np.fft.rfft(window, 2 * frame)
        autocorrelation = np.fft.irfft(spectrum * np.conj(spectrum))[:frame]
        lag = shortest + int(np.argmax(autocorrelation[shortest:longest]))
        if autocorrelation[lag] > 0.5 * autocorrelation[0]:
            pitches.append(rate / lag)
    return float(np.median(pitches))


def _spectral_envelope(samples: npt.NDArray[np.float64], rate: int) -> npt.NDArray[np.float64]:
    """Mean log magnitude in 20 bands up to ~4 kHz, level removed: the voice's timbre."""
    frames = np.lib.stride_tricks.sliding_window_view(samples, 1024)[::512] * np.hanning(1024)
    spectrum = np.abs(np.fft.rfft(frames, axis=1)).mean(axis=0)[: 4000 * 1024 // rate]
    envelope = np.log(np.array([band.mean() for band in np.array_split(spectrum, 20)], dtype=np.float64) + 1)
    return envelope - float(envelope.mean())


def _synthesis_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == "espeak-synthesis"]


def test_is_an_engine() -> None:
    assert isinstance(EspeakEngine(), Engine)


def test_load_reports_every_openai_voice(info: EngineInfo) -> None:
    assert info.name == "espeak"
    assert 16000 <= info.sample_rate <= 48000
    assert [voice.id for voice in info.voices] == list(OPENAI_VOICES)
    assert all(voice.description for voice in info.voices)
    assert len({voice.description for voice in info.voices}) == len(OPENAI_VOICES)
    low, high = info.speed_range
    assert low < 1.0 < high


def test_speaks_hello_world_in_chunks(engine: EspeakEngine, info: EngineInfo) -> None:
    chunks = _speak(engine, HELLO)

    assert len(chunks) >= 3
    assert all(chunk.dtype == np.int16 and chunk.ndim == 1 and chunk.size > 0 for chunk in chunks)
    samples = _joined(chunks)
    assert 0.5 <= samples.size / info.sample_rate <= 5.0
    assert _rms(samples) > 1000


def test_chunks_are_bounded_by_chunk_ms(info: EngineInfo) -> None:
    engine = EspeakEngine({"chunk_ms": 20})
    engine.load()

    chunks = _speak(engine, HELLO)

    assert max(chunk.size for chunk in chunks) <= info.sample_rate * 20 // 1000
    assert len(chunks) >= 25


def test_native_speed_range_changes_the_duration(engine: EspeakEngine, info: EngineInfo) -> None:
    slowest, fastest = info.speed_range
    normal = _joined(_speak(engine, HELLO)).size

    assert _joined(_speak(engine, HELLO, speed=fastest)).size < 0.7 * normal
    assert _joined(_speak(engine, HELLO, speed=slowest)).size > 1.4 * normal


def test_voices_sound_different(engine: EspeakEngine, info: EngineInfo) -> None:
    text = "The quick brown fox jumps over the lazy dog. She sells sea shells by the sea shore."
    speech = {voice: _joined(_speak(engine, text, voice)) for voice in OPENAI_VOICES}
    pitch = {voice: _median_pitch(samples, info.sample_rate) for voice, samples in speech.items()}
    timbre = {voice: _spectral_envelope(samples, info.sample_rate) for voice, samples in speech.items()}

    for one, other in itertools.combinations(OPENAI_VOICES, 2):
        pitch_ratio = max(pitch[one], pitch[other]) / min(pitch[one], pitch[other])
        timbre_distance = float(np.linalg.norm(timbre[one] - timbre[other]))
        assert pitch_ratio > 1.06 or timbre_distance > 0.4, (one, other, pitch_ratio, timbre_distance)
    assert max(pitch[voice] for voice in MALE) < min(pitch[voice] for voice in NEUTRAL)
    assert max(pitch[voice] for voice in NEUTRAL) < min(pitch[voice] for voice in FEMALE)


def test_first_chunk_comes_before_synthesis_ends(engine: EspeakEngine) -> None:
    def first_chunk_and_total() -> tuple[float, float]:
        started = time.perf_counter()
        chunks = engine.synthesize(SynthesisRequest(LONG_TEXT, "nova"), threading.Event())
        next(chunks)
        first = time.perf_counter() - started
        for _ in chunks:
            pass
        return first, time.perf_counter() - started

    # The best of three, so that one stall of a busy machine cannot decide the outcome.
    first, total = min((first_chunk_and_total() for _ in range(3)), key=lambda times: times[0] / times[1])
    assert first < 0.2 * total


def test_cancel_ends_the_stream_promptly_and_leaves_the_engine_usable(
    engine: EspeakEngine, info: EngineInfo, longest_text_seconds: float
) -> None:
    cancel = threading.Event()
    chunks = engine.synthesize(SynthesisRequest(LONGEST_TEXT, "onyx"), cancel)
    received = [next(chunks)]
    cancel.set()
    started = time.perf_counter()

    received.extend(chunks)

    # Well under the time espeak needs for the rest of the text: it was aborted, not left to finish.
    assert time.perf_counter() - started < min(0.5, 0.25 * longest_text_seconds)
    assert _joined(received).size < 5 * info.sample_rate
    assert not _synthesis_threads()
    assert _rms(_joined(_speak(engine, HELLO, "onyx"))) > 1000


def test_closing_the_stream_stops_espeak_and_leaves_the_engine_usable(
    engine: EspeakEngine, longest_text_seconds: float
) -> None:
    chunks = engine.synthesize(SynthesisRequest(LONGEST_TEXT, "sage"), threading.Event())
    next(chunks)
    assert _synthesis_threads()  # espeak waits for the consumer: the text is far longer than what may be queued
    started = time.perf_counter()

    chunks.close()

    assert time.perf_counter() - started < min(0.5, 0.25 * longest_text_seconds)
    assert not _synthesis_threads()
    assert _rms(_joined(_speak(engine, HELLO, "sage"))) > 1000


def test_one_synthesis_at_a_time(engine: EspeakEngine) -> None:
    first = engine.synthesize(SynthesisRequest(LONG_TEXT, "ash"), threading.Event())
    next(first)

    with pytest.raises(RuntimeError, match="busy"):
        _speak(engine, HELLO)
    first.close()
    assert _speak(engine, HELLO)


@pytest.mark.parametrize(
    "text",
    [
        "Emoji 😀🎉👍🏽 and flags 🇫🇷!",
        "Control\x01characters\x07and\x1b[31mescapes\x7f\u0085.",
        "Null\x00bytes\x00inside.",
        "Lone \ud800 surrogate.",
        "<speak><prosody rate='x-slow'>Tags</prosody> are <break time='3s'/> text.</speak>",
        "Right\u202eto\u200bleft\ufeffmarks.",
        "Mixed scripts: Привет, 你好, مرحبا, שלום, こんにちは, 안녕하세요, नमस्ते.",
        "?!.,;:" * 20,
        "a" * 4096,
        ("word " * 820)[:4096],
    ],
    ids=["emoji", "control", "nul", "surrogate", "ssml", "bidi", "scripts", "punctuation", "long-word", "long-text"],
)
def test_odd_text_is_spoken_without_crashing(engine: EspeakEngine, text: str) -> None:
    chunks = _speak(engine, text)

    assert all(chunk.dtype == np.int16 for chunk in chunks)


def test_ssml_is_read_as_plain_text(engine: EspeakEngine) -> None:
    plain = _joined(_speak(engine, "Hi.")).size
    tagged = _joined(_speak(engine, "<speak>Hi.</speak>")).size

    assert tagged > 2 * plain  # the tags are spoken, not obeyed


def test_unknown_voice_is_an_invalid_request(engine: EspeakEngine) -> None:
    with pytest.raises(InvalidSynthesisRequestError) as raised:
        _speak(engine, HELLO, voice="en-us")

    assert raised.value.param == "voice"
    assert _speak(engine, HELLO)


def test_custom_speaker_is_an_invalid_request(engine: EspeakEngine) -> None:
    request = SynthesisRequest(HELLO, "alloy", speaker="spk_emb")

    with pytest.raises(InvalidSynthesisRequestError) as raised:
        list(engine.synthesize(request, threading.Event()))

    assert raised.value.param == "voice"


def test_instructions_are_ignored(engine: EspeakEngine) -> None:
    request = SynthesisRequest(HELLO, "coral", instructions="Whisper, sadly.")

    assert _rms(_joined(list(engine.synthesize(request, threading.Event())))) > 1000


def test_synthesize_before_load_is_refused() -> None:
    with pytest.raises(RuntimeError, match="before load"):
        _speak(EspeakEngine(), HELLO)


@pytest.mark.parametrize(
    "options",
    [{"voice": "en"}, {"chunk_ms": "fifty"}, {"chunk_ms": True}, {"chunk_ms": 0}, {"chunk_ms": 5000}],
)
def test_bad_options_are_refused(options: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="EspeakOptions"):
        EspeakEngine(options)


def test_options_from_environment_strings_are_coerced() -> None:
    # Environment variables always arrive as strings: `CHATTTS_GATEWAY_ENGINES__ESPEAK__OPTIONS__CHUNK_MS=50`.
    assert EspeakEngine({"chunk_ms": "50"})._chunk_ms == 50


def _load_with_fake_loader(tmp_path: Path, library: str, data: str) -> str:
    """Load the engine in a fresh process whose ``espeakng_loader`` points at ``library`` and ``data``."""
    (tmp_path / "espeakng_loader.py").write_text(
        f"def get_library_path():\n    return {library!r}\n\ndef get_data_path():\n    return {data!r}\n"
    )
    script = textwrap.dedent(
        """
        from engines.base import EngineUnavailableError
        from engines.espeak import EspeakEngine
        try:
            EspeakEngine().load()
        except EngineUnavailableError as exc:
            print("unavailable:", exc)
        """
    )
    paths = [str(tmp_path), str(REPO_ROOT)]
    command = [sys.executable, "-c", f"import sys; sys.path[:0] = {paths!r}\n{script}"]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
    assert completed.returncode == 0, completed.stderr
    return completed.stdout


def test_missing_library_makes_the_engine_unavailable(tmp_path: Path) -> None:
    output = _load_with_fake_loader(tmp_path, str(tmp_path / "libespeak-ng.so"), str(tmp_path))

    assert output.startswith("unavailable:")
    assert "libespeak-ng not found" in output


def test_missing_data_makes_the_engine_unavailable(tmp_path: Path) -> None:
    empty = tmp_path / "espeak-ng-data"
    empty.mkdir()

    output = _load_with_fake_loader(tmp_path, str(espeakng_loader.get_library_path()), str(empty))

    assert output.startswith("unavailable:")
    assert str(empty) in output
