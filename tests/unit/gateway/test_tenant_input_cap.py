"""A tenant allowed longer inputs on ``/v1/audio/speech`` (``limits.speech_input_characters``, issue #36 item 4): its
long input streams whole, segment by segment; every other tenant keeps OpenAI's 4096; no tenant goes beyond the
server's ``speech.max_input_chars``, whose bodies the route then takes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from litestar.testing import AsyncTestClient

from auth.keys import generate_api_key, hash_api_key
from tests.audio_decode import decode_audio
from tests.inprocess import in_process_app

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

LONG, GREEDY, PLAIN = generate_api_key(), generate_api_key(), generate_api_key()
SECONDS_PER_CHAR = 0.001
CEILING = 8000


def tenant(name: str, key: str, cap: int | None) -> dict[str, Any]:
    return {"name": name, "api_key_sha256": [hash_api_key(key)], "limits": {"speech_input_characters": cap}}


@pytest.fixture
async def client() -> AsyncIterator[AsyncTestClient[Any]]:
    config = {
        "speech": {"max_input_chars": CEILING},
        "auth": {
            "tenants": [tenant("long", LONG, 6000), tenant("greedy", GREEDY, 50_000), tenant("plain", PLAIN, None)]
        },
        "engines": {"tones": {"kind": "synthetic", "workers": 1, "options": {"seconds_per_char": SECONDS_PER_CHAR}}},
        "aliases": {"tts-1": ["tones"]},
    }
    async with AsyncTestClient(app=in_process_app(config)) as test_client:
        yield test_client


async def speak(client: AsyncTestClient[Any], key: str, chars: int) -> Any:
    text = ("Word " * chars)[:chars]
    body = {"model": "tts-1", "voice": "alloy", "input": text, "response_format": "wav"}
    return await client.post("/v1/audio/speech", json=body, headers={"Authorization": f"Bearer {key}"})


async def test_a_tenant_allowed_more_gets_its_long_input_spoken_whole(client: AsyncTestClient[Any]) -> None:
    response = await speak(client, LONG, 6000)
    assert response.status_code == 200, response.text
    assert decode_audio(response.content, "wav").duration == pytest.approx(6000 * SECONDS_PER_CHAR, abs=0.05)
    refused = await speak(client, LONG, 6001)
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "input"


@pytest.mark.parametrize(("key", "cap"), [(PLAIN, 4096), (GREEDY, CEILING)], ids=["default", "server-ceiling"])
async def test_other_tenants_keep_their_caps(client: AsyncTestClient[Any], key: str, cap: int) -> None:
    assert (await speak(client, key, cap)).status_code == 200
    refused = await speak(client, key, cap + 1)
    assert refused.status_code == 400
    assert refused.json()["error"] == {
        "message": f"Invalid value for 'input': String should have at most {cap} characters",
        "type": "invalid_request_error",
        "param": "input",
        "code": "invalid_value",
    }
