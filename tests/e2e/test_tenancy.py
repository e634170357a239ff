"""Tenants, keys, JWTs, limits, cache, custom voices and usage: two gateway replicas sharing one real Redis, then the
same suite on a real three-master Redis Cluster."""

from __future__ import annotations

import asyncio
import hashlib
import subprocess
import time
import uuid
from typing import TYPE_CHECKING, Any

import httpx
import jwt
import openai
import pytest

from engines.synthetic import voice_frequency
from harness.gateway_process import CONSOLE_SCRIPT, GatewayProcess
from tests.audio_decode import decode_audio, dominant_frequency
from tests.redis_server import RedisServer, disconnected
from tests.starting import start_together, stop_together
from tests.tenancy import AUDIENCE, JWT_SECRET, Admin, speak, tenancy_config
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.redis_topologies import RedisClusterSetup


@pytest.fixture(scope="module", params=["redis", "cluster"])
def shared_redis(request: pytest.FixtureRequest) -> RedisServer | RedisClusterSetup:
    """The replicas' Redis: one server, or a Redis Cluster (every key then sits on the node of its hash slot)."""
    shared: RedisServer | RedisClusterSetup = request.getfixturevalue(
        "redis_server" if request.param == "redis" else "redis_cluster"
    )
    shared.flush()
    return shared


def stored_bytes(shared: RedisServer | RedisClusterSetup) -> bytes:
    """Every key and value the replicas' Redis holds (on every node of a cluster)."""
    servers = [shared] if isinstance(shared, RedisServer) else shared.nodes
    dumped = b""
    for server in servers:
        with disconnected(server.client()) as client:
            for key in client.keys("*"):
                assert isinstance(key, bytes)  # a client that does not decode answers
                dumped += key + str(client.dump(key)).encode()
    return dumped


@pytest.fixture(scope="module")
def replicas(
    shared_redis: RedisServer | RedisClusterSetup, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[GatewayProcess]]:
    processes = [
        GatewayProcess(tenancy_config(shared_redis.url), tmp_path_factory.mktemp(f"replica{i}")) for i in range(2)
    ]
    start_together(processes)
    yield processes
    stop_together(processes)


@pytest.fixture(scope="module")
def admin(replicas: list[GatewayProcess]) -> Iterator[Admin]:
    client = Admin(replicas[0].base_url)
    yield client
    client.close()


_sdk_clients: list[openai.OpenAI] = []


@pytest.fixture(scope="module", autouse=True)
def _close_sdk_clients() -> Iterator[None]:
    # Closed explicitly: a client collected later would warn about its open socket inside some other test.
    yield
    while _sdk_clients:
        _sdk_clients.pop().close()


def sdk(replica: GatewayProcess, key: str) -> openai.OpenAI:
    client = openai.OpenAI(base_url=f"{replica.base_url}/v1", api_key=key, max_retries=0)
    _sdk_clients.append(client)
    return client


def token(claims: dict[str, Any], secret: str = JWT_SECRET, algorithm: str = "HS256") -> str:
    return jwt.encode({"aud": AUDIENCE, "exp": int(time.time()) + 60, **claims}, secret, algorithm=algorithm)


# ------------------------------------------------------------------ authentication
def test_missing_malformed_and_unknown_keys_are_401(replicas: list[GatewayProcess]) -> None:
    bogus = "sk-tts-" + "A" * 43
    for key in ("not-a-key", bogus):
        with pytest.raises(openai.AuthenticationError) as refused:
            sdk(replicas[0], key).audio.speech.create(model="synthetic", voice="alloy", input="hi")
        assert refused.value.code == "invalid_api_key"
        assert bogus not in refused.value.message
    response = httpx.post(f"{replicas[0].base_url}/v1/audio/speech", json={"model": "synthetic"}, timeout=10)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_api_key"


def test_a_key_works_on_every_replica_and_revocation_reaches_them_within_a_second(
    replicas: list[GatewayProcess],
    admin: Admin,
) -> None:
    key = admin.key(admin.tenant())
    for replica in replicas:
        assert speak(replica, key["key"]).status_code == 200
    assert admin.http.delete(f"/admin/keys/{key['id']}").status_code == 200
    revoked_at = time.monotonic()
    while speak(replicas[1], key["key"]).status_code != 401:
        assert time.monotonic() - revoked_at < 1.0
        time.sleep(0.05)
    assert speak(replicas[0], key["key"]).status_code == 401


def test_keys_are_shown_once_and_stored_only_hashed(
    replicas: list[GatewayProcess],
    admin: Admin,
    shared_redis: RedisServer | RedisClusterSetup,
) -> None:
    tenant = admin.tenant()
    key = admin.key(tenant)
    assert key["key"].startswith("sk-tts-") and len(key["key"]) > 40
    listed = admin.http.get(f"/admin/tenants/{tenant}/keys").json()["data"]
    assert [k["id"] for k in listed] == [key["id"]]
    assert all(key["key"] not in str(k) for k in listed)
    dump = stored_bytes(shared_redis)
    assert hashlib.sha256(key["key"].encode()).hexdigest().encode() in dump  # the dump does see the record ...
    assert key["key"].encode() not in dump  # ... and never the key
    speak(replicas[0], key["key"])
    for replica in replicas:
        assert key["key"] not in replica.log()


def test_jwt_callers(replicas: list[GatewayProcess], admin: Admin) -> None:
    tenant = admin.tenant()
    assert speak(replicas[1], token({"org": tenant})).status_code == 200
    expired = jwt.encode({"aud": AUDIENCE, "org": tenant, "exp": int(time.time()) - 10}, JWT_SECRET, "HS256")
    # "none" signs with no key: pyjwt takes "" or None for it, and its types only "".
    unsigned = jwt.encode({"aud": AUDIENCE, "org": tenant, "exp": int(time.time()) + 60}, "", "none")
    wrong_secret = "wrong-" + JWT_SECRET
    for bad in (expired, unsigned, token({"org": tenant}, secret=wrong_secret), token({"org": tenant}) + "x"):
        assert speak(replicas[1], bad).status_code == 401
    with pytest.raises(openai.PermissionDeniedError):
        sdk(replicas[1], token({"org": "no-such-tenant"})).audio.speech.create(
            model="synthetic", voice="alloy", input="hi"
        )


def test_a_model_the_tenant_may_not_use_is_403(replicas: list[GatewayProcess], admin: Admin) -> None:
    key = admin.key(admin.tenant(models=["slow"]))["key"]
    with pytest.raises(openai.PermissionDeniedError) as denied:
        sdk(replicas[0], key).audio.speech.create(model="synthetic", voice="alloy", input="hi")
    assert denied.value.code == "model_not_allowed"
    models = sdk(replicas[0], key).models.list()
    assert [m.id for m in models.data] == ["slow"]


# ------------------------------------------------------------------ limits
def test_rate_limit_headers_are_exact(replicas: list[GatewayProcess], admin: Admin) -> None:
    key = admin.key(admin.tenant(requests_per_minute=5, characters_per_minute=1000))["key"]
    first = speak(replicas[0], key, "x" * 10)
    second = speak(replicas[1], key, "y" * 20)
    assert first.headers["x-ratelimit-limit-requests"] == "5"
    assert first.headers["x-ratelimit-remaining-requests"] == "4"
    assert first.headers["x-ratelimit-limit-tokens"] == "1000"
    assert first.headers["x-ratelimit-remaining-tokens"] == "990"
    assert second.headers["x-ratelimit-remaining-requests"] == "3"
    assert second.headers["x-ratelimit-remaining-tokens"] == "970"
    assert second.headers["x-ratelimit-reset-requests"].endswith("s")


def test_two_replicas_together_stay_within_the_request_limit(replicas: list[GatewayProcess], admin: Admin) -> None:
    key = admin.key(admin.tenant(requests_per_minute=6))["key"]

    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=30) as client:
            calls = [
                client.post(
                    f"{replicas[n % 2].base_url}/v1/audio/speech",
                    json={"model": "synthetic", "input": f"burst {n}", "voice": "alloy"},
                    headers={"authorization": f"Bearer {key}"},
                )
                for n in range(16)
            ]
            return await asyncio.gather(*calls)

    statuses = [r.status_code for r in asyncio.run(burst())]
    assert statuses.count(200) == 6
    assert statuses.count(429) == 10
    with pytest.raises(openai.RateLimitError) as limited:
        sdk(replicas[0], key).audio.speech.create(model="synthetic", voice="alloy", input="one more")
    retry_after = int(limited.value.response.headers["retry-after"])
    assert 1 <= retry_after <= 60
    assert limited.value.response.headers["x-ratelimit-remaining-requests"] == "0"
    usage = httpx.get(f"{replicas[1].base_url}/v1/usage", headers={"authorization": f"Bearer {key}"}).json()
    assert usage["requests"] == 6
    assert usage["rejections"]["requests"] == 11


def test_the_character_budget_is_weighted(replicas: list[GatewayProcess], admin: Admin) -> None:
    key = admin.key(admin.tenant(characters_per_minute=30))["key"]
    assert speak(replicas[0], key, "a" * 20).status_code == 200
    refused = speak(replicas[1], key, "b" * 20)
    assert refused.status_code == 429
    assert refused.json()["error"]["type"] == "tokens"
    assert speak(replicas[1], key, "c" * 10).status_code == 200  # what is left still fits


def test_concurrent_streams_are_leased_across_replicas(replicas: list[GatewayProcess], admin: Admin) -> None:
    key = admin.key(admin.tenant(concurrent_streams=1))["key"]
    body = {"model": "slow", "input": "x" * 30, "voice": "alloy", "response_format": "pcm"}  # 1.5 s, real time
    with httpx.stream(
        "POST",
        f"{replicas[0].base_url}/v1/audio/speech",
        json=body,
        headers={"authorization": f"Bearer {key}"},
        timeout=30,
    ) as streaming:
        assert streaming.status_code == 200
        refused = speak(replicas[1], key, "meanwhile")
        assert refused.status_code == 429
        assert refused.json()["error"]["code"] == "concurrency_limit_exceeded"
        streaming.read()
    assert speak(replicas[1], key, "afterwards").status_code == 200


# ------------------------------------------------------------------ custom voices
def test_custom_voices_belong_to_one_tenant(replicas: list[GatewayProcess], admin: Admin) -> None:
    owner, other = admin.key(admin.tenant())["key"], admin.key(admin.tenant())["key"]
    created = httpx.post(
        f"{replicas[0].base_url}/v1/audio/voices",
        headers={"authorization": f"Bearer {owner}"},
        json={"name": "narrator", "model": "synthetic", "seed": 42},
    ).json()
    voice_id = created["id"]
    by_id = speak(replicas[1], owner, "custom voice by id", voice={"id": voice_id}, response_format="wav")
    by_name = speak(replicas[1], owner, "custom voice by id", voice="narrator", response_format="wav")
    assert by_id.status_code == by_name.status_code == 200
    audio = decode_audio(by_id.content, "wav")
    assert dominant_frequency(audio) == pytest.approx(voice_frequency("", "seed:42"), abs=5)
    assert by_name.content == by_id.content
    headers = {"authorization": f"Bearer {other}"}
    base = replicas[1].base_url
    assert httpx.get(f"{base}/v1/audio/voices/{voice_id}", headers=headers).status_code == 404
    assert voice_id not in str(httpx.get(f"{base}/v1/audio/voices", headers=headers).json())
    assert speak(replicas[1], other, "steal", voice={"id": voice_id}).status_code == 404
    assert speak(replicas[1], other, "steal", voice="narrator").status_code == 400  # not a voice it has
    assert httpx.delete(f"{base}/v1/audio/voices/{voice_id}", headers=headers).status_code == 404
    owner_headers = {"authorization": f"Bearer {owner}"}
    assert voice_id in str(httpx.get(f"{base}/v1/audio/voices", headers=owner_headers).json())
    assert httpx.delete(f"{base}/v1/audio/voices/{voice_id}", headers=owner_headers).status_code == 200
    assert speak(replicas[0], owner, "gone", voice={"id": voice_id}).status_code == 404


def test_custom_voice_input_is_validated(replicas: list[GatewayProcess], admin: Admin) -> None:
    headers = {"authorization": f"Bearer {admin.key(admin.tenant())['key']}"}
    url = f"{replicas[0].base_url}/v1/audio/voices"
    for body, param in (
        ({"name": "x", "model": "synthetic"}, None),
        ({"name": "x", "model": "synthetic", "seed": 1, "speaker": "s"}, None),
        ({"name": "nova", "model": "synthetic", "seed": 1}, "name"),
        ({"name": "x", "model": "nope", "seed": 1}, "model"),
    ):
        response = httpx.post(url, json=body, headers=headers)
        assert response.status_code in (400, 404), response.text
        assert response.json()["error"]["param"] == param


# ------------------------------------------------------------------ cache and usage
def test_the_cache_serves_repeats_and_usage_counts_hits(replicas: list[GatewayProcess], admin: Admin) -> None:
    key = admin.key(admin.tenant())["key"]
    text = f"cache me {uuid.uuid4().hex}"
    spaced = text.replace(" ", "   ")  # the same text once whitespace is collapsed
    miss = speak(replicas[0], key, text, response_format="mp3")
    hit = speak(replicas[1], key, f"  {spaced} ", response_format="mp3")
    assert miss.headers["x-cache"] == "miss"
    assert hit.headers["x-cache"] == "hit"
    assert hit.content == miss.content
    assert speak(replicas[1], key, text, response_format="mp3", speed=1.5).headers["x-cache"] == "miss"
    # Another tenant asking the same never learns, through a hit, what this one asked for.
    stranger = admin.key(admin.tenant())["key"]
    assert speak(replicas[0], stranger, text, response_format="mp3").headers["x-cache"] == "miss"
    usage = httpx.get(f"{replicas[0].base_url}/v1/usage", headers={"authorization": f"Bearer {key}"}).json()
    assert usage["requests"] == 3
    assert usage["cache_hits"] == 1
    assert usage["input_characters"] == len(text) * 2 + len(spaced)
    assert usage["audio_seconds"] > 0
    everyone = admin.http.get("/admin/usage", params={"limit": 100}).json()["data"]
    assert any(record["cache_hits"] >= 1 for record in everyone)


def test_identical_requests_in_flight_synthesize_once(replicas: list[GatewayProcess], admin: Admin) -> None:
    key = admin.key(admin.tenant())["key"]
    text = f"together {uuid.uuid4().hex[:6]}"  # about 1 s at real time on the slow engine

    def synthesized() -> float:
        metrics = httpx.get(f"{replicas[0].base_url}/metrics").text
        lines = [m for m in metrics.splitlines() if m.startswith('tts_synthesis_seconds_count{engine="slow"}')]
        return float(lines[0].split()[-1]) if lines else 0.0  # no line before the engine's first synthesis

    before = synthesized()

    async def together() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=30) as client:
            body = {"model": "slow", "input": text, "voice": "alloy", "response_format": "wav"}
            calls = [
                client.post(
                    f"{replicas[0].base_url}/v1/audio/speech", json=body, headers={"authorization": f"Bearer {key}"}
                )
                for _ in range(3)
            ]
            return await asyncio.gather(*calls)

    responses = asyncio.run(together())
    assert [r.status_code for r in responses] == [200, 200, 200]
    assert responses[0].content == responses[1].content == responses[2].content
    assert synthesized() == before + 1


# ------------------------------------------------------------------ Redis outages
@pytest.fixture
def lonely_replica(outage_redis: RedisServer, tmp_path: Path) -> Iterator[GatewayProcess]:
    process = GatewayProcess(tenancy_config(outage_redis.url), tmp_path)
    process.start()
    yield process
    process.stop()


def snapshot(server: RedisServer) -> None:
    """Persist what Redis holds, so that it comes back after the outage as a production Redis would."""
    import redis

    client = redis.Redis(port=server.port)
    client.save()
    client.connection_pool.disconnect()


def test_redis_outage_fails_open_and_loses_no_usage(
    lonely_replica: GatewayProcess,
    outage_redis: RedisServer,
) -> None:
    admin = Admin(lonely_replica.base_url)
    key = admin.key(admin.tenant(requests_per_minute=100))["key"]
    admin.close()

    def requests_counted() -> int:
        usage = httpx.get(f"{lonely_replica.base_url}/v1/usage", headers={"authorization": f"Bearer {key}"}).json()
        return int(usage["requests"])

    # A request is counted in the background once its response has ended, which the client may see a moment before
    # the gateway does: the snapshot Redis comes back with must hold the first request's count.
    assert speak(lonely_replica, key, "before").status_code == 200
    wait_until(lambda: requests_counted() >= 1, what="the first request counted")
    snapshot(outage_redis)
    outage_redis.stop()
    during = [speak(lonely_replica, key, f"during {n}").status_code for n in range(3)]
    assert during == [200, 200, 200]
    assert httpx.get(f"{lonely_replica.base_url}/readyz").json()["redis"] == "unreachable"
    metrics = httpx.get(f"{lonely_replica.base_url}/metrics").text
    assert "tts_limits_fail_open_admissions_total 3.0" in metrics
    assert "tts_redis_pool_exhausted_total 0.0" in metrics  # an outage, not a pool run dry
    outage_redis.start()
    assert speak(lonely_replica, key, "after").status_code == 200
    wait_until(lambda: requests_counted() >= 5, what="the five requests counted")
    assert requests_counted() == 5


def test_redis_outage_fails_closed_when_configured(
    outage_redis: RedisServer,
    tmp_path: Path,
) -> None:
    with GatewayProcess(tenancy_config(outage_redis.url, fail_mode="closed"), tmp_path) as replica:
        admin = Admin(replica.base_url)
        key = admin.key(admin.tenant(requests_per_minute=100))["key"]
        admin.close()
        assert speak(replica, key).status_code == 200
        snapshot(outage_redis)
        outage_redis.stop()
        refused = speak(replica, key, "during")
        assert refused.status_code == 503
        assert refused.headers["retry-after"] == "1"
        assert httpx.get(f"{replica.base_url}/readyz").status_code == 503
        outage_redis.start()
        assert speak(replica, key, "after").status_code == 200


# ------------------------------------------------------------------ configuration and command line
def test_auth_required_refuses_to_start_without_tenants(tmp_path: Path) -> None:
    process = GatewayProcess({"auth": {"required": True}}, tmp_path)
    with pytest.raises(RuntimeError, match=r"auth\.required is true"):
        process.start()


def test_keys_create_command_issues_a_working_key(replicas: list[GatewayProcess]) -> None:
    result = subprocess.run(
        [str(CONSOLE_SCRIPT), "keys", "create", "--tenant", "acme", "--config", str(replicas[0].config_path)],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    key = result.stdout.split()[0]
    assert speak(replicas[1], key).status_code == 200


def test_config_key_hashes_authenticate_without_redis(tmp_path: Path) -> None:
    result = subprocess.run(
        [str(CONSOLE_SCRIPT), "keys", "create", "--tenant", "solo"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = result.stdout.split()
    key, key_hash = lines[0], lines[-1]
    config = {
        "auth": {"tenants": [{"name": "solo", "api_key_sha256": [key_hash]}]},
        "engines": {"synthetic": {"kind": "synthetic"}},
        "aliases": {},
    }
    with GatewayProcess(config, tmp_path) as replica:
        assert speak(replica, key).status_code == 200
        assert speak(replica, key[:-1] + ("A" if key[-1] != "A" else "B")).status_code == 401


def test_usage_counts_served_requests_not_failed_ones(replicas: list[GatewayProcess], admin: Admin) -> None:
    key = admin.key(admin.tenant())["key"]
    assert speak(replicas[0], key, "served").status_code == 200
    assert speak(replicas[0], key, "fails before its first byte #fail").status_code == 503
    usage = httpx.get(f"{replicas[1].base_url}/v1/usage", headers={"authorization": f"Bearer {key}"}).json()
    assert usage["requests"] == 1
    assert usage["input_characters"] == len("served")
