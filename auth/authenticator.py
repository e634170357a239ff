"""From an ``Authorization`` header to a :class:`Principal`: API keys first, then JWTs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from auth.errors import InvalidCredentialsError, UnknownTenantError
from auth.keys import API_KEY_PREFIX, hash_api_key, key_hint, looks_like_api_key
from auth.tenants import ANONYMOUS, Tenant

if TYPE_CHECKING:
    from auth.jwt import JWTVerifier
    from auth.store import AuthStore

__all__ = ["Authenticator", "InvalidCredentialsError", "Principal", "UnknownTenantError"]

# Worded as OpenAI words them, so that SDK users recognise them.
_NO_KEY = (
    "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth "
    "(i.e. Authorization: Bearer YOUR_KEY)."
)
_NOT_BEARER = "Missing bearer authentication in header. Use the Authorization header with the Bearer scheme."
_MALFORMED_KEY = f"Incorrect API key provided. Keys start with {API_KEY_PREFIX}."


def _incorrect_key(key: str) -> str:
    return f"Incorrect API key provided: {key_hint(key)}."


@dataclass(frozen=True, slots=True)
class Principal:
    """Who made a request.

    Attributes:
        tenant: The tenant the request counts against.
        credential: What authenticated it, safe for logs: ``key:<key id>``, ``jwt`` or ``open``; never the secret.
    """

    tenant: Tenant
    credential: str


_OPEN = Principal(ANONYMOUS, "open")


def _bearer_credential(authorization: str | None) -> str:
    if authorization is None or not authorization.strip():
        raise InvalidCredentialsError(_NO_KEY)
    scheme, _, credential = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        raise InvalidCredentialsError(_NOT_BEARER)
    credential = credential.strip()
    if not credential:
        raise InvalidCredentialsError(_NO_KEY)
    return credential


class Authenticator:
    """Turns the ``Authorization`` header of a request into a :class:`Principal`, or refuses it."""

    def __init__(self, store: AuthStore, jwt: JWTVerifier | None, open_mode: bool) -> None:
        """Authenticate against ``store``, and JWTs with ``jwt`` when given.

        Args:
            store: Tenants and API keys.
            jwt: Verifier for bearer JWTs; ``None`` accepts API keys only.
            open_mode: Admit everyone as :data:`~auth.tenants.ANONYMOUS` (no tenants configured).
        """
        self._store = store
        self._jwt = jwt
        self._open_mode = open_mode

    async def authenticate(self, authorization: str | None) -> Principal:
        """The principal behind an ``Authorization`` header value (``None`` when the header is absent).

        Raises:
            InvalidCredentialsError: No, malformed, unknown, revoked or invalid credential (HTTP 401).
            UnknownTenantError: A valid JWT names a tenant that does not exist (HTTP 403).
            AuthBackendError: The store failed; the caller decides (503, most likely).
        """
        if self._open_mode:
            return _OPEN
        credential = _bearer_credential(authorization)
        if looks_like_api_key(credential):
            return await self._by_api_key(credential)
        if self._jwt is not None and credential.count(".") == 2:
            return await self._by_jwt(self._jwt, credential)
        raise InvalidCredentialsError(_MALFORMED_KEY)

    async def _by_api_key(self, key: str) -> Principal:
        record = await self._store.find_key(hash_api_key(key))
        tenant = None if record is None else await self._store.get_tenant(record.tenant)
        if record is None or tenant is None:
            raise InvalidCredentialsError(_incorrect_key(key))
        return Principal(tenant, f"key:{record.id}")

    async def _by_jwt(self, verifier: JWTVerifier, token: str) -> Principal:
        name = verifier.verify(token)
        tenant = await self._store.get_tenant(name)
        if tenant is None:
            raise UnknownTenantError(f"Tenant {name!r} is not known to this gateway.")
        return Principal(tenant, "jwt")
