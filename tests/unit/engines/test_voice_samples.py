"""Voices from samples through the worker pool (real worker processes of the synthetic engine) and the in-process
test backend; ChatTTS's in test_chattts_samples.py."""

from __future__ import annotations

import asyncio
import hashlib
import math
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from engines.base import CancelFlag, InvalidSynthesisRequestError, SynthesisRequest
from engines.errors import EngineNotReadyError, EngineOverloadedError, SynthesisFailedError
from engines.pool import EnginePool
from engines.samples import MAX_SAMPLE_BYTES, MAX_TRANSCRIPT_CHARS
from engines.settings import engine_settings, local_engine_settings
from engines.synthetic import SyntheticEngine

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

pytestmark = pytest.mark.slow  # starts engine worker processes: left out of `make quick`

RATE = 24000
TRANSCRIPT = "This is how I sound."


def recording(seconds: float = 1.0, frequency: float = 220.0) -> bytes:
    """A tone with a little noise, as int16 little-endian bytes at 24 kHz."""
    t = np.arange(int(seconds * RATE)) / RATE
    noise = np.random.default_rng(int(frequency)).normal(0, 0.02, t.size)
    wave = 0.4 * np.sin(2 * math.pi * frequency * t) + noise
    return (wave * 32767).astype("<i2").tobytes()


@pytest.fixture
async def make_pool() -> AsyncIterator[Callable[..., Any]]:
    pools: list[EnginePool] = []

    async def make(options: dict[str, Any] | None = None, *, kind: str = "synthetic", **settings: Any) -> EnginePool:
        pool = EnginePool("test", local_engine_settings(kind=kind, options=options or {}, **settings))
        pools.append(pool)
        await pool.start()
        assert await pool.wait_ready(60), pool.status().reason
        return pool

    yield make
    for pool in pools:
        await pool.stop()


async def speak(pool: EnginePool, request: SynthesisRequest) -> bytes:
    async with pool.open_stream(request) as stream:
        return b"".join([chunk async for chunk in stream])


# ----------------------------------------------------------------- synthetic engine
async def test_the_pool_answers_the_engines_own_speaker(make_pool: Callable[..., Any]) -> None:
    pool = await make_pool()
    pcm = recording()
    speaker = await pool.speaker_from_sample(pcm, RATE, TRANSCRIPT)
    expected = "sample:" + hashlib.sha256(f"{RATE}:{TRANSCRIPT}:".encode() + pcm).hexdigest()[:32]
    assert speaker == expected
    assert await pool.speaker_from_sample(pcm, RATE, TRANSCRIPT) == speaker, "the same sample, the same voice"
    assert await pool.speaker_from_sample(pcm, RATE, TRANSCRIPT + "!") != speaker
    assert await pool.speaker_from_sample(recording(frequency=330.0), RATE, TRANSCRIPT) != speaker


async def test_a_busy_worker_answers_a_sample_between_chunks(make_pool: Callable[..., Any]) -> None:
    pool = await make_pool({"rtf": 1.0, "seconds_per_char": 0.05})
    speaking = asyncio.create_task(speak(pool, SynthesisRequest("x" * 40, "nova")))  # 2 s at real time
    await asyncio.sleep(0.3)
    started = time.monotonic()
    speaker = await pool.speaker_from_sample(recording(), RATE, TRANSCRIPT)
    assert time.monotonic() - started < 0.5, "one chunk's time, not the rest of the synthesis"
    assert not speaking.done()
    assert speaker.startswith("sample:")
    assert len(await speaking) == 2 * RATE * 2, "the synthesis is untouched"
    assert pool.status().queued == 0


async def test_an_engine_that_cannot_clone_refuses_at_once(make_pool: Callable[..., Any]) -> None:
    pool = await make_pool({"clones_voices": False})
    assert pool.info is not None and not pool.info.clones_voices
    with pytest.raises(InvalidSynthesisRequestError, match="cannot make a voice") as refused:
        await pool.speaker_from_sample(recording(), RATE, TRANSCRIPT)
    assert refused.value.param == "audio_sample"


@pytest.mark.parametrize(
    ("pcm", "rate", "transcript", "param"),
    [
        (b"", RATE, TRANSCRIPT, "audio_sample"),
        (b"\0\0\0", RATE, TRANSCRIPT, "audio_sample"),
        (b"\0" * (MAX_SAMPLE_BYTES + 2), RATE, TRANSCRIPT, "audio_sample"),
        (b"\0\0", 100, TRANSCRIPT, "audio_sample"),
        (b"\0\0", RATE, "  ", "transcript"),
        (b"\0\0", RATE, "x" * (MAX_TRANSCRIPT_CHARS + 1), "transcript"),
    ],
)
async def test_unusable_samples_are_refused_naming_the_field(
    make_pool: Callable[..., Any], pcm: bytes, rate: int, transcript: str, param: str
) -> None:
    pool = await make_pool()
    with pytest.raises(InvalidSynthesisRequestError) as refused:
        await pool.speaker_from_sample(pcm, rate, transcript)
    assert refused.value.param == param


async def test_an_engine_failure_is_a_failure_and_the_worker_goes_on(make_pool: Callable[..., Any]) -> None:
    pool = await make_pool()
    with pytest.raises(SynthesisFailedError, match="injected failure"):
        await pool.speaker_from_sample(recording(), RATE, "#fail")
    assert (await pool.speaker_from_sample(recording(), RATE, TRANSCRIPT)).startswith("sample:")
    assert pool.status().restarts == 0


async def test_a_worker_dying_mid_sample_is_a_failure(make_pool: Callable[..., Any]) -> None:
    pool = await make_pool()
    with pytest.raises(SynthesisFailedError, match="worker died"):
        await pool.speaker_from_sample(recording(), RATE, "#crash-after=0")
    assert await pool.wait_ready(30)
    assert pool.status().restarts == 1
    assert (await pool.speaker_from_sample(recording(), RATE, TRANSCRIPT)).startswith("sample:")


async def test_a_stuck_encoder_times_out_and_its_worker_is_replaced(make_pool: Callable[..., Any]) -> None:
    pool = await make_pool(stall_timeout_s=1.0)
    started = time.monotonic()
    stuck = [asyncio.create_task(pool.speaker_from_sample(recording(), RATE, "#hang-after=0")) for _ in range(4)]
    await asyncio.sleep(0.2)
    with pytest.raises(EngineOverloadedError):
        await pool.speaker_from_sample(recording(), RATE, TRANSCRIPT)
    for task in stuck:
        with pytest.raises(SynthesisFailedError, match=r"in time|worker died"):
            await task
    assert time.monotonic() - started < 5
    await asyncio.sleep(0.1)
    assert await pool.wait_ready(30)
    assert pool.status().restarts == 1
    assert (await pool.speaker_from_sample(recording(), RATE, TRANSCRIPT)).startswith("sample:")


async def test_a_pool_not_ready_says_so(make_pool: Callable[..., Any]) -> None:
    pool = EnginePool("test", local_engine_settings(kind="synthetic", options={"load_delay_s": 5.0}))
    await pool.start()
    try:
        with pytest.raises(EngineNotReadyError):
            await pool.speaker_from_sample(recording(), RATE, TRANSCRIPT)
    finally:
        await pool.stop()


async def test_the_thread_backend_answers_as_the_pool(make_pool: Callable[..., Any]) -> None:
    from tests.inprocess import ThreadBackend  # it imports the whole app: only this test needs it

    pool = await make_pool()
    backend = ThreadBackend("test", engine_settings(kind="synthetic", options={}))
    await backend.start()
    pcm = recording()
    assert await backend.speaker_from_sample(pcm, RATE, TRANSCRIPT) == await pool.speaker_from_sample(
        pcm, RATE, TRANSCRIPT
    )
    with pytest.raises(SynthesisFailedError):
        await backend.speaker_from_sample(pcm, RATE, "#fail")
    with pytest.raises(InvalidSynthesisRequestError) as refused:
        await backend.speaker_from_sample(pcm, RATE, "")
    assert refused.value.param == "transcript"
    mute = ThreadBackend("mute", engine_settings(kind="synthetic", options={"clones_voices": False}))
    await mute.start()
    with pytest.raises(InvalidSynthesisRequestError, match="'mute' cannot make a voice"):
        await mute.speaker_from_sample(pcm, RATE, TRANSCRIPT)


def test_a_sample_speaker_speaks_in_its_own_tone() -> None:
    engine = SyntheticEngine()
    engine.load()
    speaker = engine.speaker_from_sample(np.frombuffer(recording(), "<i2"), RATE, TRANSCRIPT)
    other = engine.speaker_from_sample(np.frombuffer(recording(0.5), "<i2"), RATE, TRANSCRIPT)
    first, second = (
        np.concatenate(list(engine.synthesize(SynthesisRequest("x" * 10, "custom", speaker=s), CancelFlag())))
        for s in (speaker, other)
    )
    assert not np.array_equal(first, second)
