"""How the server ends a realtime session, the same on every protocol (the gateway's own, OpenAI's Realtime,
ElevenLabs' WebSockets): a revoked key or deleted tenant ends it at once; a shutdown drains it, letting what is being
spoken finish, until its grace period is over. The registry (``gateway/sessions/registry.py``) calls these."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from gateway.sessions.session_errors import SessionDrainedError, SessionRevokedError

if TYPE_CHECKING:
    from gateway.sessions.session_errors import SessionError

__all__ = ["EndedByServer"]


class EndedByServer:
    """The server's side of a session's end: a future resolved with the reason (an exception the session's serving
    raises, which ``gateway/sessions/serving.py`` turns into a close code). Construct it on the running loop."""

    def __init__(self) -> None:
        self._draining = False
        self._ended_by: asyncio.Future[BaseException] = asyncio.get_running_loop().create_future()

    def revoke(self, error: SessionError) -> None:
        """End the session at once: its key was revoked or its tenant deleted."""
        self._end(SessionRevokedError(error))

    def begin_drain(self) -> None:
        """Shutdown: take nothing new; what is being spoken finishes, then the session ends."""
        self._draining = True
        if not self._busy():
            self._end(SessionDrainedError())

    def stop_draining(self) -> None:
        """The shutdown's grace period is over: end now, mid-speech if need be."""
        self._end(SessionDrainedError())

    def _busy(self) -> bool:
        """Whether something is being spoken or waits to be (a drain lets it finish); the session ends its drain
        itself when it is done."""
        raise NotImplementedError

    def _lane_ended(self, task: asyncio.Task[None]) -> None:
        """A done-callback for a lane's task (a response, a context): one that raised ends the session with it (a
        client too slow or gone, or a bug, with its traceback)."""
        if not task.cancelled() and (exc := task.exception()) is not None:
            self._end(exc)

    def _end(self, reason: BaseException) -> None:
        if not self._ended_by.done():
            self._ended_by.set_result(reason)

    async def _until_ended(self, *tasks: asyncio.Task[None]) -> None:
        """Wait until one of the session's ``tasks`` ends (raising what it raised) or the server ends the session
        (raising its reason)."""
        watched: set[asyncio.Future[Any]] = {*tasks, self._ended_by}
        done, _ = await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
        if self._ended_by in done:
            raise self._ended_by.result()
        for task in done:
            task.result()
