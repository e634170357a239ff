"""Credentials before bodies: a request to a route that needs a caller is authenticated from its head.

Litestar reads a request's body before it resolves the handler's dependencies, so a POST with a bad key and a body
that never came held its connection until ``server.body_timeout_s`` and then got a 408, never a 401: forty such
sockets from one address took a 50-connection gateway's every slot, without a credential. This middleware runs once
the route is known and before the body is read: it authenticates a request whose handler takes ``principal`` from
its ``Authorization`` header and keeps the principal for the handler (``provide_principal``); a missing or bad
credential is a 401 at once (a 429 from an address throttled for refused credentials,
``gateway/http/auth/credential_throttle.py``), with ``Connection: close`` when a body was announced, so the
connection is freed instead of waiting for a body nobody will read. Once the caller is known, its body counts among
its tenant's bodies in flight (``TenantLimits.bodies_in_flight``) until its last byte has arrived, and among what it
holds of a crowded replica (``auth.limits.HeldConnections``): one tenant cannot hold every connection with slow
bodies (429 with ``Retry-After`` before the body is read).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from litestar import Request
from litestar.enums import ScopeType

from auth.errors import InvalidCredentialsError, UnknownTenantError
from auth.limits import RateLimitExceededError
from gateway.http.auth.security import PRINCIPAL_KEY, authenticate_request
from gateway.http.errors import OpenAIError, as_openai_error
from gateway.state import gateway_state

if TYPE_CHECKING:
    from litestar.types import ASGIApp, Receive, ReceiveMessage, Scope, Send

    from auth import Tenant

__all__ = ["credentials_before_body_middleware"]

_REFUSED = (InvalidCredentialsError, UnknownTenantError, OpenAIError)  # an OpenAIError: the throttle's 429


def credentials_before_body_middleware(app: ASGIApp) -> ASGIApp:
    """Litestar middleware: authenticate from the head every request whose handler takes ``principal``."""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == ScopeType.HTTP and _takes_principal(scope.get("route_handler")):
            request: Request[Any, Any, Any] = Request(scope, receive)
            try:
                principal = await authenticate_request(request)
            except _REFUSED as exc:
                error = as_openai_error(exc)
                if _announces_body(scope):
                    error.headers["connection"] = "close"  # the body is not read: the connection cannot go on
                raise error from None
            scope.setdefault("state", {})[PRINCIPAL_KEY] = principal
            if _announces_body(scope):
                await _with_body_counted(app, scope, receive, send, principal.tenant)
                return
        await app(scope, receive, send)

    return middleware


async def _with_body_counted(app: ASGIApp, scope: Scope, receive: Receive, send: Send, tenant: Tenant) -> None:
    """Run the request with its body counted among what the tenant holds of this replica until its last byte has
    arrived (or the request ends without it): a slow body holds a connection, a response being streamed does not.

    Raises:
        RateLimitExceededError: the tenant has ``bodies_in_flight`` bodies arriving on this replica, or holds its fair
            share of a crowded replica (429).
    """
    state = gateway_state(scope["litestar_app"])
    try:
        release = state.held.take(tenant.name, "bodies", tenant.limits.bodies_in_flight)
    except RateLimitExceededError as exc:
        state.speech.admission.record_rejection(tenant, exc.reason)
        raise

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
    """Whether the route's handler takes the caller (every ``/v1`` handler does; its signature is parsed once)."""
    return handler is not None and "principal" in handler.parsed_fn_signature.parameters


def _announces_body(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if (name == b"content-length" and value.strip() != b"0") or name == b"transfer-encoding":
            return True
    return False
