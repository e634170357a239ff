"""Who may call the gateway: tenants, API keys, JWTs. Pure async Python; knows nothing of HTTP or audio."""

from __future__ import annotations

from auth.authenticator import Authenticator, Principal
from auth.errors import AuthBackendError, InvalidCredentialsError, TenantNotFoundError, UnknownTenantError
from auth.jwt import JWTVerifier
from auth.keys import API_KEY_PREFIX, ApiKeyRecord, generate_api_key, hash_api_key, key_hint, looks_like_api_key
from auth.seed import seed_tenants
from auth.store import AuthStore, MemoryAuthStore, RedisAuthStore
from auth.tenants import ANONYMOUS, Tenant, tenant_from_settings

__all__ = [
    "ANONYMOUS",
    "API_KEY_PREFIX",
    "ApiKeyRecord",
    "AuthBackendError",
    "AuthStore",
    "Authenticator",
    "InvalidCredentialsError",
    "JWTVerifier",
    "MemoryAuthStore",
    "Principal",
    "RedisAuthStore",
    "Tenant",
    "TenantNotFoundError",
    "UnknownTenantError",
    "generate_api_key",
    "hash_api_key",
    "key_hint",
    "looks_like_api_key",
    "seed_tenants",
    "tenant_from_settings",
]
