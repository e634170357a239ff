"""Memory pressure on the shared Redis (issue #26): one tenant's many distinct clips cost no other tenant anything.

Two gateway replicas share a real ``redis-server`` started with a small ``maxmemory``, under each eviction policy
that hurt in issue #26: ``allkeys-lru`` (Redis evicted API keys: 19 of 30 tenants answered 401, silently) and
``noeviction`` (Redis refused every write: tenant, key and voice creation answered 503, usage was lost, and the log
got a warning pair per request). One tenant asks for clips worth more than twice Redis's memory; then every tenant's
key must still authenticate, the admin writes must work, usage must be stored, the cache must still answer hits, and
the log must hold no warning per request. Under ``noeviction`` something else then fills Redis to its maxmemory: the
cache gives way, once per replica, and the control plane keeps writing.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import redis

from gateway.speech.cache import REFUSAL_PAUSE_S
from harness.gateway_process import GatewayProcess
from tests.redis_server import RedisServer
from tests.starting import start_together, stop_together
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

ADMIN_TOKEN = "admin-" + uuid.uuid4().hex
MAXMEMORY = 16 * 1024 * 1024
CLIP_CHARS = 200  # 4 s of 24 kHz pcm: 192 kB a clip
FLOOD = 200  # about 38 MB of distinct clips: more than twice maxmemory
TENANTS = 30
OVERSHOOT = 256 * 1024  # past maxmemory after the fill: less than what the cache gives up when refused (a quarter)


class Admin:
    def __init__(self, base_url: str) -> None:
        self.http = httpx.Client(base_url=base_url, headers={"authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=10)

    def tenant(self) -> str:
        name = f"t-{uuid.uuid4().hex[:10]}"
        response = self.http.post("/admin/tenants", json={"name": name})
        assert response.status_code == 201, response.text
        return name

    def key(self, tenant: str) -> str:
        response = self.http.post(f"/admin/tenants/{tenant}/keys")
        assert response.status_code == 201, response.text
        return str(response.json()["key"])


class Deployment:
    """A Redis with ``maxmemory`` and ``policy``, and two gateway replicas sharing it."""

    def __init__(self, policy: str, workdir: Path) -> None:
        self.policy = policy
        self.redis_server = RedisServer()
        self.redis_server.start()
        self.redis = redis.Redis(port=self.redis_server.port)
        self.redis.config_set("maxmemory", str(MAXMEMORY))
        self.redis.config_set("maxmemory-policy", policy)
        config = {
            "redis_url": self.redis_server.url,
            "limits": {"fail_mode": "open"},
            "auth": {"admin_token": ADMIN_TOKEN},
            "engines": {"synthetic": {"kind": "synthetic", "workers": 2, "options": {"seconds_per_char": 0.02}}},
            "aliases": {"tts-1": ["synthetic"]},
        }
        for i in range(2):
            (workdir / f"replica{i}").mkdir()
        self.replicas = [GatewayProcess(config, workdir / f"replica{i}") for i in range(2)]
        start_together(self.replicas)
        self.admin = Admin(self.replicas[0].base_url)
        self.http = httpx.Client(timeout=30)

    def wait_for_cache_writes(self) -> None:
        """Until no replica has a cache write under way. A reply ends at most half a second after its audio while
        its write goes on (gateway/speech/singleflight.py), and a write is counted before its reply ends: once both
        gauges read 0, every entry, refusal and episode of the replies so far is in Redis, the logs and /readyz."""
        wait_until(
            lambda: all(self.writes_in_flight(replica) == 0 for replica in self.replicas),
            timeout_s=60,
            what="the replicas' cache writes landed",
        )

    def writes_in_flight(self, replica: GatewayProcess) -> float:
        metrics = self.http.get(f"{replica.base_url}/metrics").text
        line = next(line for line in metrics.splitlines() if line.startswith("tts_cache_writes_in_flight "))
        return float(line.split()[-1])

    def wait_for_usage(self, key: str, requests: int) -> None:
        """Until each replica reads ``requests`` in the tenant's usage: each replica writes its usage from a task of
        its own after the reply, again a second later while Redis refuses it."""
        wait_until(
            lambda: [self.usage(n, key)["requests"] for n in range(2)] == [requests] * 2,
            timeout_s=60,
            what=f"usage of {requests} requests on both replicas",
        )

    def fill_past_maxmemory(self, overshoot: int) -> None:
        """Fill Redis as another app would, then leave it ``overshoot`` bytes past its maxmemory. Filling until the
        first refusal is not enough: Redis then holds at most one value more than its maxmemory, and gives back more
        than that within a second or two as it shrinks the buffers of idle clients (measured: 790 kB after this
        module's writes), after which writes are admitted again. So: fill, wait for the buffers to shrink, then one
        SETRANGE from a tiny request (no buffer to shrink later) allocates what is left plus the overshoot."""
        with contextlib.suppress(redis.exceptions.OutOfMemoryError):
            for n in itertools.count():
                self.redis.set(f"another-app:{n}", b"x" * 65536)
        seen: list[int] = []

        def settled() -> bool:  # the same for 3 s: Redis shrinks a buffer that was idle for 2 s
            seen.append(int(self.redis.info("memory")["used_memory"]))
            time.sleep(0.25)
            return len(seen) >= 12 and max(seen[-12:]) - min(seen[-12:]) < 1024

        wait_until(settled, timeout_s=60, what="Redis's memory settled")
        room = MAXMEMORY - int(self.redis.info("memory")["used_memory"])
        with contextlib.suppress(redis.exceptions.OutOfMemoryError):  # still past it: the overshoot is there
            self.redis.setrange("another-app:last", max(room, 0) + overshoot, b"x")

    def hits(self, n: int, key: str, text: str) -> bool:
        return self.speak(n, key, text).headers["x-cache"] == "hit"

    def speak(self, n: int, key: str, text: str) -> httpx.Response:
        body = {"model": "synthetic", "input": text, "voice": "alloy", "response_format": "pcm"}
        replica = self.replicas[n % 2]
        return self.http.post(
            f"{replica.base_url}/v1/audio/speech", json=body, headers={"authorization": f"Bearer {key}"}
        )

    def authenticates(self, n: int, key: str) -> bool:
        replica = self.replicas[n % 2]
        response = self.http.get(f"{replica.base_url}/v1/models", headers={"authorization": f"Bearer {key}"})
        assert response.status_code in (200, 401), response.text
        return response.status_code == 200

    def usage(self, n: int, key: str) -> dict[str, Any]:
        replica = self.replicas[n % 2]
        response = self.http.get(f"{replica.base_url}/v1/usage", headers={"authorization": f"Bearer {key}"})
        assert response.status_code == 200, response.text
        return dict(response.json())

    def create_voice(self, key: str) -> int:
        body = {"name": f"v{uuid.uuid4().hex[:8]}", "model": "synthetic", "seed": 42}
        response = self.http.post(
            f"{self.replicas[1].base_url}/v1/audio/voices", json=body, headers={"authorization": f"Bearer {key}"}
        )
        return response.status_code

    def warnings(self, replica: GatewayProcess) -> list[str]:
        """The replica's log lines at warning level or above."""
        lines = [json.loads(line) for line in replica.log().splitlines() if line.startswith("{")]
        return [str(line["message"]) for line in lines if line.get("level") in ("warning", "error", "critical")]

    def close(self) -> None:
        self.http.close()
        self.admin.http.close()
        stop_together(self.replicas)
        self.redis.connection_pool.disconnect()
        self.redis_server.remove()


@pytest.fixture(scope="module", params=["allkeys-lru", "noeviction"])
def deployment(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """One deployment per policy for this module's tests (each makes tenants of its own)."""
    deployment = Deployment(request.param, tmp_path_factory.mktemp(request.param))
    yield deployment
    deployment.close()


def clip_text(n: int) -> str:
    return f"clip {n:04d} " + "x" * (CLIP_CHARS - 10)


def test_one_tenants_clips_cost_no_other_tenant_anything(deployment: Deployment) -> None:
    admin = deployment.admin
    tenants = [admin.tenant() for _ in range(TENANTS)]
    keys = [admin.key(tenant) for tenant in tenants]
    heavy = keys[0]

    with ThreadPoolExecutor(4) as pool:
        statuses = list(pool.map(lambda n: deployment.speak(n, heavy, clip_text(n)).status_code, range(FLOOD)))

    # No API key was lost: every tenant's key still authenticates, on either replica.
    lost = [n for n, key in enumerate(keys) if not deployment.authenticates(n, key)]
    assert lost == [], f"{len(lost)} of {TENANTS} tenants lost their API key"
    stats, memory = deployment.redis.info("stats"), deployment.redis.info("memory")
    assert stats["evicted_keys"] == 0
    assert memory["used_memory"] < MAXMEMORY * 3 // 4  # the cache kept to its half: the control plane has room
    assert statuses == [200] * FLOOD
    # Control-plane writes work: a tenant, a key, a voice.
    newcomer = admin.key(admin.tenant())
    assert deployment.authenticates(1, newcomer)
    assert deployment.create_voice(newcomer) == 201
    # Usage was stored: each replica reads what both served from Redis.
    deployment.wait_for_usage(heavy, FLOOD)
    # The cache still answers hits: the newest clips are kept. The flood's last four were written in no set order,
    # and two that land after one in its shard (of 16) evict it, so one of them is asked for, newest first.
    deployment.wait_for_cache_writes()
    last = [deployment.speak(0, heavy, clip_text(n)).headers["x-cache"] for n in range(FLOOD - 1, FLOOD - 5, -1)]
    assert "hit" in last

    for replica in deployment.replicas:
        warnings = deployment.warnings(replica)
        policy_warnings = [line for line in warnings if "maxmemory-policy allkeys-lru" in line]
        assert len(policy_warnings) == (1 if deployment.policy == "allkeys-lru" else 0), warnings
        assert [line for line in warnings if line not in policy_warnings] == []
        readiness = httpx.get(f"{replica.base_url}/readyz", timeout=5)
        assert readiness.status_code == 200
        assert readiness.json()["warnings"] == policy_warnings
        assert readiness.json()["refusing_writes"] == []


# Under allkeys-lru, Redis evicts whatever something else crowds out: the start-up warning says so and names the fix.
@pytest.mark.parametrize("deployment", ["noeviction"], indirect=True)
def test_a_redis_filled_by_something_else_costs_the_cache_not_the_control_plane(deployment: Deployment) -> None:
    admin = deployment.admin
    keys = [admin.key(admin.tenant()) for _ in range(TENANTS)]
    heavy = keys[0]
    for n in range(64):  # the cache holds about its budget
        assert deployment.speak(n, heavy, clip_text(n)).status_code == 200
    deployment.wait_for_cache_writes()  # on a busy machine the last ones still come: none may land in the fill
    # Another app fills Redis, without TTLs, past its maxmemory: every write is refused until the cache gives way.
    deployment.fill_past_maxmemory(OVERSHOOT)
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        deployment.redis.set("another-app:one-more", b"x")

    served = [deployment.speak(n, heavy, clip_text(1000 + n)).status_code for n in range(20)]
    assert served == [200] * 20
    # A reply may end before its write (on a busy machine): the control plane has room once the cache's writes met
    # the refusal and gave way; before that, nothing can make room.
    deployment.wait_for_cache_writes()
    assert [deployment.authenticates(n, key) for n, key in enumerate(keys)] == [True] * TENANTS
    newcomer = admin.key(admin.tenant())
    assert deployment.create_voice(newcomer) == 201
    deployment.wait_for_usage(heavy, 64 + 20)
    newest = [deployment.speak(n, heavy, clip_text(n)).headers["x-cache"] for n in range(48, 64)]
    assert "hit" in newest  # the cache gave up its oldest entries: the newest are still served

    # Each replica's log, /readyz and metrics are read while none of its writes can end an episode or begin one.
    deployment.wait_for_cache_writes()
    met_refusals = 0
    for replica in deployment.replicas:
        warnings = deployment.warnings(replica)
        refusals = [line for line in warnings if "refuses writes to the cache store" in line]
        assert len(refusals) <= 1, refusals  # one warning per episode, not one per request
        assert len(warnings) <= 4, warnings  # other stores' too: a few lines, not some per request (about 40 here)
        met_refusals += len(refusals)
        readiness = httpx.get(f"{replica.base_url}/readyz", timeout=5)
        assert readiness.status_code == 200  # every replica meets the same Redis: leaving the balancer fixes nothing
        metrics = httpx.get(f"{replica.base_url}/metrics", timeout=5).text
        assert f'tts_redis_write_refusals_total{{store="cache"}} {float(len(refusals))}' in metrics
        in_episode = bool(refusals) and "accepts writes to the cache store again" not in replica.log()
        assert readiness.json()["refusing_writes"] == (["cache"] if in_episode else [])
        assert any("refuses writes to the cache store" in line for line in readiness.json()["warnings"]) == in_episode
        assert f'tts_redis_refusing_writes{{store="cache"}} {1.0 if in_episode else 0.0}' in metrics
    # The cache gave way: at a refusal of its own write, or of the control plane's (usage written before it).
    gave_way = sum("the audio cache gives way" in replica.log() for replica in deployment.replicas)
    assert met_refusals + gave_way >= 1

    # After the pause, the cache writes again within what it kept to: each episode ends, and new audio is cached.
    # No write was under way since the last refusal (waited for above), so every pause has ended after this sleep.
    time.sleep(REFUSAL_PAUSE_S + 0.5)
    for n in range(4):  # one at a time: a shard kept to one entry gives it up for the next one written there
        assert deployment.speak(n, heavy, clip_text(2000 + n)).headers["x-cache"] == "miss"
        deployment.wait_for_cache_writes()
        assert deployment.hits(n + 1, heavy, clip_text(2000 + n))  # on the other replica
    for replica in deployment.replicas:
        refusals = [line for line in deployment.warnings(replica) if "refuses writes to the cache store" in line]
        assert len(refusals) <= 1, refusals
        assert replica.log().count("accepts writes to the cache store again") == len(refusals)
        readiness = httpx.get(f"{replica.base_url}/readyz", timeout=5).json()
        assert (readiness["refusing_writes"], readiness["warnings"]) == ([], [])
