"""Responses that release what their body came from on every ending.

Litestar runs a response's ``background`` task only after the body went out whole: a body iterator that raises (an
engine worker killed mid-stream) ends the ASGI call with that exception, and the task never runs. A speech reply
released there kept its tenant's stream lease held and its usage unrecorded after every truncated stream (issue #47).

These responses wrap the ASGI response Litestar makes of them in one ``try``/``finally``, the path every ending takes:
the body sent whole, the client gone (its disconnect cancels the streaming body's task group, which then returns),
an exception mid-body, the request's own task cancelled. ``release`` is their one owner's release: nothing else
calls it (a finalizer may, as a logged safety net).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

from litestar import Response
from litestar.response import ServerSentEvent, Stream
from litestar.response.base import ASGIResponse

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from litestar.types import Receive, Scope, Send

__all__ = ["Release", "ReleasedResponse", "ReleasedServerSentEvent", "ReleasedStream"]

Release: TypeAlias = "Callable[[], Awaitable[None]]"
"""What a response awaits once it has ended."""


class _ReleasedAfter(ASGIResponse):
    """``response`` sent, then ``release`` awaited however the sending ended."""

    __slots__ = ("_release", "_response")

    def __init__(self, response: ASGIResponse, release: Release) -> None:
        super().__init__()  # sends nothing of its own: the wrapped response sends it all
        self._response = response
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self._response(scope, receive, send)
        finally:
            await self._release()


class _Releasing(Response[Any]):
    """A Litestar response whose ASGI response awaits ``release`` on every ending."""

    def __init__(self, content: Any, *, release: Release, **options: Any) -> None:
        super().__init__(content, **options)
        self.release = release

    def to_asgi_response(self, *args: Any, **kwargs: Any) -> ASGIResponse:
        return _ReleasedAfter(super().to_asgi_response(*args, **kwargs), self.release)


class ReleasedResponse(_Releasing):
    """A whole body (a cache hit's audio), then ``release``."""


class ReleasedStream(_Releasing, Stream):
    """A streamed body, then ``release``, however the stream ended."""


class ReleasedServerSentEvent(_Releasing, ServerSentEvent):
    """Server-sent events, then ``release``, however the stream ended."""
