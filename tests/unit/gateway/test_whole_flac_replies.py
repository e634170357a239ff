"""A FLAC reply that goes out whole says its length: a cache hit of ``POST /v1/audio/speech`` (the cache in memory or
in Redis) reads in soundfile (libsndfile), which refuses a streamed FLAC's "unknown" sample count, and in PyAV; the
streamed miss before it still reads in PyAV. On the real app in process, its engine in a thread."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

import pytest
import soundfile
from litestar.testing import AsyncTestClient

from gateway.state import gateway_state
from tests.audio_decode import decode_audio
from tests.inprocess import in_process_app
from tests.waiting import wait_for

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

SECONDS_PER_CHAR = 0.01
TEXT = "A reply in FLAC, cached whole."


@pytest.fixture(params=["memory", "redis"])
async def client(request: pytest.FixtureRequest) -> AsyncIterator[AsyncTestClient[Any]]:
    shared = {"redis_url": request.getfixturevalue("redis_url")} if request.param == "redis" else {}
    config = {
        **shared,
        "engines": {"tones": {"kind": "synthetic", "workers": 1, "options": {"seconds_per_char": SECONDS_PER_CHAR}}},
        "aliases": {},
    }
    async with AsyncTestClient(app=in_process_app(config)) as test_client:
        yield test_client


async def test_a_flac_cache_hit_says_its_length(client: AsyncTestClient[Any]) -> None:
    body = {"model": "tones", "voice": "echo", "input": TEXT, "response_format": "flac"}
    cache = gateway_state(client.app).speech.cache

    miss = await client.post("/v1/audio/speech", json=body)
    await wait_for(lambda: cache.writes_in_flight == 0, what="the cache write")
    hit = await client.post("/v1/audio/speech", json=body)

    assert (miss.headers["x-cache"], hit.headers["x-cache"]) == ("miss", "hit")
    streamed = decode_audio(miss.content, "flac")  # streamed: its length unknown, which PyAV reads to the end
    assert streamed.duration == pytest.approx(len(TEXT) * SECONDS_PER_CHAR, abs=0.01)
    samples, rate = soundfile.read(io.BytesIO(hit.content), dtype="int16")
    assert (len(samples), rate) == (len(streamed.samples), 24000)
    assert len(decode_audio(hit.content, "flac").samples) == len(streamed.samples)
