"""``/admin``: tenants, API keys and usage of everyone, behind ``auth.admin_token``. Changes apply without a restart
(and on every replica when the stores live in Redis)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from litestar import Controller, delete, get, post
from litestar.params import FromPath, JSONBody
from litestar.status_codes import HTTP_201_CREATED, HTTP_404_NOT_FOUND
from pydantic import BaseModel, ConfigDict, Field

from auth import ApiKeyRecord, Tenant, TenantNotFoundError, tenant_from_settings
from auth.settings import TenantLimits, TenantScheduling, TenantSettings
from gateway.http.dependencies import AuthStoreDep, ConsentsDep, UsageDep, VoicesDep
from gateway.http.errors import OpenAIError, error_responses
from gateway.http.security import require_admin

__all__ = ["AdminController", "TenantCreate"]


class TenantCreate(BaseModel):
    """A tenant created at runtime."""

    model_config = ConfigDict(extra="forbid")

    name: str
    limits: TenantLimits = Field(default_factory=TenantLimits)
    models: list[str] | None = None
    scheduling: TenantScheduling = Field(default_factory=TenantScheduling)
    """Weight, priority class and cap on waiting requests when engines are busy."""


def _tenant_json(tenant: Tenant) -> dict[str, Any]:
    models = sorted(tenant.models) if tenant.models is not None else None
    return {
        "name": tenant.name,
        "limits": tenant.limits.model_dump(),
        "models": models,
        "scheduling": tenant.scheduling.model_dump(),
    }


def _key_json(record: ApiKeyRecord) -> dict[str, Any]:
    return {k: v for k, v in asdict(record).items() if k != "key_hash"}


def _no_tenant(name: str) -> OpenAIError:
    return OpenAIError(HTTP_404_NOT_FOUND, f"Tenant '{name}' was not found.", param="name", code="tenant_not_found")


_ERRORS = error_responses(400, 401, 404, 503)


class AdminController(Controller):
    path = "/admin"
    tags = ["Admin"]  # noqa: RUF012 - Litestar's declared type
    guards = [require_admin]  # noqa: RUF012 - Litestar's declared type

    @get("/tenants", operation_id="adminListTenants", responses=_ERRORS)
    async def list_tenants(self, auth_store: AuthStoreDep) -> list[dict[str, Any]]:
        return [_tenant_json(t) for t in await auth_store.list_tenants()]

    @post("/tenants", status_code=HTTP_201_CREATED, operation_id="adminCreateTenant", responses=_ERRORS)
    async def create_tenant(self, data: JSONBody[TenantCreate], auth_store: AuthStoreDep) -> dict[str, Any]:
        # Validated as a configuration entry would be (name pattern, limits).
        tenant = tenant_from_settings(
            TenantSettings(name=data.name, limits=data.limits, models=data.models, scheduling=data.scheduling)
        )
        await auth_store.put_tenant(tenant)
        return _tenant_json(tenant)

    @delete(
        "/tenants/{name:str}",
        status_code=200,
        operation_id="adminDeleteTenant",
        responses=_ERRORS,
        description="Revokes the tenant's keys, closes its realtime sessions on every replica and deletes its "
        "voices, consent recordings and usage; its cached audio becomes unreachable. A tenant created again under the "
        "same name starts empty.",
    )
    async def delete_tenant(
        self,
        name: FromPath[str],
        auth_store: AuthStoreDep,
        voices: VoicesDep,
        consents: ConsentsDep,
        usage: UsageDep,
    ) -> dict[str, Any]:
        if not await auth_store.delete_tenant(name):
            raise _no_tenant(name)
        await voices.forget_tenant(name)
        await consents.forget_tenant(name)
        await usage.forget(name)
        return {"name": name, "deleted": True}

    @post("/tenants/{name:str}/keys", status_code=HTTP_201_CREATED, operation_id="adminCreateKey", responses=_ERRORS)
    async def create_key(self, name: FromPath[str], auth_store: AuthStoreDep) -> dict[str, Any]:
        try:
            key, record = await auth_store.create_key(name)
        except TenantNotFoundError:
            raise _no_tenant(name) from None
        return {**_key_json(record), "key": key}  # the only time the key is ever shown

    @get("/tenants/{name:str}/keys", operation_id="adminListKeys", responses=_ERRORS)
    async def list_keys(self, name: FromPath[str], auth_store: AuthStoreDep) -> list[dict[str, Any]]:
        return [_key_json(r) for r in await auth_store.list_keys(name)]

    @delete("/keys/{key_id:str}", status_code=200, operation_id="adminRevokeKey", responses=_ERRORS)
    async def revoke_key(self, key_id: FromPath[str], auth_store: AuthStoreDep) -> dict[str, Any]:
        if not await auth_store.revoke_key(key_id):
            raise OpenAIError(
                HTTP_404_NOT_FOUND, f"Key '{key_id}' was not found.", param="key_id", code="key_not_found"
            )
        return {"id": key_id, "revoked": True}

    @get("/usage", operation_id="adminUsage", responses=_ERRORS)
    async def usage(self, usage: UsageDep) -> dict[str, Any]:
        return {name: asdict(record) for name, record in (await usage.all()).items()}
