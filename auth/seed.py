"""Start-up: the tenants and key hashes the configuration declares go into the store."""

from __future__ import annotations

from typing import TYPE_CHECKING

from auth.tenants import tenant_from_settings

if TYPE_CHECKING:
    from collections.abc import Sequence

    from auth.settings import TenantSettings
    from auth.store import AuthStore

__all__ = ["seed_tenants"]


async def seed_tenants(store: AuthStore, tenants: Sequence[TenantSettings]) -> None:
    """Put the configured tenants and their ``api_key_sha256`` hashes into ``store``.

    Idempotent, also when replicas run it at once: a tenant is rewritten with its configured limits and models, a
    known hash keeps its record (and stays revoked if it was revoked through the admin API). Tenants that exist only in
    the store (added through the admin API) are left alone.

    Raises:
        ValueError: A hash is not hex SHA-256, or it already belongs to another tenant.
        AuthBackendError: The store failed.
    """
    for settings in tenants:
        await store.put_tenant(tenant_from_settings(settings))
        for key_hash in settings.api_key_sha256:
            await store.add_key_hash(settings.name, key_hash.strip().lower())
