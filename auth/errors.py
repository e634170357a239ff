"""The errors auth raises; the HTTP layer maps each to an OpenAI error body."""

from __future__ import annotations

__all__ = ["AuthBackendError", "InvalidCredentialsError", "TenantNotFoundError", "UnknownTenantError"]


class InvalidCredentialsError(Exception):
    """The request carries no credential, or one that is wrong, revoked or expired (HTTP 401 ``invalid_api_key``).

    The message is safe to show to the caller: it never contains the credential, at most its prefix and last 4 chars.
    """


class UnknownTenantError(Exception):
    """A valid token names a tenant that does not exist (HTTP 403)."""


class AuthBackendError(Exception):
    """The store behind tenants and keys failed (Redis unreachable, corrupt record); the cause is chained."""


class TenantNotFoundError(LookupError):
    """An admin operation (creating a key) names a tenant the store does not hold."""
