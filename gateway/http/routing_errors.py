"""The app's own 404 and 405, answered in the words of the API family whose routes the path falls under.

Litestar answers a request its routing refuses (no route for the path, or not that method) with the app's exception
handlers, whatever the path: OpenAI's table here. So an ElevenLabs client that sends ``DELETE
/v1/text-to-speech/{voice_id}`` or ``GET /v1/voices/{voice_id}/nothing`` would hear OpenAI's ``{"error": ...}``. The
family is the route's instead: the handler of the path itself for another method (a 405), else of its nearest routed
ancestor (a 404 under a route's path), answers it from its own table, with the status and ``Allow`` the routing gave;
a path under no route is answered by ``unrouted``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from litestar.exceptions import HTTPException, MethodNotAllowedException, NotFoundException
from litestar.utils import normalize_path

if TYPE_CHECKING:
    from collections.abc import Iterator

    from litestar import Litestar, Request, Response
    from litestar.handlers import BaseRouteHandler
    from litestar.types import ExceptionHandler, ExceptionHandlersMap, Method

__all__ = ["ROUTING_ERRORS", "handler_near", "routed_handler", "routing_errors"]

ROUTING_ERRORS: tuple[type[HTTPException], ...] = (NotFoundException, MethodNotAllowedException)
"""What the routing raises. Every family's table has an entry for each (or its handlers would be this module's on
its routes: an app's entry is more specific than a family's ``HTTPException``)."""


def routed_handler(app: Litestar, method: str | None, path: str) -> BaseRouteHandler | None:
    """The handler the app routes ``method`` on ``path`` to (``None``: a WebSocket's handshake), if any."""
    try:
        _, handler, *_ = app.asgi_router.handle_routing(path=normalize_path(path), method=cast("Method", method))
    except HTTPException:  # not found, or not that method here
        return None
    return cast("BaseRouteHandler", handler)


def handler_near(app: Litestar, path: str) -> BaseRouteHandler | None:
    """A handler of the routes ``path`` is on, for any method (what a 405 names), else of its nearest routed ancestor
    (a 404 under a route, such as ``/v1/voices/{voice_id}/nothing``); ``None`` under no route but the root's."""
    for candidate in _path_and_ancestors(normalize_path(path)):
        if (handler := _any_method(app, candidate)) is not None:
            return handler
    return None


_DEEPEST_ROUTE_SEGMENTS = 16
"""More segments than any route here has (the deepest have 5): a deeper path's ancestors past it are no route's. Each
ancestor is one routing lookup that reads the whole path, so walking all of a 16 KiB head's 8,000 segments took the
event loop about 0.6 s per request; past this bound they are not walked."""


def _path_and_ancestors(path: str) -> Iterator[str]:
    """``/a/b/c``, ``/a/b``, ``/a`` (from the first :data:`_DEEPEST_ROUTE_SEGMENTS` segments): the root is no family's
    (``/`` may serve a page of the app's own)."""
    segments = path.strip("/").split("/", _DEEPEST_ROUTE_SEGMENTS)[:_DEEPEST_ROUTE_SEGMENTS]
    for count in range(len(segments) if segments != [""] else 0, 0, -1):
        yield "/" + "/".join(segments[:count])


def _any_method(app: Litestar, path: str) -> BaseRouteHandler | None:
    try:
        _, handler, *_ = app.asgi_router.handle_routing(path=path, method="GET")
    except MethodNotAllowedException as refused:  # routed, for the methods it allows ("websocket": a socket's)
        allowed = [name.strip() for name in str((refused.headers or {}).get("allow", "")).split(",")]
        method = next((name for name in allowed if name != "OPTIONS"), "OPTIONS")
        return routed_handler(app, None if method == "websocket" else method, path)
    except HTTPException:
        return None
    return cast("BaseRouteHandler", handler)


def routing_errors(handlers: ExceptionHandlersMap, unrouted: ExceptionHandler[Exception]) -> ExceptionHandlersMap:
    """``handlers`` (the app's), with the routing's errors answered by the family of the route the path is on or under
    (:func:`handler_near`), and by ``unrouted`` under none. Raised by a route that takes the app's handlers (one of its
    own, say), they are answered as ``handlers`` answer them."""

    def answer(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
        own = _lookup(handlers, exc)
        if "route_handler" in request.scope:  # a route ran: not the routing's error
            return own(request, exc)
        if (near := handler_near(request.app, _routed_path(request))) is None:
            return unrouted(request, exc)
        family = _lookup(near.resolve_exception_handlers(), exc)
        return own(request, exc) if family is answer else family(request, exc)

    return {**handlers, **dict.fromkeys(ROUTING_ERRORS, answer)}


def _routed_path(request: Request[Any, Any, Any]) -> str:
    """The path as the app routes it: without the ``root_path`` it is mounted under."""
    path: str = request.scope["path"]
    root_path = request.scope.get("root_path", "")
    return path.split(root_path, maxsplit=1)[-1] if root_path else path


def _lookup(handlers: ExceptionHandlersMap, exc: Exception) -> ExceptionHandler[Exception]:
    """The entry for ``exc``'s most specific class (every table here has one for ``Exception``)."""
    return next(handlers[cls] for cls in type(exc).__mro__ if cls in handlers)
