"""What the HTTP protocol knows of a request's body as it arrives, shared with the application through the scope.

The application reads a body when it gets round to it; the server has it as soon as its bytes are parsed. Under a
load that keeps the event loop busy the two are far apart: a small JSON body that came with its head can wait for a
turn of the loop long after it arrived. What is held "while a body arrives" (``TenantLimits.bodies_in_flight``,
``gateway/http/auth/early_auth.py``) must end when the last byte reaches the server, so the protocol
(``gateway/http/connection_limits.py``) puts an :class:`ArrivingBody` in each request's scope and says when the body is
in, or will never come (the client left, the body was cut), from its own parser callbacks: no turn of the loop, no
application code in between. The application, once it knows the caller, may set the body's minimum rate for that
caller (a tenant's ``body_min_rate_bytes_per_s``): the protocol checks each interval against the rate in force when
the interval ends.

A server without the guarded protocol (the test client, uvicorn's own protocols) puts none in the scope:
:func:`arriving_body` returns ``None`` and the application falls back to what it reads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, MutableMapping

__all__ = ["ArrivingBody", "arriving_body"]

_EXTENSION = "chattts_gateway.arriving_body"
"""Its key in the scope's ``extensions`` (ASGI's place for what a server offers beyond the specification)."""


class ArrivingBody:
    """One request's body as the server receives it (see the module docstring)."""

    __slots__ = ("_callbacks", "_ended", "min_rate_bytes_per_s")

    def __init__(self, min_rate_bytes_per_s: int) -> None:
        self._ended = False
        self._callbacks: list[Callable[[], object]] = []
        self.min_rate_bytes_per_s = min_rate_bytes_per_s
        """The least rate the body must keep arriving at (the server's until the application sets its caller's)."""

    @property
    def ended(self) -> bool:
        """Whether the server has the whole body, or will get no more of it (the client left, or it was cut)."""
        return self._ended

    def when_ended(self, callback: Callable[[], object]) -> None:
        """Call ``callback`` once the body has ended: at once if it has, else from the protocol's callback that ends
        it."""
        if self._ended:
            callback()
        else:
            self._callbacks.append(callback)

    def end(self) -> None:
        """The protocol's: nothing more of the body will arrive (idempotent)."""
        if self._ended:
            return
        self._ended = True
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def attach(self, scope: MutableMapping[str, Any]) -> None:
        """Put it in a request's scope, for :func:`arriving_body`."""
        scope.setdefault("extensions", {})[_EXTENSION] = self


def arriving_body(scope: Mapping[str, object]) -> ArrivingBody | None:
    """The request's :class:`ArrivingBody`, or ``None`` when the server does not say how its body arrives."""
    extensions = scope.get("extensions")
    found = extensions.get(_EXTENSION) if isinstance(extensions, dict) else None
    return found if isinstance(found, ArrivingBody) else None
