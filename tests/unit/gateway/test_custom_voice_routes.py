"""The consent and custom-voice routes in process (the real app, engines in threads): what the end-to-end suite
cannot reach cheaply, such as an engine node's refusal, uploads whose bytes look like deep JSON, and the OpenAPI
document's declaration of both bodies of ``POST /v1/audio/voices``."""

from __future__ import annotations

import json
import struct
from typing import TYPE_CHECKING, Any

import pytest
from litestar.testing import AsyncTestClient

from gateway.app import openapi_document
from harness.recordings import recording
from tests.inprocess import in_process_app
from tests.openai_errors import assert_openai_error

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from litestar import Litestar

SERVICE_TOKEN = "svc-" + "fedcba9876543210" * 3
ENGINES: dict[str, Any] = {"chattts": None, "espeak": None, "tones": {"kind": "synthetic"}}
CONSENT_FORM = {"name": "Ada", "language": "en-US"}


@pytest.fixture
async def gateway() -> AsyncIterator[AsyncTestClient[Litestar]]:
    async with AsyncTestClient(app=in_process_app({"engines": ENGINES, "aliases": {}})) as client:
        yield client


def bracket_wav(seconds: float = 2.0) -> bytes:
    """A valid WAV whose every sample is the bytes ``[[``: to a JSON depth check, thousands of open arrays."""
    data = b"[" * int(seconds * 24000 * 2)
    fmt = struct.pack("<4sIHHIIHH", b"fmt ", 16, 1, 1, 24000, 48000, 2, 16)
    return (
        struct.pack("<4sI4s", b"RIFF", 4 + len(fmt) + 8 + len(data), b"WAVE")
        + fmt
        + b"data"
        + struct.pack("<I", len(data))
        + data
    )


async def test_an_upload_full_of_brackets_is_audio_not_deep_json(gateway: AsyncTestClient[Litestar]) -> None:
    files = {"recording": ("consent.wav", bracket_wav(), "audio/wav")}
    created = await gateway.post("/v1/audio/voice_consents", data=CONSENT_FORM, files=files)
    assert created.status_code == 201, created.text
    deep = await gateway.post(
        "/v1/audio/voices", content=b"[" * 100 + b"]" * 100, headers={"content-type": "application/json"}
    )
    assert deep.status_code == 400
    assert deep.json()["error"]["code"] == "json_too_deep"  # JSON bodies are still checked


@pytest.mark.parametrize(
    ("kwargs", "status", "param"),
    [
        ({"json": CONSENT_FORM}, 415, None),  # the recording is a file: a form only
        ({"files": {"name": (None, "Ada"), "language": (None, "en-US")}}, 400, "recording"),  # a form, no file
        (
            {"data": {**CONSENT_FORM, "recording": "text"}, "files": {"other": ("a.wav", b"RIFF", "audio/wav")}},
            400,
            "other",
        ),
        (
            {
                "data": {"name": "Ada", "language": "not a language tag"},
                "files": {"recording": ("r.wav", b"", "audio/wav")},
            },
            400,
            "language",
        ),
        ({"data": {**CONSENT_FORM, "extra": "1"}, "files": {"recording": ("r.wav", b"", "audio/wav")}}, 400, "extra"),
    ],
    ids=["json", "no-recording", "stray-file", "bad-language", "unknown-field"],
)
async def test_a_malformed_consent_form_is_a_4xx_naming_its_field(
    gateway: AsyncTestClient[Litestar], kwargs: dict[str, Any], status: int, param: str | None
) -> None:
    refused = await gateway.post("/v1/audio/voice_consents", **kwargs)
    assert refused.status_code == status, refused.text
    assert refused.json()["error"]["param"] == param


async def test_a_form_field_that_is_not_utf8_is_a_400(gateway: AsyncTestClient[Litestar]) -> None:
    boundary = "b0undary"
    body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="name"\r\n\r\n'.encode()
        + b"\xff\xfe\xfa"
        + f"\r\n--{boundary}--\r\n".encode()
    )
    refused = await gateway.post(
        "/v1/audio/voice_consents", content=body, headers={"content-type": f"multipart/form-data; boundary={boundary}"}
    )
    assert assert_openai_error(refused, 400, None)["code"] == "invalid_multipart"


BOUNDARY = "b0undary"
FORM_TYPE = f"multipart/form-data; boundary={BOUNDARY}"


def part(name: str, value: bytes, filename: str | None = None) -> bytes:
    disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
    return f"--{BOUNDARY}\r\nContent-Disposition: {disposition}\r\n\r\n".encode() + value + b"\r\n"


CLOSE = f"--{BOUNDARY}--\r\n".encode()
FIELDS = part("name", b"Ada") + part("language", b"en-US")
WHOLE = FIELDS + part("recording", recording("wav"), "consent.wav") + CLOSE


@pytest.mark.parametrize(
    ("body", "content_type", "status", "code", "words"),
    [
        (b"".join(part(f"f{n}", b"x") for n in range(5000)) + WHOLE, FORM_TYPE, 400, "too_many_parts", "1000 parts"),
        (WHOLE[: -len(CLOSE)], FORM_TYPE, 400, "invalid_multipart", "not valid multipart/form-data: Unexpected end"),
        (
            f"--{BOUNDARY}\r\nContent-Type: audio/wav\r\n\r\n".encode() + b"RIFF\r\n" + CLOSE,
            FORM_TYPE,
            400,
            "invalid_multipart",
            "Missing Content-Disposition",
        ),
        (WHOLE, "multipart/form-data", 400, "invalid_multipart", "names no boundary"),
        (WHOLE + bytes(11 * 1024 * 1024), FORM_TYPE, 413, "body_too_large", "over 10551296 bytes"),
    ],
    ids=["5000-parts", "unclosed", "no-disposition", "no-boundary", "over-the-limit"],
)
@pytest.mark.parametrize("route", ["/v1/audio/voice_consents", "/v1/audio/voices"])
async def test_a_malformed_form_is_refused_with_a_code_saying_why(  # noqa: PLR0917 - pytest's parameters
    gateway: AsyncTestClient[Litestar], route: str, body: bytes, content_type: str, status: int, code: str, words: str
) -> None:
    refused = await gateway.post(route, content=body, headers={"content-type": content_type})
    error = assert_openai_error(refused, status, None)
    assert error["code"] == code
    assert words in error["message"]


async def test_a_file_field_sent_as_text_is_an_invalid_type(gateway: AsyncTestClient[Litestar]) -> None:
    body = FIELDS + part("recording", b"not a file") + CLOSE
    refused = await gateway.post("/v1/audio/voice_consents", content=body, headers={"content-type": FORM_TYPE})
    error = assert_openai_error(refused, 400, "recording")
    assert (error["code"], error["message"]) == ("invalid_type", "'recording' must be a file.")


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/x-www-form-urlencoded", None, "multipart/form-data; boundary=b0undary"],
    ids=["text", "urlencoded", "none", "multipart"],
)
async def test_renaming_a_consent_takes_a_json_body_only(
    gateway: AsyncTestClient[Litestar], content_type: str | None
) -> None:
    files = {"recording": ("consent.wav", recording("wav"), "audio/wav")}
    consent = (await gateway.post("/v1/audio/voice_consents", data=CONSENT_FORM, files=files)).json()["id"]
    headers = {"content-type": content_type} if content_type else {}
    refused = await gateway.post(f"/v1/audio/voice_consents/{consent}", content=b'{"name": "Bob"}', headers=headers)
    assert assert_openai_error(refused, 415, None)["code"] == "unsupported_media_type"
    assert (await gateway.get(f"/v1/audio/voice_consents/{consent}")).json()["name"] == "Ada"
    renamed = await gateway.post(f"/v1/audio/voice_consents/{consent}", json={"name": "Bob"})
    assert renamed.status_code == 200, renamed.text
    assert renamed.json()["name"] == "Bob"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "espeak", "seed": 7}, "model"),
        ({"model": "espeak", "speaker": "seed:7"}, "model"),
        ({"model": "tones", "speaker": "bell\x07"}, "speaker"),
    ],
    ids=["espeak-seed", "espeak-speaker", "unprintable"],
)
async def test_a_voice_its_engine_could_never_speak_is_refused_when_made(body: dict[str, Any], param: str) -> None:
    engines = {"espeak": {"kind": "espeak"}, "tones": {"kind": "synthetic"}}
    async with AsyncTestClient(app=in_process_app({"engines": engines, "aliases": {}})) as client:
        refused = await client.post("/v1/audio/voices", json={"name": "mine", **body})
        assert_openai_error(refused, 400, param)
        listed = (await client.get("/v1/audio/voices")).json()["data"]
        assert not [voice for voice in listed if voice["custom"]]
        made = await client.post("/v1/audio/voices", json={"name": "mine", "model": "tones", "seed": 7})
        assert made.status_code == 201, made.text  # the name is free: nothing was kept


async def test_an_engine_node_keeps_no_consents() -> None:
    node = {"server": {"profile": "engine"}, "auth": {"service_token": SERVICE_TOKEN}, "engines": ENGINES}
    auth = {"Authorization": f"Bearer {SERVICE_TOKEN}"}
    files = {"recording": ("consent.mp3", recording("mp3"), "audio/mpeg")}
    async with AsyncTestClient(app=in_process_app(node)) as client:
        for method, path, kwargs in (
            ("POST", "/v1/audio/voice_consents", {"data": CONSENT_FORM, "files": files}),
            ("GET", "/v1/audio/voice_consents", {}),
            ("GET", "/v1/audio/voice_consents/cons_1", {}),
            ("POST", "/v1/audio/voice_consents/cons_1", {"json": {"name": "x"}}),
            ("DELETE", "/v1/audio/voice_consents/cons_1", {}),
            (
                "POST",
                "/v1/audio/voices",
                {"data": {"name": "v", "consent": "cons_1"}, "files": {"audio_sample": files["recording"]}},
            ),
        ):
            answer = await client.request(method, path, headers=auth, **kwargs)
            assert answer.status_code == 404, (method, path, answer.text)
            assert answer.json()["error"]["code"] == "not_found"


def test_the_document_declares_both_bodies_of_voice_creation_and_the_consent_form() -> None:
    document = json.loads(openapi_document())
    paths = document["paths"]
    voice = paths["/v1/audio/voices"]["post"]["requestBody"]["content"]
    form = voice["multipart/form-data"]["schema"]
    assert set(form["required"]) == {"name", "audio_sample", "consent"}
    assert form["properties"]["audio_sample"] == {
        **form["properties"]["audio_sample"],
        "type": "string",
        "format": "binary",
    }
    assert {"type", "transcript", "model"} <= set(form["properties"])
    assert set(voice["application/json"]["schema"]["properties"]) == {"name", "model", "speaker", "seed"}
    consent = paths["/v1/audio/voice_consents"]["post"]["requestBody"]["content"]["multipart/form-data"]["schema"]
    assert set(consent["required"]) == {"recording", "name", "language"}
    assert consent["properties"]["recording"]["format"] == "binary"
    created = paths["/v1/audio/voice_consents"]["post"]["responses"]["201"]["content"]["application/json"]["schema"]
    assert created["$ref"].endswith("/VoiceConsentObject")
    assert set(paths["/v1/audio/voice_consents/{consent_id}"]) == {"get", "post", "delete"}
    listed = paths["/v1/audio/voice_consents"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert set(document["components"]["schemas"][listed["$ref"].rsplit("/", 1)[1]]["properties"]) == {
        "object",
        "data",
        "first_id",
        "last_id",
        "has_more",
    }
