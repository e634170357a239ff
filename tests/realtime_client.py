"""A client's view of the realtime WebSocket (``/v1/audio/speech/stream``): one session's events, and the server's
count of open sessions."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx
from websockets.exceptions import ConnectionClosed

if TYPE_CHECKING:
    from websockets.asyncio.client import ClientConnection

    from harness.gateway_process import GatewayProcess

__all__ = ["Session", "open_connections"]


@dataclass
class Session:
    """A client's view of one session: every event received, with its arrival time."""

    socket: ClientConnection
    events: list[tuple[float, dict[str, Any]]] = field(default_factory=list)

    async def send(self, **event: Any) -> float:
        await self.socket.send(json.dumps(event))
        return time.perf_counter()

    async def next(self, kind: str, timeout_s: float = 10.0) -> dict[str, Any]:
        """The next event of type ``kind``, collecting the ones before it."""
        async with asyncio.timeout(timeout_s):
            while True:
                event = json.loads(await self.socket.recv())
                self.events.append((time.perf_counter(), event))
                if event["type"] == kind:
                    return dict(event)

    async def until_closed(self, timeout_s: float = 20.0) -> None:
        async with asyncio.timeout(timeout_s):
            try:
                while True:
                    self.events.append((time.perf_counter(), json.loads(await self.socket.recv())))
            except ConnectionClosed:
                return

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [event for _, event in self.events if event["type"] == kind]

    def audio(self) -> bytes:
        return b"".join(base64.b64decode(event["audio"]) for event in self.of("audio.delta"))


def open_connections(gateway: GatewayProcess) -> float:
    metrics = httpx.get(f"{gateway.base_url}/metrics", timeout=5).text
    line = next(line for line in metrics.splitlines() if line.startswith("tts_realtime_connections "))
    return float(line.split()[1])
