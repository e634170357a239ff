"""Request bodies OpenAI refuses, each with the status and the ``param`` its error names, and the check that an
answer is OpenAI's error body."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx

__all__ = ["BAD_BODIES", "VALID", "assert_openai_error", "with_", "without"]

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
