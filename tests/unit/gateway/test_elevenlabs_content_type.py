"""ElevenLabs' JSON routes (the pronunciation dictionaries', text to speech and text to dialogue) read a body as
ElevenLabs' server (FastAPI) does: as JSON when it has no ``Content-Type`` or a JSON one, else as bytes that no model
takes, a 422 at ``body``. On the real app in process, checked against the ElevenLabs SDK's own models."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
from elevenlabs import HttpValidationError
from elevenlabs.client import AsyncElevenLabs
from litestar.testing import AsyncTestClient

from tests.inprocess import in_process_app

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

ROUTES = "/v1/pronunciation-dictionaries"
RULE = {"type": "alias", "string_to_replace": "GPU", "alias": "graphics card"}
NOT_JSON = ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=b0undary"]
FASTAPI_PROBLEM = {
    "loc": ["body"],
    "msg": "Input should be a valid dictionary or object to extract fields from",
    "type": "model_attributes_type",
}


@pytest.fixture
async def client() -> AsyncIterator[AsyncTestClient[Any]]:
    async with AsyncTestClient(app=in_process_app({"engines": {"espeak": {"kind": "espeak"}}})) as test_client:
        yield test_client


def sdk(client: AsyncTestClient[Any]) -> AsyncElevenLabs:
    return AsyncElevenLabs(base_url=str(client.base_url), api_key="anything", httpx_client=client)


async def created(client: AsyncTestClient[Any]) -> tuple[str, str]:
    """A dictionary of one rule, made as the ElevenLabs SDK makes one (a JSON body): its id and version."""
    made = await sdk(client).pronunciation_dictionaries.create_from_rules(name="brands", rules=[RULE])
    return made.id, made.version_id


def bodies(dictionary_id: str) -> list[tuple[str, dict[str, Any]]]:
    """Each JSON route of the dictionaries, with a body it takes."""
    return [
        ("add-from-rules", {"name": "more", "rules": [RULE]}),
        (f"{dictionary_id}/add-rules", {"rules": [RULE]}),
        (f"{dictionary_id}/set-rules", {"rules": [RULE]}),
        (f"{dictionary_id}/remove-rules", {"rule_strings": ["GPU"]}),
    ]


@pytest.mark.parametrize("content_type", NOT_JSON, ids=["text", "urlencoded", "multipart"])
async def test_a_body_that_does_not_say_it_is_json_is_fastapis_422(
    client: AsyncTestClient[Any], content_type: str
) -> None:
    dictionary_id, version_id = await created(client)
    for route, body in bodies(dictionary_id):
        # The bytes are JSON: only the type says otherwise.
        refused = await client.post(
            f"{ROUTES}/{route}", content=json.dumps(body), headers={"content-type": content_type}
        )
        assert refused.status_code == 422, (route, refused.text)
        problems = HttpValidationError.model_validate(refused.json()).detail or []
        assert [problem.model_dump(include={"loc", "msg", "type"}) for problem in problems] == [FASTAPI_PROBLEM]
    listed = (await sdk(client).pronunciation_dictionaries.list()).pronunciation_dictionaries
    assert [(entry.id, entry.latest_version_id) for entry in listed] == [(dictionary_id, version_id)]  # none changed


@pytest.mark.parametrize(
    "headers",
    [{}, {"content-type": "application/json; charset=utf-8"}, {"content-type": "application/merge-patch+json"}],
    ids=["none", "json-charset", "plus-json"],
)
async def test_a_body_without_a_type_or_of_a_json_type_is_read_as_json(
    client: AsyncTestClient[Any], headers: dict[str, str]
) -> None:
    dictionary_id, _ = await created(client)
    for route, body in bodies(dictionary_id):
        answer = await client.post(f"{ROUTES}/{route}", content=json.dumps(body), headers=headers)
        assert answer.status_code == 200, (route, answer.text)


async def test_an_empty_body_of_another_type_is_a_missing_body(client: AsyncTestClient[Any]) -> None:
    refused = await client.post(f"{ROUTES}/add-from-rules", content=b"", headers={"content-type": "text/plain"})
    assert refused.status_code == 422, refused.text
    assert refused.json() == {"detail": [{"loc": ["body"], "msg": "Field required", "type": "missing"}]}


SPOKEN = [
    ("/v1/text-to-speech/alloy", {"text": "Typed as JSON.", "model_id": "synthetic"}),
    ("/v1/text-to-speech/alloy/stream/with-timestamps", {"text": "Typed as JSON.", "model_id": "synthetic"}),
    ("/v1/text-to-dialogue", {"inputs": [{"text": "Typed as JSON.", "voice_id": "alloy"}], "model_id": "synthetic"}),
]


@pytest.mark.parametrize(("route", "body"), SPOKEN, ids=["speech", "timed-stream", "dialogue"])
async def test_speech_read_from_a_body_of_another_type_is_fastapis_422(route: str, body: dict[str, Any]) -> None:
    settings = {"engines": {"synthetic": {"kind": "synthetic", "workers": 1}}}
    async with AsyncTestClient(app=in_process_app(settings)) as speech:
        refused = await speech.post(route, content=json.dumps(body), headers={"content-type": "text/plain"})
        assert refused.status_code == 422, refused.text
        problems = HttpValidationError.model_validate(refused.json()).detail or []
        assert [problem.model_dump(include={"loc", "msg", "type"}) for problem in problems] == [FASTAPI_PROBLEM]
        spoken = await speech.post(route, content=json.dumps(body))  # no type: JSON, as FastAPI reads it
        assert spoken.status_code == 200, spoken.text
