"""A socket's lanes speaking side by side hold the tenant's ``concurrent_streams``, end to end: a real gateway, the
synthetic engine at real-time pace, one ElevenLabs ``multi-stream-input`` socket whose 5 contexts flush a sentence
each at once. Before, the 5 were synthesized at once on the session's one stream (a probe's 16 sockets of a tenant
limited to 16 streams filled an engine's queue, and another tenant got ``503 engine_overloaded``)."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import TYPE_CHECKING, Any

import pytest
from websockets.asyncio.client import ClientConnection, connect

from auth.keys import generate_api_key, hash_api_key
from harness.gateway_process import GatewayProcess

if TYPE_CHECKING:
    from collections.abc import Iterator

KEY = generate_api_key()
STREAMS = 2
CONTEXTS = 5
SECONDS_PER_CHAR = 0.04  # at real-time pace: a sentence of about 30 characters is spoken in about 1.2 s


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    config = {
        "auth": {
            "tenants": [
                {"name": "acme", "api_key_sha256": [hash_api_key(KEY)], "limits": {"concurrent_streams": STREAMS}}
            ]
        },
        "engines": {
            "paced": {
                "kind": "synthetic",
                "workers": CONTEXTS,  # the engine could speak every context at once: only the streams hold them back
                "options": {"rtf": 1.0, "seconds_per_char": SECONDS_PER_CHAR},
            }
        },
        "aliases": {"eleven_multilingual_v2": ["paced"]},
    }
    with GatewayProcess(config, tmp_path_factory.mktemp("session-streams")) as process:
        yield process


async def send(socket: ClientConnection, **message: Any) -> None:
    await socket.send(json.dumps(message))


async def until_every_final(socket: ClientConnection, contexts: set[str]) -> list[dict[str, Any]]:
    received: list[dict[str, Any]] = []
    finals: set[str] = set()
    async with asyncio.timeout(30):
        while finals != contexts:
            received.append(message := json.loads(await socket.recv()))
            if message.get("isFinal") is True:
                finals.add(message["contextId"])
    return received


async def engine_load(gateway: GatewayProcess, seen: list[int], done: asyncio.Event) -> None:
    """The engine's syntheses running or waiting, read from ``/readyz`` until ``done``."""
    while not done.is_set():
        state = await asyncio.to_thread(gateway.engine, "paced")
        seen.append(state["active_jobs"] + state["queued"])
        await asyncio.sleep(0.05)


async def test_contexts_speaking_at_once_hold_the_tenants_streams(gateway: GatewayProcess) -> None:
    base = gateway.base_url.replace("http://", "ws://")
    target = (
        f"{base}/v1/text-to-speech/alloy/multi-stream-input?model_id=eleven_multilingual_v2&output_format=pcm_24000"
    )
    contexts = {f"c{n}" for n in range(CONTEXTS)}
    seen: list[int] = []
    done = asyncio.Event()
    async with connect(target, additional_headers={"xi-api-key": KEY}, max_size=None) as socket:
        for context in sorted(contexts):
            await send(socket, text=" ", context_id=context)
        watching = asyncio.create_task(engine_load(gateway, seen, done))
        for n, context in enumerate(sorted(contexts)):  # each its own sentence: no single flight joins two
            await send(socket, text=f"Context number {n} says its piece. ", context_id=context, flush=True)
            await send(socket, context_id=context, close_context=True)
        try:
            received = await until_every_final(socket, contexts)
        finally:
            done.set()
            await watching

    assert max(seen) == STREAMS  # two side by side (the session's stream and one more), never the five
    for context in contexts:
        audio = b"".join(
            base64.b64decode(m["audio"]) for m in received if m.get("contextId") == context and m.get("audio")
        )
        assert len(audio) / 2 / 24000 == pytest.approx(33 * SECONDS_PER_CHAR, abs=0.2)
    assert not [m for m in received if "error" in m]
