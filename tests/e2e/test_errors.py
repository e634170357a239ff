"""Bad input gets OpenAI's error body and the status the SDK maps, naming the parameter; never a 500 or a hang."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import openai
import pytest

from tests.openai_errors import BAD_BODIES, VALID, assert_openai_error, with_

if TYPE_CHECKING:
    import httpx


@pytest.mark.parametrize(
    ("body", "status", "param"), [case[1:] for case in BAD_BODIES], ids=[case[0] for case in BAD_BODIES]
)
async def test_bad_bodies(http: httpx.AsyncClient, body: dict[str, Any], status: int, param: str) -> None:
    assert_openai_error(await http.post("/v1/audio/speech", json=body), status, param)


async def test_4096_chars_is_accepted(http: httpx.AsyncClient) -> None:
    response = await http.post("/v1/audio/speech", json=with_(input="a" * 4096, response_format="pcm"))
    assert response.status_code == 200


async def test_non_json_body(http: httpx.AsyncClient) -> None:
    response = await http.post(
        "/v1/audio/speech", content=b"model=tts-1&input=hi", headers={"content-type": "application/json"}
    )
    assert_openai_error(response, 400, None)


async def test_json_that_is_not_an_object(http: httpx.AsyncClient) -> None:
    response = await http.post("/v1/audio/speech", content=b"[1, 2, 3]", headers={"content-type": "application/json"})
    assert_openai_error(response, 400, None)


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
async def test_wrong_content_type(http: httpx.AsyncClient, content_type: str | None) -> None:
    headers = {"content-type": content_type} if content_type else {}
    response = await http.post("/v1/audio/speech", content=json.dumps(VALID).encode(), headers=headers)
    assert_openai_error(response, 415, None)


async def test_body_over_the_size_limit(http: httpx.AsyncClient) -> None:
    body = json.dumps(with_(input="a" * 70000)).encode()
    response = await http.post("/v1/audio/speech", content=body, headers={"content-type": "application/json"})
    assert_openai_error(response, 413, None)


async def test_unknown_route_and_method(http: httpx.AsyncClient) -> None:
    assert_openai_error(await http.get("/v1/nothing"), 404, None)
    assert (await http.get("/v1/audio/speech")).status_code == 405
    assert "error" in (await http.get("/v1/audio/speech")).json()


def test_sdk_maps_errors_to_its_exceptions(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as bad:
        client.audio.speech.create(model="synthetic", voice="alloy", input="hi", speed=9)
    assert bad.value.param == "speed"
    with pytest.raises(openai.NotFoundError) as missing:
        client.audio.speech.create(model="nope", voice="alloy", input="hi")
    assert missing.value.code == "model_not_found"


async def test_a_burst_of_bad_requests_leaves_the_gateway_healthy(http: httpx.AsyncClient) -> None:
    for _, body, status, _ in BAD_BODIES * 3:
        assert (await http.post("/v1/audio/speech", json=body)).status_code == status
    assert (await http.post("/v1/audio/speech", json=VALID)).status_code == 200
    assert (await http.get("/readyz")).json()["engines"]["synthetic"]["active_jobs"] == 0
