"""Shutdown that drains realtime sessions: ``uvicorn.run`` with one hook.

On SIGTERM uvicorn closes every WebSocket with 1012 the moment its shutdown begins (its protocol's ``shutdown()``),
while HTTP responses run on through the grace period. Realtime sessions are drained first instead: they take no
more text, finish the segment they are speaking (with its ``audio.done``) and close with 1012 themselves
(``gateway/sessions/registry.py``), all within ``server.shutdown_grace_s``; uvicorn's own shutdown follows, with
what is left of the grace period.
"""

from __future__ import annotations

import math
import sys
import time
from typing import TYPE_CHECKING, Any

import uvicorn

from gateway.sessions.registry import drain_realtime_sessions

if TYPE_CHECKING:
    import socket

    from litestar import Litestar

__all__ = ["DrainingServer", "run_draining_realtime"]

_STARTUP_FAILURE = 3  # uvicorn's exit status when the server could not start


class DrainingServer(uvicorn.Server):
    """A uvicorn server that drains the app's realtime sessions before shutting down."""

    def __init__(self, config: uvicorn.Config, app: Litestar) -> None:
        super().__init__(config)
        self._app = app

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()  # no new connections while sessions drain (uvicorn closes them again: harmless)
        started = time.monotonic()
        await drain_realtime_sessions(self._app)
        if self.config.timeout_graceful_shutdown is not None:  # one grace period in all, not one each
            left = self.config.timeout_graceful_shutdown - (time.monotonic() - started)
            self.config.timeout_graceful_shutdown = max(0, math.ceil(left))
        await super().shutdown(sockets)


def run_draining_realtime(app: Litestar, **config: Any) -> None:
    """``uvicorn.run(app, **config)`` with a :class:`DrainingServer` (no reload, one worker)."""
    server = DrainingServer(uvicorn.Config(app, **config), app)
    server.run()
    if not server.started:
        sys.exit(_STARTUP_FAILURE)
