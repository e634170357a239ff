"""An alias's fallback on the realtime WebSocket, on a real gateway process: a session whose alias has no fallback
gets its first engine's ``engine_not_ready`` for each segment, never another engine's voice; one whose alias falls
back is spoken by the next engine, each segment counted in ``tts_alias_fallbacks_total`` and the change logged once.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import ClientConnection, connect

from harness.gateway_process import GatewayProcess

if TYPE_CHECKING:
    from collections.abc import Iterator

CONFIG: dict[str, Any] = {
    "engines": {
        "primary": {"kind": "synthetic", "workers": 1, "options": {"unavailable": "no weights here"}},
        "backup": {"kind": "synthetic", "workers": 1, "options": {"seconds_per_char": 0.01}},
    },
    "aliases": {
        "strict": {"engines": ["primary", "backup"], "fallback": False},
        "lenient": ["primary", "backup"],
    },
}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with GatewayProcess(CONFIG, tmp_path_factory.mktemp("fallback")) as process:
        yield process


async def session_events(gateway: GatewayProcess, model: str, *sentences: str) -> list[dict[str, Any]]:
    """Every event of a session on ``model`` that speaks ``sentences`` and closes."""
    url = gateway.base_url.replace("http://", "ws://") + "/v1/audio/speech/stream"
    events: list[dict[str, Any]] = []
    async with connect(url) as socket:
        await _send(socket, type="session.update", session={"model": model})
        for sentence in sentences:
            await _send(socket, type="input.append", text=sentence)
        await _send(socket, type="session.close")
        async for message in socket:
            events.append(json.loads(message))
    return events


async def _send(socket: ClientConnection, **event: Any) -> None:
    await socket.send(json.dumps(event))


def fallbacks(gateway: GatewayProcess) -> dict[tuple[str, str], float]:
    text = httpx.get(f"{gateway.base_url}/metrics", timeout=5).text
    return {
        (sample.labels["alias"], sample.labels["engine"]): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "tts_alias_fallbacks_total"
    }


async def test_a_session_on_an_alias_without_fallback_is_refused_per_segment(gateway: GatewayProcess) -> None:
    events = await session_events(gateway, "strict", "Hello there. ", "And again.")
    assert not [e for e in events if e["type"] == "audio.delta" and e["segment_id"] is not None]
    errors = [e["error"]["code"] for e in events if e["type"] == "error"]
    assert errors == ["engine_not_ready", "engine_not_ready"]
    assert [e["status"] for e in events if e["type"] == "audio.done"] == ["failed", "failed"]
    assert ("strict", "backup") not in fallbacks(gateway)


async def test_a_session_on_an_alias_with_fallback_is_spoken_by_the_next_engine(gateway: GatewayProcess) -> None:
    events = await session_events(gateway, "lenient", "Hello there. ", "And again.")
    assert [e["status"] for e in events if e["type"] == "audio.done"] == ["completed", "completed"]
    assert any(e["type"] == "audio.delta" for e in events)
    assert fallbacks(gateway)[("lenient", "backup")] == 2.0  # each segment is an answer
    assert gateway.log().count("alias lenient falls back to engine backup") == 1
