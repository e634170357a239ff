"""Schemathesis over every route of the app's own OpenAPI document, against a real gateway: never a 5xx, and every
response (status, content type, body) conforms to the document."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.core.result import Ok

from auth import generate_api_key, hash_api_key
from harness.gateway_process import GatewayProcess

if TYPE_CHECKING:
    from collections.abc import Iterator

    from schemathesis import Case

ADMIN_TOKEN = "fuzz-admin-token-0123456789abcdef0123"
API_KEY = generate_api_key()
ARTIFACTS = Path(__file__).parents[2] / "test-artifacts"
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
MAX_EXAMPLES = 30
_cases: dict[str, int] = {}


@pytest.fixture(scope="module")
def fuzzed_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    config = {
        "auth": {"admin_token": ADMIN_TOKEN, "tenants": [{"name": "fuzz", "api_key_sha256": [hash_api_key(API_KEY)]}]},
        "engines": {"synthetic": {"kind": "synthetic", "workers": 2, "options": {"seconds_per_char": 0.001}}},
        "aliases": {"tts-1": ["synthetic"]},
    }
    with GatewayProcess(config, tmp_path_factory.mktemp("fuzz")) as process:
        yield process
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "schemathesis-cases.json").write_text(
        json.dumps({"total": sum(_cases.values()), "by_operation": dict(sorted(_cases.items()))}, indent=2)
    )


def test_every_route_conforms_and_never_fails(fuzzed_gateway: GatewayProcess) -> None:
    # Driven through hypothesis directly: schemathesis's pytest plugin does not work with pytest 9 yet.
    api = schemathesis.openapi.from_url(f"{fuzzed_gateway.base_url}/docs/openapi.json")
    operations = []
    for result in api.get_all_operations():
        assert isinstance(result, Ok), result.err()
        operations.append(result.ok())
    assert len(operations) >= 15
    for operation in operations:
        _fuzz(operation, fuzzed_gateway.base_url)
    assert sum(_cases.values()) >= 10 * len(operations)


def _fuzz(operation: Any, base_url: str) -> None:
    @given(case=operation.as_strategy())
    @settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def run(case: Case[Any]) -> None:
        credential = ADMIN_TOKEN if case.path.startswith("/admin") else API_KEY
        _cases[operation.label] = _cases.get(operation.label, 0) + 1
        case.call_and_validate(
            base_url=base_url, headers={"Authorization": f"Bearer {credential}"}, checks=CHECKS, timeout=30
        )

    run()
