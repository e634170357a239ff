"""A session's share of its tenant's concurrent streams (``concurrent_streams``), the same in every dialect.

A session was admitted holding one of the tenant's streams, but its lanes (``lanes.py``: one a context on ElevenLabs'
sockets, one a response on OpenAI's) speak side by side: 5 contexts of one socket were 5 syntheses on one stream, and
16 sockets of a tenant limited to 16 streams filled an engine's queue for every other tenant. So every segment holds a
stream while it is spoken (:class:`SessionStreams`): the session's own lease covers one lane; each further lane
speaking at the same moment takes one of the tenant's, and waits its turn until one frees.
"""

from __future__ import annotations

import asyncio
from collections import deque
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING

from auth.limits import RateLimitExceededError

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable
    from contextlib import AbstractAsyncContextManager

__all__ = ["SessionStreams"]

_RETRY_S = 0.1
"""How often a waiting segment asks again for one of the tenant's streams (a stream another session frees); one
storage round trip each. The session's own stream is handed over at once."""


class SessionStreams:
    """What each segment of a session holds while it is spoken (:meth:`segment`): the session's own stream, else one
    more of the tenant's (``more``, the limiter's stream lease).

    A segment that finds none free waits its turn: segments waiting for the session's own stream get it in the order
    they asked, and each asks meanwhile for one of the tenant's. The wait always ends, as the session's own stream is
    freed by the segment that holds it; what waits meanwhile is bounded by the session's caps on text held.
    """

    def __init__(self, more: Callable[[], AbstractAsyncContextManager[None]] | None) -> None:
        """``more``: one more of the tenant's streams; ``None``: the tenant has no ``concurrent_streams``, and its
        segments hold nothing."""
        self._more = more
        self._own_free = True
        self._turns: deque[asyncio.Future[None]] = deque()

    def segment(self) -> AbstractAsyncContextManager[None] | None:
        """What one segment holds from before its admission until its reply is released (``None``: nothing)."""
        return None if self._more is None else self._held(self._more)

    @asynccontextmanager
    async def _held(self, more: Callable[[], AbstractAsyncContextManager[None]]) -> AsyncIterator[None]:
        async with AsyncExitStack() as held:
            await self._take(held, more)
            yield

    async def _take(self, held: AsyncExitStack, more: Callable[[], AbstractAsyncContextManager[None]]) -> None:
        """Take the session's own stream or one more of the tenant's, released when ``held`` closes."""
        if self._own_free:  # then nobody waits: a freed stream is handed to the first segment waiting
            self._own_free = False
            held.callback(self._pass_own)
            return
        turn = asyncio.get_running_loop().create_future()
        self._turns.append(turn)
        got_own = False
        try:
            while not turn.done():
                if await self._tenant_stream(held, more):
                    return
                await asyncio.wait({turn}, timeout=_RETRY_S)
            got_own = True
            held.callback(self._pass_own)
        finally:
            if not got_own and not turn.cancel():  # handed the session's stream, but another was taken, or cancelled
                self._pass_own()

    @staticmethod
    async def _tenant_stream(held: AsyncExitStack, more: Callable[[], AbstractAsyncContextManager[None]]) -> bool:
        """Whether one more of the tenant's streams was taken (within the limiter's ``stream_wait_s``).

        Raises:
            RateLimitExceededError: refused by another of the tenant's limits (a spent monthly budget).
            LimitsUnavailableError: the limits' storage is unreachable and they fail closed.
        """
        try:
            await held.enter_async_context(more())
        except RateLimitExceededError as exc:
            if exc.reason != "concurrency":
                raise
            return False
        return True

    def _pass_own(self) -> None:
        """Hand the session's own stream to the first segment still waiting, else free it."""
        while self._turns:
            turn = self._turns.popleft()
            if not turn.done():
                turn.set_result(None)
                return
        self._own_free = True
