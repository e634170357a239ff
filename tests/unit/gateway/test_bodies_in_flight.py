"""A tenant's request bodies still arriving on a replica are held to ``bodies_in_flight`` (the real app in process):
one tenant cannot take every connection with slow bodies, while its requests without a body, other tenants' and its
own once a body is in go on. (That a response being streamed holds no place is shown end to end, in
``tests/e2e/test_hardening.py``: the test client here runs a response whole before it returns.)"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any, cast

import httpx
from litestar.testing import AsyncTestClient

from auth.keys import generate_api_key, hash_api_key
from tests.inprocess import in_process_app

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from litestar import Litestar

SLOW, OTHER = generate_api_key(), generate_api_key()
CONFIG: dict[str, Any] = {
    "engines": {
        "chattts": None,
        "espeak": None,
        "tones": {"kind": "synthetic"},
    },
    "aliases": {},
    "auth": {
        "tenants": [
            {"name": "slow", "api_key_sha256": [hash_api_key(SLOW)], "limits": {"bodies_in_flight": 2}},
            {"name": "other", "api_key_sha256": [hash_api_key(OTHER)]},
        ]
    },
}
SPEECH = json.dumps({"model": "tones", "input": "Hello.", "voice": "alloy", "response_format": "pcm"}).encode()


class HeldBody:
    """A speech request whose body stops after its first byte until :meth:`release`."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.started = asyncio.Event()
        self.released = asyncio.Event()

    async def body(self) -> AsyncIterator[bytes]:
        self.started.set()
        yield SPEECH[:1]
        await self.released.wait()
        yield SPEECH[1:]

    async def send(self, app: Litestar) -> httpx.Response:
        """Straight to the app: Litestar's test transport reads a body whole before the app sees it."""
        headers = {"authorization": f"Bearer {self.key}", "content-length": str(len(SPEECH))}
        transport = httpx.ASGITransport(app=cast("Any", app))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.post("/v1/audio/speech", content=self.body(), headers={**headers, **JSON})


JSON = {"content-type": "application/json"}


async def speak(client: AsyncTestClient[Litestar], key: str) -> httpx.Response:
    return await client.post("/v1/audio/speech", content=SPEECH, headers={"authorization": f"Bearer {key}", **JSON})


async def test_a_tenant_holds_at_most_its_bodies_in_flight() -> None:
    async with AsyncTestClient(app=in_process_app(CONFIG)) as client:
        held = [HeldBody(SLOW) for _ in range(2)]
        sending = [asyncio.create_task(body.send(client.app)) for body in held]
        await asyncio.gather(*(body.started.wait() for body in held))
        await asyncio.sleep(0.1)  # both heads are in and their bodies begun
        refused = await speak(client, SLOW)
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["code"] == "concurrency_limit_exceeded"
        assert refused.json()["error"]["message"].startswith("Too many requests of your tenant are still sending")
        assert refused.headers["retry-after"] == "1"
        usage = await client.get("/v1/usage", headers={"authorization": f"Bearer {SLOW}"})
        assert usage.json()["rejections"] == {"bodies": 1}, "counted in the tenant's usage, as its other caps are"
        assert (await client.get("/v1/models", headers={"authorization": f"Bearer {SLOW}"})).status_code == 200
        assert (await speak(client, OTHER)).status_code == 200  # another tenant is not held by this one's bodies
        for body in held:
            body.released.set()
        assert [answer.status_code for answer in await asyncio.gather(*sending)] == [200, 200]
        assert (await speak(client, SLOW)).status_code == 200  # the bodies are in: their places are free


async def test_a_changed_cap_holds_for_the_next_body_without_a_restart() -> None:
    admin_token = "bodies-admin-" + "0123456789abcdef" * 2
    admin = {"authorization": f"Bearer {admin_token}"}
    config = {**CONFIG, "auth": {"admin_token": admin_token}}
    async with AsyncTestClient(app=in_process_app(config)) as client:
        created = await client.post(
            "/admin/tenants", json={"name": "acme", "limits": {"bodies_in_flight": 1}}, headers=admin
        )
        assert created.status_code == 201, created.text
        assert created.json()["limits"]["bodies_in_flight"] == 1  # shown in the tenant's limits
        key = (await client.post("/admin/tenants/acme/keys", headers=admin)).json()["key"]
        held = HeldBody(key)
        sending = asyncio.create_task(held.send(client.app))
        await held.started.wait()
        await asyncio.sleep(0.1)
        assert (await speak(client, key)).status_code == 429
        raised = await client.post(
            "/admin/tenants", json={"name": "acme", "limits": {"bodies_in_flight": 2}}, headers=admin
        )
        assert raised.status_code == 201, raised.text
        assert (await speak(client, key)).status_code == 200  # the new cap, for the next body
        held.released.set()
        assert (await sending).status_code == 200
