"""A tenant's socket budget is shared by the replicas on one Redis (issue #47, ``gateway/sessions/budget.py`` and
``auth/limits/sockets.py``), end to end: two real gateway replicas on one real redis-server, a realtime socket on
each, each within what one replica allows the tenant, together over it: one of them is closed (1008) with the
tenant-wide refusal, where a lone socket sending the same on one replica is served throughout."""

from __future__ import annotations

import asyncio
import json
import time
from typing import TYPE_CHECKING, Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from auth.keys import generate_api_key, hash_api_key
from harness.gateway_process import GatewayProcess
from tests.starting import start_together, stop_together

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.redis_server import RedisServer

SOLO_KEY = generate_api_key()
SPREAD_KEY = generate_api_key()
MODEL = "gpt-realtime"
REALTIME = f"/v1/realtime?model={MODEL}"
TENANT_MESSAGES_PER_S = 20  # all of one tenant's sockets together, with 1 s of burst
SENT_PER_S = 18  # by each socket: under the tenant's rate alone, over it with two
SENDING_S = 5.0
RETRIEVE = json.dumps({"type": "conversation.item.retrieve", "item_id": "missing"})


def config(redis_url: str) -> dict[str, Any]:
    return {
        "redis_url": redis_url,
        "realtime": {
            "max_socket_messages_per_s": 100,
            "max_tenant_socket_messages_per_s": TENANT_MESSAGES_PER_S,
            "socket_burst_s": 1.0,
        },
        "auth": {
            "tenants": [
                {"name": "solo", "api_key_sha256": [hash_api_key(SOLO_KEY)]},
                {"name": "spread", "api_key_sha256": [hash_api_key(SPREAD_KEY)]},
            ]
        },
        "engines": {"tones": {"kind": "synthetic", "workers": 1}},
        "aliases": {MODEL: ["tones"]},
    }


@pytest.fixture(scope="module")
def replicas(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[GatewayProcess]]:
    redis_server.flush()
    processes = [GatewayProcess(config(redis_server.url), tmp_path_factory.mktemp(f"shared{i}")) for i in range(2)]
    start_together(processes)
    yield processes
    stop_together(processes)


def ws(replica: GatewayProcess) -> str:
    return replica.base_url.replace("http://", "ws://") + REALTIME


async def send_paced(replica: GatewayProcess, key: str) -> tuple[int | None, str | None]:
    """Send :data:`SENT_PER_S` messages a second for :data:`SENDING_S` (on schedule: late ones catch up), reading the
    replies; the close code (``None``: still open) and the last error's message that was not ``item_not_found``."""
    refusal: str | None = None
    async with connect(ws(replica), additional_headers={"Authorization": f"Bearer {key}"}) as client:

        async def read(client: ClientConnection) -> None:
            nonlocal refusal
            async for raw in client:
                event = json.loads(raw)
                if event.get("type") == "error" and event["error"]["code"] != "item_not_found":
                    refusal = event["error"]["message"]

        reading = asyncio.create_task(read(client))
        started = time.monotonic()
        try:
            for sent in range(int(SENT_PER_S * SENDING_S)):
                await asyncio.sleep(max(0.0, started + sent / SENT_PER_S - time.monotonic()))
                await client.send(RETRIEVE)
        except ConnectionClosed:
            pass
        await asyncio.sleep(0.5)  # the replies (or the close) of the last messages
        code = client.close_code
        await client.close()
        await asyncio.gather(reading, return_exceptions=True)
    return code, refusal


async def test_a_lone_socket_within_the_tenants_rate_is_served(replicas: list[GatewayProcess]) -> None:
    assert await send_paced(replicas[0], SOLO_KEY) == (None, None)


async def test_a_tenants_sockets_on_two_replicas_share_its_budget(replicas: list[GatewayProcess]) -> None:
    before = [replica.refusals()[("socket", 429, "rate_limit_exceeded")] for replica in replicas]
    outcomes = await asyncio.gather(*(send_paced(replica, SPREAD_KEY) for replica in replicas))
    refused = [message for code, message in outcomes if code == 1008]
    assert refused, f"two sockets sent {2 * SENT_PER_S} messages a second, over the tenant's {TENANT_MESSAGES_PER_S}"
    for message in refused:
        assert message is not None
        assert "on all of your sockets together (" in message  # the tenant's, on every replica: not "on one server"
    after = [replica.refusals()[("socket", 429, "rate_limit_exceeded")] for replica in replicas]
    assert sum(after) - sum(before) == len(refused)
