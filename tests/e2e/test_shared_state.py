"""Shared state that holds: two real gateway replicas on a real redis-server of this module's own.

Tenant churn leaves Redis as it found it, listings come in pages, usage belongs to a tenant's generation (a deleted
tenant's in-flight usage is kept apart), a tenant's change reaches the other replica's memory at once, and a Redis
written by the previous version is moved into today's layout at start.
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
import time
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import redis

from harness.gateway_process import GatewayProcess
from tests.redis_server import RedisServer
from tests.starting import start_together, stop_together
from tests.tenancy import ADMIN_TOKEN, Admin, bearer, speak
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from redis.typing import EncodableT, FieldT


def config(redis_url: str) -> dict[str, Any]:
    return {
        "redis_url": redis_url,
        "auth": {"admin_token": ADMIN_TOKEN, "tenants": [{"name": "seeded"}], "lookup_cache_s": 60},
        "engines": {
            "synthetic": {"kind": "synthetic", "workers": 1, "options": {"seconds_per_char": 0.01}},
            "slow": {"kind": "synthetic", "workers": 1, "options": {"rtf": 1.0, "seconds_per_char": 0.05}},
        },
        "aliases": {"tts-1": ["synthetic"]},
    }


def two_replicas(server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[GatewayProcess]]:
    processes = [GatewayProcess(config(server.url), tmp_path_factory.mktemp(f"replica{i}")) for i in range(2)]
    start_together(processes)
    yield processes
    stop_together(processes)


@pytest.fixture(scope="module")
def module_redis() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    yield server
    server.remove()


@pytest.fixture(scope="module")
def replicas(module_redis: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[GatewayProcess]]:
    """One pair for the tests that touch only tenants of their own: a pair takes 10-40 s to start on a busy 2-core
    machine, once per test before."""
    yield from two_replicas(module_redis, tmp_path_factory)


@pytest.fixture
def fresh_replicas(
    outage_redis: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[GatewayProcess]]:
    """A pair on a Redis of the test's own, for the test that counts every key Redis holds (the shared pair's
    background writes for other tests' tenants could land in the middle of its count)."""
    yield from two_replicas(outage_redis, tmp_path_factory)


@pytest.fixture
def admin(replicas: list[GatewayProcess]) -> Iterator[Admin]:
    client = Admin(replicas[0].base_url)
    yield client
    client.close()


def usage(replica: GatewayProcess, key: str) -> dict[str, Any]:
    response = httpx.get(f"{replica.base_url}/v1/usage", headers=bearer(key), timeout=10)
    assert response.status_code == 200, response.text
    return dict(response.json())


def served_once(replica: GatewayProcess, key: str) -> bool:
    return bool(usage(replica, key)["requests"] == 1)


def persistent_keys(server: RedisServer) -> set[bytes]:
    """The keys with no time to live: what would stay for ever."""
    client = redis.Redis(port=server.port)
    try:
        return {key for key in client.scan_iter(count=1000) if client.ttl(key) == -1}
    finally:
        client.connection_pool.disconnect()


def test_tenant_churn_leaves_no_record_for_ever(
    fresh_replicas: list[GatewayProcess], outage_redis: RedisServer
) -> None:
    replicas = fresh_replicas
    before = persistent_keys(outage_redis)
    admin = Admin(replicas[0].base_url)
    try:
        churn(replicas, admin)
    finally:
        admin.close()
    time.sleep(0.3)  # usage written in the background lands in the retired records, which expire
    assert persistent_keys(outage_redis) == before


def churn(replicas: list[GatewayProcess], admin: Admin) -> None:
    for round_ in range(12):
        tenant = admin.tenant()
        kept, revoked = admin.key(tenant), admin.key(tenant)
        assert speak(replicas[round_ % 2], kept["key"], f"churn {round_}").status_code == 200
        voice = {"name": "mine", "model": "synthetic", "seed": round_}
        created = httpx.post(f"{replicas[0].base_url}/v1/audio/voices", json=voice, headers=bearer(kept["key"]))
        assert created.status_code == 201, created.text
        assert admin.http.delete(f"/admin/keys/{revoked['id']}").status_code == 200
        wait_until(functools.partial(served_once, replicas[1], kept["key"]), what="the usage written in the background")
        assert admin.http.delete(f"/admin/tenants/{tenant}").status_code == 200


def test_listings_come_in_pages(replicas: list[GatewayProcess], admin: Admin) -> None:
    # The pair is shared: the tenants other tests made before this one are listed too, in their place.
    before = {tenant["name"] for tenant in admin.pages("/admin/tenants", limit=100)}
    assert "seeded" in before
    names = sorted(admin.tenant(f"page-{i:02d}") for i in range(23))
    listed = [tenant["name"] for tenant in admin.pages("/admin/tenants", limit=7)]
    assert listed == sorted(before | set(names))
    key = admin.key(names[0])["key"]
    for text in ("one", "two"):
        speak(replicas[1], key, text)
    used = {row["id"]: row for row in admin.pages("/admin/usage", limit=5)}
    assert set(used) == set(listed)
    assert (used[names[0]]["requests"], used[names[1]]["requests"]) == (2, 0)
    keys = [admin.key(names[1])["id"] for _ in range(5)]
    assert [k["id"] for k in admin.pages(f"/admin/tenants/{names[1]}/keys", limit=2)] == keys
    voices = []
    for i in range(7):
        body = {"name": f"voice-{i}", "model": "synthetic", "seed": i}
        voices.append(httpx.post(f"{replicas[i % 2].base_url}/v1/audio/voices", json=body, headers=bearer(key)).json())
    custom: list[str] = []
    params: dict[str, str | int] = {"limit": 3, "model": "synthetic"}
    while True:
        page = httpx.get(f"{replicas[0].base_url}/v1/audio/voices", params=params, headers=bearer(key)).json()
        custom.extend(v["id"] for v in page["data"] if v["custom"])
        if not page["has_more"]:
            break
        params["after"] = page["last_id"]
    assert custom == [voice["id"] for voice in voices]
    named = {"model": "synthetic", "input": "by name", "voice": "voice-5", "response_format": "pcm"}
    response = httpx.post(f"{replicas[1].base_url}/v1/audio/speech", json=named, headers=bearer(key), timeout=30)
    assert response.status_code == 200, response.text


def test_a_tenant_deleted_mid_stream_and_created_again_starts_empty(
    replicas: list[GatewayProcess], admin: Admin
) -> None:
    tenant = admin.tenant()
    key = admin.key(tenant)["key"]
    assert speak(replicas[0], key, "before").status_code == 200
    streamed: list[httpx.Response] = []
    stream = threading.Thread(target=lambda: streamed.append(speak(replicas[1], key, "x" * 40, model="slow")))
    stream.start()  # two seconds of audio at real time
    # Deleted once the stream is under way (on the engine's one worker): before it, the deletion would refuse it.
    wait_until(lambda: replicas[1].engine("slow")["active_jobs"] == 1, what="the stream under way")
    assert admin.http.delete(f"/admin/tenants/{tenant}").status_code == 200
    admin.tenant(tenant)
    new_key = admin.key(tenant)["key"]
    assert usage(replicas[0], new_key)["requests"] == 0
    stream.join(10)
    assert streamed[0].status_code == 200  # a stream under way is not cut by the deletion
    assert usage(replicas[1], new_key)["requests"] == 0

    def retired() -> list[dict[str, Any]]:
        return list(admin.http.get(f"/admin/retired-usage/{tenant}").json()["data"])

    wait_until(lambda: bool(retired()) and retired()[0]["requests"] == 2, what="the stream's usage, retired")
    [record] = retired()
    assert record["input_characters"] == len("before") + 40
    assert record["audio_seconds"] == pytest.approx(0.06 + 2.0, abs=0.05)


def test_a_tenants_change_reaches_the_other_replicas_memory_at_once(
    replicas: list[GatewayProcess], admin: Admin
) -> None:
    tenant = admin.tenant(requests_per_minute=100)
    key = admin.key(tenant)["key"]
    assert speak(replicas[1], key).status_code == 200  # replica 1 now remembers the tenant (lookup_cache_s: 60)
    assert admin.http.post("/admin/tenants", json={"name": tenant, "limits": {"requests_per_minute": 1}}).is_success
    wait_until(
        lambda: speak(replicas[1], key).headers.get("x-ratelimit-limit-requests") == "1",
        timeout_s=10.0,  # without the change announced, the replica would keep the old limit for lookup_cache_s (60)
        what="the new limit on the other replica",
    )
    assert speak(replicas[1], key).status_code == 429


def test_the_previous_versions_layout_is_moved_at_start(outage_redis: RedisServer, tmp_path: Path) -> None:
    client = redis.Redis(port=outage_redis.port)
    key = "sk-tts-" + "L" * 43
    key_hash = hashlib.sha256(key.encode()).hexdigest()
    record = {"limits": {"requests_per_minute": 50}, "models": None, "generation": "0123456789abcdef"}
    client.hset("tts:auth:tenants", "legacy", json.dumps(record))
    fields: dict[FieldT, EncodableT] = {"id": "key_0011223344556677", "tenant": "legacy", "key_hash": key_hash,
                                        "created_at": "1.0", "revoked": "0", "hint": ""}  # fmt: skip
    client.hset(f"tts:auth:key:{key_hash}", mapping=fields)
    client.set("tts:auth:key-id:key_0011223344556677", key_hash)
    client.sadd("tts:auth:tenant-keys:legacy", key_hash)
    voice_id = "voice_" + "a" * 24
    voice = {"id": voice_id, "tenant": "legacy", "name": "old", "model": "synthetic",
             "speaker": "seed:7", "created_at": 1.0, "type": "seed", "consent": None}  # fmt: skip
    client.hset("tts:voices:legacy", voice_id, json.dumps(voice))
    client.hset("tts:usage:legacy", mapping={"requests": 4, "input_characters": 40, "audio_seconds": 1.5})
    client.connection_pool.disconnect()
    with GatewayProcess(config(outage_redis.url), tmp_path) as gateway:
        assert usage(gateway, key)["requests"] == 4
        named = {"model": "synthetic", "input": "old voice", "voice": "old", "response_format": "pcm"}
        spoken = httpx.post(f"{gateway.base_url}/v1/audio/speech", json=named, headers=bearer(key), timeout=30)
        assert spoken.status_code == 200, spoken.text
        assert spoken.headers["x-ratelimit-limit-requests"] == "50"
    client = redis.Redis(port=outage_redis.port)
    leftovers = [
        k for k in client.scan_iter() if k.startswith((b"tts:auth:", b"tts:voices:legacy", b"tts:usage:legacy"))
    ]
    client.connection_pool.disconnect()
    assert leftovers == []


def test_a_dropped_dictionary_version_is_refused_by_every_replica(replicas: list[GatewayProcess], admin: Admin) -> None:
    # Each replica keeps the versions it compiled in memory: the one that had compiled a pinned version served it from
    # there after the dictionary dropped it (it keeps its last ten), while the other answered 404.
    key = {"xi-api-key": admin.key(admin.tenant())["key"]}
    with (
        httpx.Client(base_url=replicas[0].base_url, headers=key, timeout=30) as first,
        httpx.Client(base_url=replicas[1].base_url, headers=key, timeout=30) as second,
    ):
        rules = [{"type": "alias", "string_to_replace": "GW", "alias": "gateway"}]
        created = first.post("/v1/pronunciation-dictionaries/add-from-rules", json={"name": "brand", "rules": rules})
        assert created.status_code == 200, created.text
        locator = {"pronunciation_dictionary_id": created.json()["id"], "version_id": created.json()["version_id"]}
        assert speak_pinned(first, locator).status_code == 200  # compiled by the first replica
        for n in range(10):  # through the second: the pinned version drops out of the ten kept
            rules = [{"type": "alias", "string_to_replace": "GW", "alias": f"gateway {n}"}]
            path = f"/v1/pronunciation-dictionaries/{locator['pronunciation_dictionary_id']}/set-rules"
            assert second.post(path, json={"rules": rules}).status_code == 200
        answers = [speak_pinned(client, locator) for client in (second, first)]
    assert [answer.status_code for answer in answers] == [404, 404], answers[1].text
    assert answers[1].json() == answers[0].json()
    assert answers[1].json()["detail"]["status"] == "pronunciation_dictionary_not_found"


def speak_pinned(client: httpx.Client, locator: dict[str, str]) -> httpx.Response:
    """ElevenLabs' text-to-speech with one dictionary version pinned."""
    body = {"text": "GW", "model_id": "tts-1", "pronunciation_dictionary_locators": [locator]}
    return client.post("/v1/text-to-speech/alloy", params={"output_format": "pcm_24000"}, json=body)
