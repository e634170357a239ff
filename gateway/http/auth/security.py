"""Who is calling: the ``principal`` dependency of every ``/v1`` handler, and the admin API's guard."""

from __future__ import annotations

import hmac
import logging
from typing import TYPE_CHECKING, Any, cast

from litestar import Request  # noqa: TC002 - Litestar reads the hints of dependencies at runtime
from litestar.status_codes import HTTP_401_UNAUTHORIZED, HTTP_404_NOT_FOUND, HTTP_429_TOO_MANY_REQUESTS

from auth import Principal  # noqa: TC001 - Litestar reads the hints of dependencies at runtime
from gateway.http.auth.credential_throttle import FailureWindow, credential_throttle
from gateway.http.auth.service_token import ServiceTokenAuthenticator
from gateway.http.client_address import address_key
from gateway.http.errors import OpenAIError
from gateway.http.request_record import request_record
from gateway.observability.refusals import counted

if TYPE_CHECKING:
    from litestar.connection import ASGIConnection
    from litestar.handlers.base import BaseRouteHandler

__all__ = [
    "ADMIN_FAILURES_PER_MINUTE",
    "PRINCIPAL_KEY",
    "AdminThrottle",
    "authenticate_request",
    "provide_principal",
    "require_admin",
]

PRINCIPAL_KEY = "tts_principal"
"""Where a request's principal is kept in its scope's state once authenticated."""

logger = logging.getLogger("tts_gateway.admin")

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


async def authenticate_request(request: Request[Any, Any, Any]) -> Principal:
    """Authenticate the request from its headers (API key or JWT, through the address's credential throttle; anyone
    when the gateway runs open; on an engine node the service token, and then the front gateway's tenant context)."""
    state = request.app.state
    authenticator = state.services.authenticator
    authorization = request.headers.get("authorization")
    principal: Principal
    if isinstance(authenticator, ServiceTokenAuthenticator):  # an engine node: its caller speaks for a tenant
        principal = await authenticator.authenticate_front(authorization, request.headers)
    else:  # a front gateway: a tenant's context headers are never read, so they can claim nothing
        throttle = credential_throttle(state, state.settings.server)
        client = request.client.host if request.client else None
        principal = await throttle.authenticate(client, authorization, authenticator.authenticate)
    if (record := request_record(request.scope)) is not None:
        record.tenant = principal.tenant.name
    if request.app.state.settings.server.profile == "engine" and (
        getattr(request.scope["route_handler"], "operation_id", None) in _NOT_ON_ENGINE_NODES
    ):
        raise OpenAIError(
            HTTP_404_NOT_FOUND,
            "Custom voices and consent recordings are managed by the front gateway, not an engine node.",
            code="not_found",
        )
    return principal


def require_admin(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """The admin API needs ``Authorization: Bearer <auth.admin_token>``; without a configured token it is off.

    Failed attempts are logged (never the token) and throttled per client address (the scope's client: the peer's,
    or the one a trusted proxy forwarded for, ``server.trusted_proxies``): after :data:`ADMIN_FAILURES_PER_MINUTE`
    tokens refused, every admin request from that address gets 429 until the oldest leaves the minute, a right token
    included, or guessing would go on at full speed (whatever answers a right token while the wrong ones get 429
    tells a guesser when it has guessed). So a stranger locks out only its own address: the admin is locked out only
    by a caller that shares its address (then reach the admin API from another, see ``docs/configuration.md``). A
    request without a token is refused but not counted: it guesses nothing.
    """
    token = connection.app.state.settings.auth.admin_token
    if token is None:
        raise OpenAIError(HTTP_404_NOT_FOUND, "The admin API is disabled: set auth.admin_token.", code="not_found")
    throttle = _admin_throttle(connection)
    client = connection.client.host if connection.client else "unknown"
    throttle.check(client)
    scheme, _space, presented = connection.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not presented.strip():
        needs_bearer = OpenAIError(
            HTTP_401_UNAUTHORIZED, "The admin API needs 'Authorization: Bearer <admin token>'.", code="invalid_api_key"
        )
        if not scheme:  # guesses nothing: neither throttled nor counted, as for the API's credentials
            throttle.not_presented(client, connection.url.path)
            raise needs_bearer
        throttle.failed(client, "not_bearer", connection.url.path)
        raise counted("admin", needs_bearer)
    if not hmac.compare_digest(presented.strip().encode(), token.get_secret_value().encode()):
        throttle.failed(client, "wrong_token", connection.url.path)
        raise counted("admin", OpenAIError(HTTP_401_UNAUTHORIZED, "Invalid admin token.", code="invalid_api_key"))


#: Failed admin authentications a client address may make in a moving minute before it is throttled.
ADMIN_FAILURES_PER_MINUTE = 10


class AdminThrottle:
    """Failed admin authentications per client address, in this replica's memory (a moving window from ``limits``).

    Per replica: an attacker spread over N replicas gets N times the attempts, still far too few for a 32-character
    token. Behind a proxy every client shares the proxy's address unless it is listed in ``server.trusted_proxies``.
    An IPv6 client counts by its /64 (:func:`~gateway.http.client_address.address_key`).
    """

    def __init__(self) -> None:
        self._failures = FailureWindow(ADMIN_FAILURES_PER_MINUTE, 60)

    def check(self, client: str) -> None:
        """Raise 429 with ``Retry-After`` while ``client`` is throttled."""
        if self._failures.exceeded(address_key(client)):
            retry_after_s = self._failures.retry_after_s(address_key(client))
            raise counted(
                "admin",
                OpenAIError(
                    HTTP_429_TOO_MANY_REQUESTS,
                    f"Too many failed admin authentications; retry after {retry_after_s} s.",
                    type="requests",
                    code="rate_limit_exceeded",
                    headers={"Retry-After": str(retry_after_s)},
                ),
            )

    def failed(self, client: str, reason: str, path: str) -> None:
        """Count a failed attempt and log it as a warning (the presented token never)."""
        key = address_key(client)
        throttled = self._failures.count(key)
        logger.warning(
            "failed admin authentication (%s) from %s%s",
            reason,
            client,
            f"; throttled for {self._failures.retry_after_s(key)} s" if throttled else "",
            extra={"record": {"client": client, "reason": reason, "path": path, "throttled": throttled}},
        )

    def not_presented(self, client: str, path: str) -> None:
        """Log a request without a token as a warning, without counting it (it guesses nothing)."""
        logger.warning(
            "admin request without a token from %s",
            client,
            extra={"record": {"client": client, "reason": "missing", "path": path, "throttled": False}},
        )


def _admin_throttle(connection: ASGIConnection[Any, Any, Any, Any]) -> AdminThrottle:
    # Made on first use and kept on the app's state: one per app, without a service the lifespan must build.
    state = connection.app.state
    if (throttle := state.get("admin_throttle")) is None:
        throttle = state["admin_throttle"] = AdminThrottle()
    return cast("AdminThrottle", throttle)
