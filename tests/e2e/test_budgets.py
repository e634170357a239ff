"""Monthly budgets and the Usage API on two real gateway replicas sharing one real redis-server, and a Redis Cluster
(where every script's keys must sit in one slot): what one replica admits counts on the other, a spent budget is
OpenAI's 429 ``insufficient_quota`` and ElevenLabs' ``quota_exceeded`` (for that tenant only), and the Usage API's
buckets add up to what was spoken."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import TYPE_CHECKING, Any

import httpx
import openai
import pytest
from elevenlabs import ElevenLabs
from websockets.asyncio.client import connect

from harness.gateway_process import GatewayProcess
from tests.starting import start_together, stop_together
from tests.tenancy import ADMIN_TOKEN, Admin, bearer, speak, tenancy_config
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.redis_server import RedisServer
    from tests.redis_topologies import RedisClusterSetup

FIFTY = "The quick brown fox jumps over the lazy dog, twice."[:50]


@pytest.fixture(scope="module", params=["redis", "cluster"])
def replicas(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[GatewayProcess]]:
    """Two replicas on one Redis server, or on a Redis Cluster (each script's keys in one slot)."""
    shared: RedisServer | RedisClusterSetup = request.getfixturevalue(
        "redis_server" if request.param == "redis" else "redis_cluster"
    )
    shared.flush()
    processes = [GatewayProcess(tenancy_config(shared.url), tmp_path_factory.mktemp(f"replica{i}")) for i in range(2)]
    start_together(processes)
    yield processes
    stop_together(processes)


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

    with httpx.Client(timeout=10) as http:  # what ElevenLabs' apps check at start
        subscription = ElevenLabs(api_key=key, base_url=replicas[0].base_url, httpx_client=http).user.subscription.get()
    assert (subscription.character_count, subscription.character_limit) == (100, 120)
    assert subscription.character_refresh_period == "monthly_period"
    assert subscription.next_character_count_reset_unix == usage["budget"]["resets_at"]


async def test_a_spent_budget_on_an_elevenlabs_socket_is_quota_exceeded(
    replicas: list[GatewayProcess], admin: Admin
) -> None:
    _, key = _tenant_with_key(admin, {"characters_per_month": 10})
    base = replicas[1].base_url.replace("http://", "ws://")
    target = f"{base}/v1/text-to-speech/alloy/stream-input?model_id=synthetic&output_format=pcm_24000"
    async with connect(target, additional_headers={"xi-api-key": key}, max_size=None) as socket:
        await socket.send(json.dumps({"text": " "}))
        await socket.send(json.dumps({"text": FIFTY, "flush": True}))
        async with asyncio.timeout(15):
            while "error" not in (message := json.loads(await socket.recv())):
                pass
    assert (message["error"], message["code"]) == ("quota_exceeded", 401)
    assert "10 input characters" in message["message"]


def test_a_tenant_created_again_starts_its_budget_anew(replicas: list[GatewayProcess], admin: Admin) -> None:
    name, key = _tenant_with_key(admin, {"characters_per_month": 50})
    assert speak(replicas[0], key, FIFTY).status_code == 200
    assert speak(replicas[1], key, FIFTY).status_code == 429  # spent

    admin.delete_tenant(name)
    created = admin.http.post("/admin/tenants", json={"name": name, "limits": {"characters_per_month": 50}})
    assert created.status_code == 201, created.text
    key = str(admin.key(name)["key"])
    assert _usage(replicas[1], key)["budget"]["characters_used"] == 0  # its usage and its budget agree
    assert speak(replicas[1], key, FIFTY).status_code == 200
    assert _usage(replicas[0], key)["budget"]["characters_used"] == 50


def test_the_budget_metric_says_how_near_the_line_a_tenant_is(replicas: list[GatewayProcess], admin: Admin) -> None:
    name, key = _tenant_with_key(admin, {"characters_per_month": 200})
    assert speak(replicas[0], key, FIFTY).status_code == 200
    metrics = httpx.get(f"{replicas[0].base_url}/metrics", timeout=10).text
    series = f'tts_tenant_budget_used_ratio{{budget="characters_per_month",tenant="{name}"}}'
    assert f"{series} 0.25" in metrics
    assert speak(replicas[1], key, FIFTY).status_code == 200

    admin.delete_tenant(name)  # through the first replica: the other hears of it on the revocation bus
    for replica in replicas:

        def gone(url: str = f"{replica.base_url}/metrics") -> bool:
            return series not in httpx.get(url).text

        wait_until(gone, what="the deleted tenant's budget gone from /metrics")


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


def _admin_sdk(replica: GatewayProcess) -> openai.OpenAI:
    """The OpenAI SDK as an organization's admin calls the Usage API: with the admin key only."""
    return openai.OpenAI(base_url=f"{replica.base_url}/v1", admin_api_key=ADMIN_TOKEN, api_key=None, max_retries=0)


def _sums(page: Any, field: str) -> dict[str | None, tuple[int, int]]:
    """Characters and requests over every bucket of ``page``, by the grouping field ``field``."""
    sums: dict[str | None, tuple[int, int]] = {}
    for bucket in page.data:
        assert bucket.object == "bucket" and bucket.end_time > bucket.start_time
        for result in bucket.results:
            assert result.object == "organization.usage.audio_speeches.result"
            characters, requests = sums.get(getattr(result, field), (0, 0))
            sums[getattr(result, field)] = (characters + result.characters, requests + result.num_model_requests)
    return sums


def test_the_usage_api_adds_up_to_what_was_spoken(replicas: list[GatewayProcess], admin: Admin) -> None:
    project, first_key = _tenant_with_key(admin, {})
    second = admin.key(project)
    first_id = next(
        k["id"] for k in admin.http.get(f"/admin/tenants/{project}/keys").json()["data"] if k["id"] != second["id"]
    )
    started = int(time.time())
    assert speak(replicas[0], first_key, "a" * 50).status_code == 200
    assert speak(replicas[1], second["key"], "b" * 30, model="tts-1").status_code == 200
    assert speak(replicas[0], first_key, "c" * 20, model="tts-1").status_code == 200
    wait_until(lambda: _usage(replicas[1], first_key)["requests"] == 3, what="usage written by both replicas")

    sdk = _admin_sdk(replicas[1])
    try:
        usage = sdk.admin.organization.usage
        by_model = usage.audio_speeches(start_time=started, group_by=["model"], project_ids=[project])
        by_key = usage.audio_speeches(start_time=started, group_by=["api_key_id", "project_id"], project_ids=[project])
        whole = usage.audio_speeches(start_time=started, bucket_width="1m", project_ids=[project])
    finally:
        sdk.close()
    assert by_model.object == "page" and not by_model.has_more and by_model.next_page is None
    assert _sums(by_model, "model") == {"synthetic": (50, 1), "tts-1": (50, 2)}
    assert _sums(by_key, "api_key_id") == {first_id: (70, 2), second["id"]: (30, 1)}
    assert _sums(by_key, "project_id") == {project: (100, 3)}
    assert _sums(whole, "model") == {None: (100, 3)}  # not grouped: one result a bucket, no grouping field
    totals = _usage(replicas[0], first_key)
    assert (totals["input_characters"], totals["requests"]) == (100, 3)


def test_usage_pages_follow_next_page(replicas: list[GatewayProcess]) -> None:
    hour = int(time.time()) // 3600 * 3600
    sdk = _admin_sdk(replicas[0])
    try:
        starts: list[int] = []
        page: str | openai.Omit = openai.omit
        while True:
            answer = sdk.admin.organization.usage.audio_speeches(
                start_time=hour - 5 * 3600, end_time=hour, bucket_width="1h", limit=2, page=page
            )
            starts += [bucket.start_time for bucket in answer.data]
            if not answer.has_more:
                break
            assert answer.next_page is not None
            page = answer.next_page
        with pytest.raises(openai.BadRequestError) as too_many:
            sdk.admin.organization.usage.audio_speeches(start_time=hour, bucket_width="1d", limit=32)
        first = sdk.admin.organization.usage.audio_speeches(
            start_time=hour - 5 * 3600, end_time=hour, bucket_width="1h", limit=2
        )
        assert first.next_page is not None
        with pytest.raises(openai.BadRequestError) as other_width:  # a 1h page's cursor would start mid-day
            sdk.admin.organization.usage.audio_speeches(
                start_time=hour - 5 * 3600, end_time=hour, bucket_width="1d", page=first.next_page
            )
        with pytest.raises(openai.BadRequestError) as backwards:
            sdk.admin.organization.usage.audio_speeches(start_time=hour, end_time=hour - 3600, bucket_width="1d")
    finally:
        sdk.close()
    assert starts == [hour - 5 * 3600 + i * 3600 for i in range(5)]
    assert too_many.value.code == "invalid_value"
    assert (other_width.value.code, other_width.value.param) == ("invalid_value", "page")
    assert (backwards.value.code, backwards.value.param) == ("invalid_value", "end_time")


def test_the_usage_api_needs_the_admin_token(replicas: list[GatewayProcess], admin: Admin) -> None:
    _, key = _tenant_with_key(admin, {})
    refused = httpx.get(
        f"{replicas[0].base_url}/v1/organization/usage/audio_speeches",
        params={"start_time": 0},
        headers=bearer(key),
        timeout=10,
    )
    assert refused.status_code == 401
