"""A long input spoken segment by segment (``gateway/speech/segments.py``): one job at a time, the audio whole and in
order as one stream in every format, leaving early cancels the job in progress and opens no more.

Real synthetic engines run in threads (``tests/inprocess.py``), under the real app where HTTP is involved. The
synthetic engine restarts its tone with each job, so a segmented clip is the segments' clips one after the other:
each the first ``len(segment)`` characters' worth of the clip of the whole text.
"""

from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from litestar.testing import AsyncTestClient

from engines.base import CancelFlag, SynthesisRequest
from engines.errors import SynthesisFailedError
from engines.settings import engine_settings
from engines.synthetic import SyntheticEngine
from gateway.speech.segments import SegmentedStream, split_text
from tests.audio_decode import DURATION_TOLERANCE_S, decode_audio
from tests.inprocess import ThreadBackend, in_process_app

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from litestar import Litestar

SECONDS_PER_CHAR = 0.05  # the shortest segment (5 characters) is longer than the decoders' tolerance
SAMPLES_PER_CHAR = 1200  # at 24 kHz: whole samples per character, so segment lengths add up exactly
MAX_SEGMENT_CHARS = 40
OPTIONS = {"seconds_per_char": SECONDS_PER_CHAR, "chunk_ms": 20}
#: Five segments of different lengths (a segment is whole sentences that fit in 40 characters): their order shows
#: where the tone restarts.
TEXT = (
    "The first sentence is long enough. Short one. Then a third sentence here. Four. "
    "And finally the fifth, which is the last."
)


def segment_texts(text: str = TEXT) -> list[str]:
    return split_text(text, MAX_SEGMENT_CHARS)


def tone(chars: int) -> bytes:
    """The PCM of one synthetic job of ``chars`` characters (voice ``alloy``)."""
    chunks = SyntheticEngine(OPTIONS).synthesize(SynthesisRequest("x" * chars, "alloy"), CancelFlag())
    return b"".join(np.asarray(chunk, dtype="<i2").tobytes() for chunk in chunks)


def segmented_tone(texts: list[str]) -> bytes:
    return b"".join(tone(len(text)) for text in texts)


def test_the_text_is_five_segments_of_different_lengths() -> None:
    texts = segment_texts()
    assert len(texts) == 5 and len({len(text) for text in texts}) == 5
    assert sum(map(len, texts)) == len(TEXT) - 4  # only the four spaces at the cuts are not in a segment


# ----------------------------------------------------------------------------------------------- the stream itself
@pytest.fixture
async def engine() -> AsyncIterator[ThreadBackend]:
    backend = ThreadBackend("tones", engine_settings(kind="synthetic", options=OPTIONS), capacity=4)
    await backend.start()
    yield backend
    await backend.stop()


def segmented(engine: ThreadBackend, text: str = TEXT) -> SegmentedStream:
    return SegmentedStream.of(SynthesisRequest(text, "alloy"), segment_texts(text), engine.open_stream)


async def test_segments_run_one_job_at_a_time_and_their_audio_follows_in_order(engine: ThreadBackend) -> None:
    audio, jobs_at_once = b"", set()
    async with segmented(engine) as pcm:
        async for chunk in pcm:
            jobs_at_once.add(engine.status().active_jobs)
            audio += chunk
    assert jobs_at_once == {1}
    assert engine.served == 5
    assert audio == segmented_tone(segment_texts())
    assert len(audio) == (len(TEXT) - 4) * SAMPLES_PER_CHAR * 2


async def test_leaving_mid_way_cancels_the_job_in_progress_and_opens_no_more(engine: ThreadBackend) -> None:
    first_len = len(tone(len(segment_texts()[0])))
    received = 0
    async with segmented(engine) as pcm:
        async for chunk in pcm:
            received += len(chunk)
            if received > first_len:  # the second segment has begun
                break
    assert engine.status().active_jobs == 0
    assert engine.served == 2


async def test_a_later_segment_that_fails_ends_the_stream_after_the_audio_before_it(engine: ThreadBackend) -> None:
    text = "The first segment speaks well enough. The second one fails: #fail. The third never starts."
    texts = segment_texts(text)
    assert len(texts) == 3 and "#fail" in texts[1]
    audio = b""
    with pytest.raises(SynthesisFailedError, match="injected failure"):
        async with segmented(engine, text) as pcm:
            async for chunk in pcm:
                audio += chunk
    assert audio == tone(len(texts[0]))
    assert engine.served == 2


# ------------------------------------------------------------------------------------------------------ over HTTP
def config(max_segment_chars: int) -> dict[str, Any]:
    return {
        "engines": {"chattts": None, "espeak": None, "tones": {"kind": "synthetic", "options": OPTIONS}},
        "aliases": {"tts-1": ["tones"], "tts-1-hd": ["tones"], "gpt-4o-mini-tts": ["tones"]},
        "speech": {"max_segment_chars": max_segment_chars},
    }


@pytest.fixture
async def http() -> AsyncIterator[AsyncTestClient[Litestar]]:
    async with AsyncTestClient(app=in_process_app(config(MAX_SEGMENT_CHARS))) as client:
        yield client


async def speak(http: AsyncTestClient[Litestar], response_format: str, **extra: Any) -> bytes:
    body = {"model": "tones", "input": TEXT, "voice": "alloy", "response_format": response_format, **extra}
    response = await http.post("/v1/audio/speech", json=body)
    assert response.status_code == 200, response.text
    return response.content


async def test_the_pcm_of_a_segmented_request_is_each_segments_in_order() -> None:
    # One app at a time: the metrics live in the process's one registry.
    async with AsyncTestClient(app=in_process_app(config(4096))) as unsegmented:
        whole = await speak(unsegmented, "pcm")  # segmenting off: one job
    async with AsyncTestClient(app=in_process_app(config(MAX_SEGMENT_CHARS))) as segmenting:
        pcm = await speak(segmenting, "pcm")

    lengths = [len(tone(len(text))) for text in segment_texts()]
    assert pcm == b"".join(whole[:length] for length in lengths)
    assert len(whole) - len(pcm) == 4 * SAMPLES_PER_CHAR * 2  # the spaces at the four cuts, and nothing else


@pytest.mark.parametrize("response_format", ["mp3", "opus", "aac", "flac", "wav", "pcm"])
async def test_a_segmented_request_is_one_whole_stream_in_every_format(
    http: AsyncTestClient[Litestar],
    response_format: str,
) -> None:
    audio = decode_audio(await speak(http, response_format), response_format)
    expected_s = (len(TEXT) - 4) * SECONDS_PER_CHAR
    assert audio.duration == pytest.approx(expected_s, abs=DURATION_TOLERANCE_S)


@pytest.mark.parametrize("response_format", ["opus", "pcm"])
async def test_server_sent_events_of_a_segmented_request_carry_the_whole_stream(
    http: AsyncTestClient[Litestar],
    response_format: str,
) -> None:
    body = await speak(http, response_format, stream_format="sse", word_timestamps=True)
    events = [json.loads(line[len("data: ") :]) for line in body.decode().splitlines() if line.startswith("data: ")]
    *others, done = events
    deltas = [event for event in others if event["type"] == "speech.audio.delta"]
    assert {event["type"] for event in others} == {"speech.audio.delta", "speech.audio.timestamps"}
    audio = b"".join(base64.b64decode(event["audio"]) for event in deltas)
    expected_s = (len(TEXT) - 4) * SECONDS_PER_CHAR
    assert decode_audio(audio, response_format).duration == pytest.approx(expected_s, abs=DURATION_TOLERANCE_S)
    assert done["usage"]["output_tokens"] == pytest.approx(expected_s * 50, abs=1)  # 20 ms frames
