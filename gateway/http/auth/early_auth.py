"""Credentials before bodies: a request to a route that needs a caller is authenticated from its head.

Litestar reads a request's body before it resolves the handler's dependencies, so a POST with a bad key and a body
that never came held its connection until ``server.body_timeout_s`` and then got a 408, never a 401: forty such
sockets from one address took a 50-connection gateway's every slot, without a credential. This middleware runs once
the route is known and before the body is read: it authenticates a request whose handler takes ``principal`` from
its ``Authorization`` (or ElevenLabs' ``xi-api-key``) header and keeps the principal for the handler
(``provide_principal``); a missing or bad credential is a 401 at once (a 429 from an address throttled for refused
credentials, ``gateway/http/auth/credential_throttle.py``), with ``Connection: close`` when a body was announced
(:class:`~gateway.http.refusals.RefusedBeforeBodyError`), so the connection is freed instead of waiting for a body
nobody will read. Once the caller is known, its body must keep
arriving at its tenant's minimum rate (``TenantLimits.body_min_rate_bytes_per_s``, when set), and counts among its
tenant's bodies in flight (``TenantLimits.bodies_in_flight``) until its last byte has reached the server, and among
what it holds of a crowded replica (``auth.limits.HeldConnections``): one tenant cannot hold every connection with
slow bodies (429 with ``Retry-After`` before the body is read).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

from litestar import Request
from litestar.enums import ScopeType

from auth.errors import InvalidCredentialsError, UnknownTenantError
from auth.limits import RateLimitExceededError
from gateway.http.arriving_body import arriving_body
from gateway.http.auth.security import PRINCIPAL_KEY, authenticate_request
from gateway.http.refusals import AddressThrottledError, RefusedBeforeBodyError
from gateway.state import gateway_state

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from litestar.di import Provide
    from litestar.types import ASGIApp, Receive, ReceiveMessage, Scope, Send

    from auth import Tenant
    from gateway.http.arriving_body import ArrivingBody

__all__ = ["credentials_before_body_middleware"]

_REFUSED = (InvalidCredentialsError, UnknownTenantError, AddressThrottledError)


def credentials_before_body_middleware(app: ASGIApp) -> ASGIApp:
    """Litestar middleware: authenticate from the head every request whose handler takes ``principal``."""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == ScopeType.HTTP and _takes_principal(scope.get("route_handler")):
            request: Request[Any, Any, Any] = Request(scope, receive)
            try:
                principal = await authenticate_request(request)
            except _REFUSED as exc:
                if _announces_body(scope):  # the body is not read: the connection cannot go on
                    raise RefusedBeforeBodyError(exc) from None
                raise
            scope.setdefault("state", {})[PRINCIPAL_KEY] = principal
            if _announces_body(scope):
                await _with_body_counted(app, scope, receive, send, principal.tenant)
                return
        await app(scope, receive, send)

    return middleware


async def _with_body_counted(app: ASGIApp, scope: Scope, receive: Receive, send: Send, tenant: Tenant) -> None:
    """Run the request with its body counted among what the tenant holds of this replica until its last byte has
    reached the server (or the request ends without it): a slow body holds a connection, a body that has arrived or a
    response being streamed does not.

    The end is the server's to tell, not the application's reading: under a load that keeps the loop busy, a handler
    reads a small body many turns of the loop after its bytes came. So where the protocol says how the body arrives
    (:class:`~gateway.http.arriving_body.ArrivingBody`), a body already in when the caller is known is not counted at
    all, one still arriving stops counting from the protocol's own callback that parses its last byte, and one over
    the tenant's places waits ``limits.body_wait_s`` for its own bytes before it is refused (:func:`_take_place`).
    The tenant's minimum rate, if it has one, holds for the rest of the body. Under another server (the test client)
    the count ends when the application reads the last chunk.

    Raises:
        RateLimitExceededError: the tenant has ``bodies_in_flight`` bodies arriving on this replica, or holds its fair
            share of a crowded replica (429).
    """
    body = arriving_body(scope)
    if body is None:
        release = _take(scope, tenant)
        await _with_reading_counted(app, scope, receive, send, release)
        return
    if tenant.limits.body_min_rate_bytes_per_s is not None:
        body.min_rate_bytes_per_s = tenant.limits.body_min_rate_bytes_per_s
    place = None if body.ended else await _take_place(scope, tenant, body)
    if place is None:
        await app(scope, receive, send)  # it came with its head, or before its turn: it holds nothing
        return
    body.when_ended(place)  # from the protocol's callback that parses the last byte (or sees the client leave)
    try:
        await app(scope, receive, send)
    finally:
        place()


async def _take_place(scope: Scope, tenant: Tenant, body: ArrivingBody) -> Callable[[], None] | None:
    """A place among what the tenant holds, for a body still arriving; ``None`` when the body arrived whole while
    the tenant had none free (it needs none).

    A client whose own loop is busy writes its body a moment after its head: a request over the tenant's places waits
    up to ``limits.body_wait_s`` for its body before the 429 (and takes a place freed meanwhile if its body is still
    on its way), where a slow body's extra request is refused after that wait.
    """
    state = gateway_state(scope["litestar_app"])
    try:
        return state.held.take(tenant.name, "bodies", tenant.limits.bodies_in_flight)
    except RateLimitExceededError:
        wait_s = state.settings.limits.body_wait_s
        if wait_s <= 0 or not await _arrives_within(body, wait_s):
            return _take(scope, tenant)
        return None


async def _arrives_within(body: ArrivingBody, timeout_s: float) -> bool:
    """Whether ``body`` ends (arrives whole, or the client leaves) within ``timeout_s``."""
    ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def arrived() -> None:
        if not ended.done():
            ended.set_result(None)

    body.when_ended(arrived)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(ended, timeout_s)
    return body.ended


def _take(scope: Scope, tenant: Tenant) -> Callable[[], None]:
    """A place among what the tenant holds of this replica, or the refusal, counted as the tenant's.

    Raises:
        RateLimitExceededError: as :func:`_with_body_counted`.
    """
    state = gateway_state(scope["litestar_app"])
    try:
        return state.held.take(tenant.name, "bodies", tenant.limits.bodies_in_flight)
    except RateLimitExceededError as exc:
        state.admission.record_rejection(tenant, exc.reason)
        raise


async def _with_reading_counted(
    app: ASGIApp, scope: Scope, receive: Receive, send: Send, release: Callable[[], None]
) -> None:
    """Without the protocol's word: ``release`` when the application reads the body's last chunk (or the request
    ends)."""

    async def counted_receive() -> ReceiveMessage:
        message = await receive()
        if message["type"] != "http.request" or not message.get("more_body", False):
            release()  # the whole body is in, or the client left
        return message

    try:
        await app(scope, counted_receive, send)
    finally:
        release()


def _takes_principal(handler: Any) -> bool:
    """Whether the route's handler takes the caller, itself or through a dependency it takes (every ``/v1`` handler
    does: ElevenLabs' speech routes through the one dependency that speaks them); signatures are parsed once."""
    if handler is None:
        return False
    provided = handler.resolve_dependencies()
    return _wants_principal(handler.parsed_fn_signature.parameters, provided, set())


def _wants_principal(parameters: Mapping[str, Any], provided: Mapping[str, Provide], seen: set[str]) -> bool:
    if "principal" in parameters:
        return True
    for name in parameters.keys() & provided.keys() - seen:
        seen.add(name)
        if _wants_principal(provided[name].parsed_fn_signature.parameters, provided, seen):
            return True
    return False


def _announces_body(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if (name == b"content-length" and value.strip() != b"0") or name == b"transfer-encoding":
            return True
    return False
