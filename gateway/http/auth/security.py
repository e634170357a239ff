"""Who is calling: the ``principal`` dependency of every ``/v1`` handler, and the admin API's guard."""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING, Any

from litestar import Request  # noqa: TC002 - Litestar reads the hints of dependencies at runtime

from auth import Principal  # noqa: TC001 - Litestar reads the hints of dependencies at runtime
from auth.errors import InvalidCredentialsError
from gateway.http.auth.service_token import ServiceTokenAuthenticator
from gateway.http.refusals import NotServedHereError
from gateway.http.request_record import request_record
from gateway.observability.refusals import counted
from gateway.observability.tracing import span
from gateway.state import gateway_state

if TYPE_CHECKING:
    from collections.abc import Mapping

    from litestar.connection import ASGIConnection
    from litestar.handlers.base import BaseRouteHandler

__all__ = ["PRINCIPAL_KEY", "XI_API_KEY", "authenticate_request", "presented_authorization", "provide_principal",
           "require_admin"]  # fmt: skip

PRINCIPAL_KEY = "tts_principal"
"""Where a request's principal is kept in its scope's state once authenticated."""
XI_API_KEY = "xi-api-key"
"""ElevenLabs' header for the API key; its SDKs and the voice stacks built on them send it instead of
``Authorization``."""

# An engine node (``server.profile: engine``) serves speech to a front gateway, which owns tenants, their voices and
# their consent recordings.
_NOT_ON_ENGINE_NODES = frozenset(
    {
        "createVoice",
        "retrieveVoice",
        "deleteVoice",
        "createVoiceConsent",
        "listVoiceConsents",
        "retrieveVoiceConsent",
        "updateVoiceConsent",
        "deleteVoiceConsent",
    }
)


async def provide_principal(request: Request[Any, Any, Any]) -> Principal:  # Litestar reads these hints at runtime
    """Who is calling: authenticated from the request's head before its body was read
    (``gateway/http/auth/early_auth.py``), or now."""
    principal: Principal | None = request.scope.get("state", {}).get(PRINCIPAL_KEY)
    return principal if principal is not None else await authenticate_request(request)


def presented_authorization(headers: Mapping[str, str]) -> str | None:
    """The credential a request to a front gateway presents, as an ``Authorization`` value: its ``Authorization``
    header, else ElevenLabs' ``xi-api-key`` as ``Bearer <key>`` (the same keys and JWTs, the same throttle); ``None``
    when it presents neither. ``Authorization`` wins when both are there."""
    if (authorization := headers.get("authorization")) is not None:
        return authorization
    key = (headers.get(XI_API_KEY) or "").strip()
    return f"Bearer {key}" if key else None


async def authenticate_request(request: Request[Any, Any, Any]) -> Principal:
    """Authenticate the request from its headers (API key or JWT in ``Authorization`` or ``xi-api-key``, through the
    address's credential throttle; anyone when the gateway runs open; on an engine node the service token in
    ``Authorization``, and then the front gateway's tenant context)."""
    state = gateway_state(request.app)
    authenticator = state.authenticator
    principal: Principal
    with span("authenticate"):
        if isinstance(authenticator, ServiceTokenAuthenticator):  # an engine node: its caller speaks for a tenant
            principal = await authenticator.authenticate_front(request.headers.get("authorization"), request.headers)
        else:  # a front gateway: a tenant's context headers are never read, so they can claim nothing
            client = request.client.host if request.client else None
            authorization = presented_authorization(request.headers)
            principal = await state.credential_throttle.admit(client, authorization, authenticator.authenticate)
    if (record := request_record(request.scope)) is not None:
        record.tenant = principal.tenant.name
    if state.settings.server.profile == "engine" and (
        getattr(request.scope["route_handler"], "operation_id", None) in _NOT_ON_ENGINE_NODES
    ):
        raise NotServedHereError(
            "Custom voices and consent recordings are managed by the front gateway, not an engine node."
        )
    return principal


def require_admin(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """The admin API needs ``Authorization: Bearer <auth.admin_token>``; without a configured token it is off.

    Failed attempts are logged (never the token) and throttled per client address (the scope's client: the peer's,
    or the one a trusted proxy forwarded for, ``server.trusted_proxies``) by the app's ``AdminThrottle``
    (``gateway/http/auth/credential_throttle.py``): after ``ADMIN_FAILURES_PER_MINUTE`` tokens refused, every admin
    request from that address gets 429 until the oldest leaves the minute, a right token included, or guessing would
    go on at full speed (whatever answers a right token while the wrong ones get 429 tells a guesser when it has
    guessed). So a stranger locks out only its own address: the admin is locked out only by a caller that shares its
    address (then reach the admin API from another, see ``docs/configuration.md``). A request without a token is
    refused but not counted: it guesses nothing.
    """
    state = gateway_state(connection.app)
    token = state.settings.auth.admin_token
    if token is None:
        raise NotServedHereError("The admin API is disabled: set auth.admin_token.")
    throttle = state.admin_throttle
    client = connection.client.host if connection.client else "unknown"
    throttle.check(client)
    scheme, _space, presented = connection.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not presented.strip():
        needs_bearer = InvalidCredentialsError("The admin API needs 'Authorization: Bearer <admin token>'.")
        if not scheme:  # guesses nothing: neither throttled nor counted, as for the API's credentials
            throttle.not_presented(client, connection.url.path)
            raise needs_bearer
        throttle.failed(client, "not_bearer", connection.url.path)
        raise counted("admin", needs_bearer)
    if not hmac.compare_digest(presented.strip().encode(), token.get_secret_value().encode()):
        throttle.failed(client, "wrong_token", connection.url.path)
        raise counted("admin", InvalidCredentialsError("Invalid admin token."))
