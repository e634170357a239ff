"""The checked-in OpenAPI document is the app's, and its speech request matches OpenAI's contract."""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.app import openapi_document

ROOT = Path(__file__).parents[3]
CHECKED_IN = ROOT / "openapi" / "openapi.json"
OPENAI = json.loads((ROOT / "tests" / "data" / "openai-speech-schema.json").read_text())


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    served: dict[str, Any] = json.loads(openapi_document())
    return served


def test_checked_in_document_is_what_the_app_serves() -> None:
    assert CHECKED_IN.read_text() == openapi_document(), (
        "regenerate: chattts-gateway openapi --output openapi/openapi.json"
    )


def _resolve(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def _speech_request(document: dict[str, Any]) -> dict[str, Any]:
    body = document["paths"]["/v1/audio/speech"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    return _resolve(document, body)


#: This gateway's documented extensions of OpenAI's speech request (``docs/ssml.md``, docs/configuration.md):
#: optional, off by default.
EXTENSIONS = {"control_tokens", "word_timestamps", "seed", "sample_rate", "language_code", "normalize_text"}
#: The response formats this gateway adds to OpenAI's (G.711, named as OpenAI Realtime's ``audio/pcmu``/``audio/pcma``).
EXTRA_FORMATS = {"response_format": {"pcmu", "pcma"}}


def test_speech_request_has_openais_fields_and_required(document: dict[str, Any]) -> None:
    ours, theirs = _speech_request(document), OPENAI["components"]["schemas"]["CreateSpeechRequest"]
    assert set(ours["properties"]) == set(theirs["properties"]) | EXTENSIONS
    assert set(ours["required"]) == set(theirs["required"])


def _enum(document: dict[str, Any], schema: dict[str, Any]) -> set[str]:
    return set(_resolve(document, schema)["enum"])


def test_speech_request_enums_and_bounds_match(document: dict[str, Any]) -> None:
    ours, theirs = (
        _speech_request(document)["properties"],
        OPENAI["components"]["schemas"]["CreateSpeechRequest"]["properties"],
    )
    for field in ("response_format", "stream_format"):
        assert _enum(document, ours[field]) == set(theirs[field]["enum"]) | EXTRA_FORMATS.get(field, set())
        assert ours[field].get("default", _resolve(document, ours[field]).get("default")) == theirs[field]["default"]
    assert ours["speed"]["minimum"] == theirs["speed"]["minimum"]
    assert ours["speed"]["maximum"] == theirs["speed"]["maximum"]
    assert ours["speed"]["default"] == theirs["speed"]["default"]
    assert ours["speed"]["type"] == "number"
    assert ours["input"]["maxLength"] == theirs["input"]["maxLength"]
    assert ours["instructions"]["maxLength"] == theirs["instructions"]["maxLength"]


def test_every_operation_has_an_id_and_the_speech_route_returns_200(document: dict[str, Any]) -> None:
    operations = [op for path in document["paths"].values() for op in path.values()]
    assert all("operationId" in op for op in operations)
    assert "200" in document["paths"]["/v1/audio/speech"]["post"]["responses"]


def test_the_version_has_one_source(document: dict[str, Any]) -> None:
    # pyproject.toml is the one place; the app reads it from the installed package's metadata, and the chart's
    # appVersion (the default image tag) must follow it.
    version = importlib.metadata.version("chattts-gateway")
    assert document["info"]["version"] == version
    chart = yaml.safe_load((ROOT / "helm" / "chattts-gateway" / "Chart.yaml").read_text())
    assert chart["appVersion"] == version


def _untyped(document: dict[str, Any], schema: dict[str, Any]) -> bool:
    """An object whose fields the document does not say: a bare ``{"type": "object"}``, maybe with any values."""
    resolved = _resolve(document, schema)
    return resolved.get("type") == "object" and "properties" not in resolved


def test_every_json_success_says_what_its_body_holds(document: dict[str, Any]) -> None:
    untyped = [
        f"{method.upper()} {path} {status}"
        for path, operations in document["paths"].items()
        for method, operation in operations.items()
        for status, response in operation.get("responses", {}).items()
        if status.startswith("2")
        for media_type, media in response.get("content", {}).items()
        if "json" in media_type and _untyped(document, media.get("schema", {}))
    ]
    assert untyped == [], "give these routes a response model (a pydantic class), not a dict"


def test_one_tenant_usage(document: dict[str, Any]) -> None:
    # Two classes of that name made two components (``schemas_TenantUsage``, ``routes_admin_TenantUsage``).
    schemas = document["components"]["schemas"]
    assert [name for name, schema in schemas.items() if schema.get("title") == "TenantUsage"] == ["TenantUsage"]


def test_every_paged_listing_is_the_one_list_page(document: dict[str, Any]) -> None:
    # One generic model, one component per item type: the same fields, required alike, but for what ``data`` holds.
    schemas = document["components"]["schemas"]
    pages = {name: s for name, s in schemas.items() if {"first_id", "has_more"} <= set(s.get("properties", {}))}
    assert len(pages) >= 5
    assert all(schema["title"].startswith("ListPage[") for schema in pages.values()), sorted(pages)
    shapes = {
        json.dumps([{**schema["properties"], "data": schema["properties"]["data"]["type"]}, schema["required"]])
        for schema in pages.values()
    }
    assert len(shapes) == 1, shapes
