"""ElevenLabs' whole-audio routes hold at most ``speech.max_whole_audio_s`` of audio (issue #47: a 2.7 KB body of
silence breaks made an 84 MB response and +178 MB of server memory): past it, ElevenLabs' 400 ``audio_too_long``;
the stream routes, which hold none of it, send it all. On the real app in process."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest
from litestar.testing import AsyncTestClient

from tests.inprocess import in_process_app

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

SECONDS_PER_CHAR = 0.05
MAX_WHOLE_S = 2.0
LONG = "x" * 100  # 5 s
SHORT = "x" * 20  # 1 s
PCM = {"output_format": "pcm_24000"}

Route = Callable[[str], tuple[str, dict[str, Any]]]


@pytest.fixture(scope="module")
async def client() -> AsyncIterator[AsyncTestClient[Any]]:
    config = {
        "engines": {"tones": {"kind": "synthetic", "workers": 1, "options": {"seconds_per_char": SECONDS_PER_CHAR}}},
        "aliases": {},
        "speech": {"max_whole_audio_s": MAX_WHOLE_S},
    }
    async with AsyncTestClient(app=in_process_app(config)) as test_client:
        yield test_client


def speech(text: str) -> tuple[str, dict[str, Any]]:
    return "/v1/text-to-speech/alloy", {"text": text, "model_id": "tones"}


def timestamps(text: str) -> tuple[str, dict[str, Any]]:
    return "/v1/text-to-speech/alloy/with-timestamps", {"text": text, "model_id": "tones"}


def dialogue(text: str) -> tuple[str, dict[str, Any]]:
    return "/v1/text-to-dialogue", {"inputs": [{"text": text, "voice_id": "alloy"}], "model_id": "tones"}


@pytest.mark.parametrize("route", [speech, timestamps, dialogue])
async def test_a_whole_response_past_the_bound_is_elevenlabs_400(client: AsyncTestClient[Any], route: Route) -> None:
    path, body = route(LONG)
    refused = await client.post(path, params=PCM, json=body)
    assert refused.status_code == 400, refused.text
    assert refused.json()["detail"]["status"] == "audio_too_long"
    path, body = route(SHORT)
    served = await client.post(path, params=PCM, json=body)
    assert served.status_code == 200, served.text


async def test_a_cache_hit_past_the_bound_is_refused_too(client: AsyncTestClient[Any]) -> None:
    path, body = speech(LONG + " cached")
    for cache in ("miss", "hit"):  # spoken by the stream route, then from the cache
        streamed = await client.post(f"{path}/stream", params=PCM, json=body)
        assert (streamed.status_code, streamed.headers["x-cache"]) == (200, cache)
    refused = await client.post(path, params=PCM, json=body)
    assert refused.status_code == 400, refused.text
    assert refused.json()["detail"]["status"] == "audio_too_long"


async def test_the_stream_route_sends_it_all(client: AsyncTestClient[Any]) -> None:
    path, body = speech(LONG)
    streamed = await client.post(f"{path}/stream", params=PCM, json=body)
    assert streamed.status_code == 200
    assert len(streamed.content) == round(len(LONG) * SECONDS_PER_CHAR * 24000) * 2
