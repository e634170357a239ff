"""Monthly budgets and the Usage API on two real gateway replicas sharing one real redis-server: what one replica
admits counts on the other, a spent budget is OpenAI's 429 ``insufficient_quota`` and ElevenLabs' ``quota_exceeded``
(for that tenant only), and the Usage API's buckets add up to what was spoken."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

import httpx
import openai
import pytest

from harness.gateway_process import GatewayProcess
from tests.tenancy import ADMIN_TOKEN, Admin, bearer, speak, tenancy_config
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.redis_server import RedisServer

FIFTY = "The quick brown fox jumps over the lazy dog, twice."[:50]


@pytest.fixture(scope="module")
def replicas(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[GatewayProcess]]:
    redis_server.flush()
    processes = [
        GatewayProcess(tenancy_config(redis_server.url), tmp_path_factory.mktemp(f"replica{i}")) for i in range(2)
    ]
    for process in processes:
        process.start()
    yield processes
    for process in processes:
        process.stop()


@pytest.fixture(scope="module")
def admin(replicas: list[GatewayProcess]) -> Iterator[Admin]:
    client = Admin(replicas[0].base_url)
    yield client
    client.close()


def _tenant_with_key(admin: Admin, limits: dict[str, Any]) -> tuple[str, str]:
    name = f"b-{uuid.uuid4().hex[:10]}"
    response = admin.http.post("/admin/tenants", json={"name": name, "limits": limits})
    assert response.status_code == 201, response.text
    assert response.json()["limits"] | limits == response.json()["limits"]  # the admin API keeps the budget
    return name, str(admin.key(name)["key"])


def _usage(replica: GatewayProcess, key: str) -> dict[str, Any]:
    response = httpx.get(f"{replica.base_url}/v1/usage", headers=bearer(key), timeout=10)
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_a_spent_character_budget_refuses_on_every_replica_and_route(
    replicas: list[GatewayProcess], admin: Admin
) -> None:
    _, key = _tenant_with_key(admin, {"characters_per_month": 120})
    _, other_key = _tenant_with_key(admin, {"characters_per_month": 120})
    assert speak(replicas[0], key, FIFTY).status_code == 200
    assert speak(replicas[1], key, FIFTY).status_code == 200

    sdk = openai.OpenAI(base_url=f"{replicas[0].base_url}/v1", api_key=key)  # default retries: told not to retry
    try:
        with pytest.raises(openai.RateLimitError) as refused:
            sdk.audio.speech.create(model="synthetic", voice="alloy", input=FIFTY, response_format="pcm")
    finally:
        sdk.close()
    assert refused.value.code == "insufficient_quota"
    assert refused.value.type == "insufficient_quota"
    assert refused.value.response.headers["x-should-retry"] == "false"
    assert "20 remain" in refused.value.message

    elevenlabs = httpx.post(
        f"{replicas[1].base_url}/v1/text-to-speech/alloy?output_format=pcm_24000",
        json={"text": FIFTY, "model_id": "synthetic"},
        headers={"xi-api-key": key},
        timeout=30,
    )
    assert elevenlabs.status_code == 401, elevenlabs.text
    assert elevenlabs.json()["detail"]["status"] == "quota_exceeded"

    assert speak(replicas[1], other_key, FIFTY).status_code == 200  # another tenant's budget is its own
    usage = _usage(replicas[1], key)
    assert usage["budget"]["characters_used"] == 100
    assert usage["budget"]["characters_limit"] == 120
    assert usage["rejections"] == {"characters_per_month": 2}  # the SDK did not retry
    assert usage["input_characters"] == 100


def test_audio_seconds_refuse_the_request_after_the_line(replicas: list[GatewayProcess], admin: Admin) -> None:
    # The synthetic engine speaks 0.02 s a character: 50 characters are 1 s, past a 0.5 s budget once spoken.
    _, key = _tenant_with_key(admin, {"audio_seconds_per_month": 0.5})
    assert speak(replicas[0], key, FIFTY).status_code == 200  # admitted under the line, finished past it
    wait_until(lambda: (_usage(replicas[1], key)["budget"]["audio_seconds_used"] or 0) >= 1.0, what="audio counted")
    refused = speak(replicas[1], key, "hi")
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "insufficient_quota"


def test_a_tenant_without_a_budget_shows_none(replicas: list[GatewayProcess], admin: Admin) -> None:
    _, key = _tenant_with_key(admin, {})
    assert speak(replicas[0], key, FIFTY).status_code == 200
    assert _usage(replicas[0], key)["budget"] is None


def test_a_budget_of_nothing_is_refused(replicas: list[GatewayProcess]) -> None:
    response = httpx.post(
        f"{replicas[0].base_url}/admin/tenants",
        json={"name": "nobody", "limits": {"characters_per_month": 0}},
        headers=bearer(ADMIN_TOKEN),
        timeout=10,
    )
    assert response.status_code == 400  # a budget of nothing is no budget: 1 at least
