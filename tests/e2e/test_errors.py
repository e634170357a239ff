"""Bad input gets OpenAI's error body and the status the SDK maps, naming the parameter; never a 500 or a hang."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import openai
import pytest

if TYPE_CHECKING:
    import httpx

VALID: dict[str, Any] = {"model": "synthetic", "input": "Hello.", "voice": "alloy"}


def without(field: str) -> dict[str, Any]:
    return {k: v for k, v in VALID.items() if k != field}


def with_(**fields: Any) -> dict[str, Any]:
    return {**VALID, **fields}


BAD_BODIES = [
    ("missing model", without("model"), 400, "model"),
    ("missing input", without("input"), 400, "input"),
    ("missing voice", without("voice"), 400, "voice"),
    ("empty input", with_(input=""), 400, "input"),
    ("whitespace input", with_(input=" \n\t "), 400, "input"),
    ("input of 4097 chars", with_(input="a" * 4097), 400, "input"),
    ("input not a string", with_(input=42), 400, "input"),
    ("unknown voice", with_(voice="darth"), 400, "voice"),
    ("unknown custom voice", with_(voice={"id": "voice_1234"}), 404, "voice"),
    ("custom voice with extra field", with_(voice={"id": "v", "x": 1}), 400, "voice"),
    ("unknown model", with_(model="tts-9000"), 404, "model"),
    ("bad response_format", with_(response_format="ogg"), 400, "response_format"),
    ("speed 0.1", with_(speed=0.1), 400, "speed"),
    ("speed 5", with_(speed=5), 400, "speed"),
    ("speed 'fast'", with_(speed="fast"), 400, "speed"),
    ("speed null", with_(speed=None), 400, "speed"),
    ("bad stream_format", with_(stream_format="chunks"), 400, "stream_format"),
    ("instructions too long", with_(instructions="a" * 4097), 400, "instructions"),
    ("unknown field", with_(temperature=0.5), 400, "temperature"),
]


def assert_openai_error(response: httpx.Response, status: int, param: str | None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    return dict(error)


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
