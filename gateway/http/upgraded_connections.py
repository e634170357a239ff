"""The per-address count of a connection that became a WebSocket: uvicorn hands an upgraded connection to another
protocol object, which takes over the count the HTTP protocol took for its address and gives it back when its
connection is lost (:mod:`gateway.http.connection_limits`)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections import Counter
    from collections.abc import Callable

__all__ = ["ReleasesAddressOnClose", "peer_address", "release_address", "releasing_address_on_close"]


def release_address(per_address: Counter[str], key: str) -> None:
    per_address[key] -= 1
    if per_address[key] <= 0:
        del per_address[key]


class ReleasesAddressOnClose(asyncio.Protocol):
    """Mixed into the WebSocket protocol: once its connection is lost, the address's count it took over goes."""

    release_address: Callable[[], None] | None = None

    def connection_lost(self, exc: Exception | None) -> None:
        try:
            super().connection_lost(exc)
        finally:
            if (release := self.release_address) is not None:
                self.release_address = None
                release()


_RELEASING_CLASSES: dict[type[asyncio.Protocol], type[asyncio.Protocol]] = {}


def releasing_address_on_close(websocket_protocol: type[asyncio.Protocol]) -> type[asyncio.Protocol]:
    """uvicorn's WebSocket protocol class with :class:`ReleasesAddressOnClose` mixed in (made once)."""
    if (mixed := _RELEASING_CLASSES.get(websocket_protocol)) is None:
        mixed = type(websocket_protocol.__name__, (ReleasesAddressOnClose, websocket_protocol), {})
        _RELEASING_CLASSES[websocket_protocol] = mixed
    return mixed


def peer_address(transport: asyncio.Transport) -> str | None:
    peer = transport.get_extra_info("peername")
    return peer[0] if isinstance(peer, tuple) and peer else None
