"""An engine node's door: every request needs the service token, except the probes, before any route runs.

An engine node (``server.profile: engine``) is called by its front gateways only. Its speech route already checked
the token, but ``/metrics``, ``/docs``, the OpenAPI document and the WebSocket upgrade answered anyone, and the probes
showed worker pids. This middleware refuses every request without ``Authorization: Bearer <service token>`` from its
head, before a body is read or a WebSocket accepted (a 401 with OpenAI's body; a WebSocket is refused before the
handshake completes); the token is never taken from a URL. ``/healthz`` and ``/readyz`` stay open for the
orchestrator's probes, and ``/readyz`` then tells only what a probe needs (:func:`presents_service_token`).

Past the door, the node's authenticator (:class:`ServiceTokenAuthenticator`) admits the same token, and then the tenant
its front gateway serves with the request.
"""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING

from litestar.datastructures import Headers
from litestar.enums import ScopeType
from litestar.status_codes import HTTP_403_FORBIDDEN

from auth import Authenticator, AuthStore, Principal
from auth.errors import InvalidCredentialsError
from auth.settings import TenantLimits, TenantScheduling
from auth.tenants import Tenant
from engines.remote.context import read_context
from gateway.observability.refusals import count_refusal, counted

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from litestar.types import ASGIApp, Receive, Scope, Send

    from engines.remote.context import TenantContext

__all__ = [
    "PROBE_PATHS",
    "SERVICE_PRINCIPAL",
    "ServiceTokenAuthenticator",
    "is_bearer",
    "presents_service_token",
    "service_token_middleware",
]

PROBE_PATHS = frozenset({"/healthz", "/readyz"})
"""What an orchestrator asks without credentials: open on engine nodes too."""
_WRONG_SERVICE_CREDENTIAL = "Invalid service token: this is an engine node, called by a gateway."


def presents_service_token(headers: Mapping[str, str], token: str) -> bool:
    """Whether ``headers`` carry ``Authorization: Bearer <token>``."""
    return is_bearer(headers.get("authorization"), token)


def is_bearer(authorization: str | None, token: str) -> bool:
    """Whether an ``Authorization`` value is ``Bearer <token>`` (compared in constant time): the one check of the
    service token, for this door and the node's authenticator alike."""
    scheme, _, presented = (authorization or "").strip().partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(presented.strip().encode(), token.encode())


def service_token_middleware(token: str) -> Callable[[ASGIApp], ASGIApp]:
    """The middleware of an engine node whose service token is ``token``."""

    def middleware(app: ASGIApp) -> ASGIApp:
        async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
            if _open_to_all(scope) or presents_service_token(Headers.from_scope(scope), token):
                await app(scope, receive, send)
                return
            if scope["type"] == ScopeType.WEBSOCKET:  # closed before it is accepted: the upgrade gets a 403
                count_refusal("service_token", HTTP_403_FORBIDDEN, "invalid_api_key")
                await send({"type": "websocket.close", "code": 1008, "reason": "service token required"})
                return
            raise counted("service_token", InvalidCredentialsError(_WRONG_SERVICE_CREDENTIAL))

        return guarded

    return middleware


def _open_to_all(scope: Scope) -> bool:
    return scope["type"] not in {ScopeType.HTTP, ScopeType.WEBSOCKET} or scope["path"] in PROBE_PATHS


SERVICE_PRINCIPAL = Principal(Tenant(name="service", limits=TenantLimits.unlimited(), models=None), "service")
"""Who a request to an engine node is when its front gateway names no tenant (a front of an older version): one
principal without limits, with the default share."""


class ServiceTokenAuthenticator(Authenticator):
    """An engine node's authenticator (``server.profile: engine``): the service token, and nothing else, admits."""

    def __init__(self, store: AuthStore, service_token: str) -> None:
        super().__init__(store, None, open_mode=False)
        self._token = service_token

    async def authenticate(self, authorization: str | None) -> Principal:
        if not is_bearer(authorization, self._token):
            raise InvalidCredentialsError(_WRONG_SERVICE_CREDENTIAL)
        return SERVICE_PRINCIPAL

    async def authenticate_front(self, authorization: str | None, headers: Mapping[str, str]) -> Principal:
        """The service token's check, then the tenant the front gateway serves with this request: the tenant of its
        context headers with that tenant's share (``engines/remote/context.py``), or :data:`SERVICE_PRINCIPAL`
        when it sends none. The context is read here only, once the token has admitted the caller: nobody else can
        speak for a tenant, and a front gateway never reads it (its authenticator is another).

        Raises:
            InvalidCredentialsError: not the service token (401).
            InvalidTenantContextError: a malformed context header (400).
        """
        service = await self.authenticate(authorization)
        context = read_context(headers)
        return service if context is None else _front_tenant(context)


def _front_tenant(context: TenantContext) -> Principal:
    share = context.share
    scheduling = TenantScheduling(weight=share.weight, priority=share.priority, max_queued=share.max_queued)
    # No limits here: the front enforced the tenant's own; the node schedules it by its share and counts it by name.
    tenant = Tenant(name=context.tenant, limits=SERVICE_PRINCIPAL.tenant.limits, models=None, scheduling=scheduling)
    return Principal(tenant, SERVICE_PRINCIPAL.credential)
