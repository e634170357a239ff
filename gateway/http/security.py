"""Who is calling: the ``principal`` dependency of every ``/v1`` handler, and the admin API's guard."""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING, Any

from litestar import Request  # noqa: TC002 - Litestar reads the hints of dependencies at runtime
from litestar.status_codes import HTTP_401_UNAUTHORIZED, HTTP_404_NOT_FOUND

from auth import Principal  # noqa: TC001 - Litestar reads the hints of dependencies at runtime
from gateway.http.errors import OpenAIError
from gateway.http.tracking import request_record

if TYPE_CHECKING:
    from litestar.connection import ASGIConnection
    from litestar.handlers.base import BaseRouteHandler

__all__ = ["provide_principal", "require_admin"]


async def provide_principal(request: Request[Any, Any, Any]) -> Principal:  # Litestar reads these hints at runtime
    """Authenticate the request (API key or JWT; anyone when the gateway runs open)."""
    principal: Principal = await request.app.state.services.authenticator.authenticate(
        request.headers.get("authorization"))
    if (record := request_record(request.scope)) is not None:
        record.tenant = principal.tenant.name
    return principal


def require_admin(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """The admin API needs ``Authorization: Bearer <auth.admin_token>``; without a configured token it is off."""
    token = connection.app.state.settings.auth.admin_token
    if token is None:
        raise OpenAIError(HTTP_404_NOT_FOUND, "The admin API is disabled: set auth.admin_token.", code="not_found")
    presented = connection.headers.get("authorization", "").removeprefix("Bearer ").strip()
    if not hmac.compare_digest(presented.encode(), token.get_secret_value().encode()):
        raise OpenAIError(HTTP_401_UNAUTHORIZED, "Invalid admin token.", code="invalid_api_key")
