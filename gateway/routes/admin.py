"""``/admin``: tenants, API keys and usage of everyone, behind ``auth.admin_token``. Changes apply without a restart
(and on every replica when the stores live in Redis).

Every listing is a page in OpenAI's list shape (``data``, ``first_id``, ``last_id``, ``has_more``; the next page is
``?after=<last_id>``: :class:`~gateway.schemas.ListPage`), so that neither the response nor the work behind it grows
with the number of tenants.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Annotated, Any, Literal

from litestar import Controller, Request, delete, get, post
from litestar.params import FromPath, JSONBody, Parameter
from litestar.status_codes import HTTP_201_CREATED, HTTP_400_BAD_REQUEST, HTTP_404_NOT_FOUND
from pydantic import BaseModel, ConfigDict, Field

from auth import ApiKeyRecord, Tenant, TenantNotFoundError, tenant_from_settings
from auth.settings import DictionaryId, TenantLimits, TenantScheduling, TenantSettings, VoiceAliases
from gateway.http.auth.dependencies import AuthStoreDep, ConsentsDep, PronunciationDep, UsageDep, VoicesDep
from gateway.http.auth.security import require_admin
from gateway.http.errors import OpenAIError, error_responses
from gateway.http.json_body import require_json
from gateway.schemas import ListPage
from gateway.state import gateway_state
from storage import MAX_PAGE

if TYPE_CHECKING:
    from auth.usage import RetiredUsage, UsageRecord

__all__ = ["AdminController", "TenantCreate"]


class TenantCreate(BaseModel):
    """A tenant created at runtime (or replaced: its keys, usage and voices stay)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    limits: TenantLimits = Field(default_factory=TenantLimits)
    models: list[str] | None = None
    scheduling: TenantScheduling = Field(default_factory=TenantScheduling)
    """Weight, priority class and cap on waiting requests when engines are busy."""
    pronunciation_dictionaries: list[DictionaryId] = Field(default_factory=list, max_length=3)
    """Ids of the tenant's own pronunciation dictionaries that its requests naming none are spoken with (each must
    exist: 400 otherwise)."""
    control_tokens: bool = False
    """Every request of the tenant reads the engine's control tokens typed in its text (``docs/ssml.md``)."""
    voice_aliases: VoiceAliases = Field(default_factory=dict)
    """Voice names and ids its callers send, each mapped to the voice that speaks it (a built-in voice, or one of its
    custom voices by ``voice_…`` id), over the configuration's ``voices.aliases`` (``docs/elevenlabs.md``)."""


class TenantObject(BaseModel):
    """A tenant as the admin API shows it."""

    object: Literal["tenant"] = "tenant"
    id: str
    """The tenant's name (its id in pages)."""
    name: str
    limits: TenantLimits
    models: list[str] | None
    """Models (engines or aliases) it may use; ``null``: every model."""
    scheduling: TenantScheduling
    pronunciation_dictionaries: list[str]
    """Its default pronunciation dictionaries (ids)."""
    control_tokens: bool
    """Whether its requests read the engine's control tokens typed in their text."""
    voice_aliases: dict[str, str]
    """Its voice aliases: a name or id its callers send, with the voice that speaks it."""


TenantList = ListPage[TenantObject]
"""A page of tenants by name."""


class TenantDeleted(BaseModel):
    object: Literal["tenant.deleted"] = "tenant.deleted"
    id: str
    name: str
    deleted: bool


class KeyObject(BaseModel):
    """An API key's record; the key itself is never stored, so never shown again after its creation."""

    object: Literal["api_key"] = "api_key"
    id: str
    tenant: str
    created_at: float
    revoked: bool
    hint: str
    """``sk-tts-...abcd``; for a key configured by its hash (``api_key_sha256``), the start of that hash,
    ``sha256:5e2bf57d...``."""


class CreatedKey(KeyObject):
    key: str
    """The key: shown this once."""


KeyList = ListPage[KeyObject]
"""A page of a tenant's keys, oldest first; revoked keys stay listed for ``auth.revoked_key_retention_s``."""


class KeyRevoked(BaseModel):
    object: Literal["api_key.revoked"] = "api_key.revoked"
    id: str
    revoked: bool


class Usage(BaseModel):
    """What a tenant has used: requests served, their input characters and audio, cache hits, refusals by reason.

    Only a base of the admin API's objects: ``GET /v1/usage`` answers with :class:`~gateway.schemas.TenantUsage`,
    whose fields come in another order (its ``object`` and ``tenant`` first), so it cannot derive from this one without
    changing its bodies."""

    requests: int
    input_characters: int
    audio_seconds: float
    cache_hits: int
    rejections: dict[str, int]


class TenantUsageObject(Usage):
    """One tenant's usage in the admin API's listing: the counts of ``GET /v1/usage`` (``TenantUsage``) as a
    ``tenant.usage`` object whose id is the tenant's name."""

    object: Literal["tenant.usage"] = "tenant.usage"
    id: str
    """The tenant's name."""


TenantUsageList = ListPage[TenantUsageObject]
"""A page of tenants' usage by name."""


class RetiredTenantUsage(Usage):
    """The usage of a deleted tenant of this name, with what its streams in flight at the deletion added."""

    object: Literal["tenant.retired_usage"] = "tenant.retired_usage"
    tenant: str
    generation: str
    retired_at: float

    @property
    def id(self) -> str:
        """Its generation: what bounds a listing of them."""
        return self.generation


RetiredUsageList = ListPage[RetiredTenantUsage]
"""The usage of the deleted tenants of one name, oldest first, in one page."""


After = Annotated[str | None, Parameter(description="Start after this id (a page's `last_id`).", max_length=256)]
Limit = Annotated[int, Parameter(description="Records per page.", ge=1, le=MAX_PAGE)]


def _tenant(tenant: Tenant) -> TenantObject:
    models = sorted(tenant.models) if tenant.models is not None else None
    return TenantObject(
        id=tenant.name,
        name=tenant.name,
        limits=tenant.limits,
        models=models,
        scheduling=tenant.scheduling,
        pronunciation_dictionaries=list(tenant.pronunciation_dictionaries),
        control_tokens=tenant.control_tokens,
        voice_aliases=dict(tenant.voice_aliases),
    )


def _key(record: ApiKeyRecord) -> KeyObject:
    return KeyObject(
        id=record.id, tenant=record.tenant, created_at=record.created_at, revoked=record.revoked, hint=record.shown_hint
    )


def _usage(name: str, record: UsageRecord) -> TenantUsageObject:
    return TenantUsageObject(id=name, **asdict(record))


def _retired(retired: RetiredUsage) -> RetiredTenantUsage:
    return RetiredTenantUsage(
        tenant=retired.tenant, generation=retired.generation, retired_at=retired.retired_at, **asdict(retired.usage)
    )


def _no_tenant(name: str) -> OpenAIError:
    return OpenAIError(HTTP_404_NOT_FOUND, f"Tenant '{name}' was not found.", param="name", code="tenant_not_found")


_ERRORS = error_responses(400, 401, 404, 429, 503)  # 429: an address with too many failed admin tokens


class AdminController(Controller):
    path = "/admin"
    tags = ["Admin"]  # noqa: RUF012 - Litestar's declared type
    guards = [require_admin]  # noqa: RUF012 - Litestar's declared type

    @get("/tenants", operation_id="adminListTenants", responses=_ERRORS)
    async def list_tenants(self, auth_store: AuthStoreDep, after: After = None, limit: Limit = 20) -> TenantList:
        return TenantList.of_records(await auth_store.page_tenants(after=after, limit=limit), _tenant)

    @post(
        "/tenants",
        status_code=HTTP_201_CREATED,
        operation_id="adminCreateTenant",
        before_request=require_json,
        responses=error_responses(400, 401, 404, 415, 429, 503),
        description="Creates the tenant, or replaces the settings of the tenant of this name whole (a field left out "
        "takes its default); its keys, usage, voices and dictionaries stay.",
    )
    async def create_tenant(
        self, data: JSONBody[TenantCreate], auth_store: AuthStoreDep, pronunciation: PronunciationDep
    ) -> TenantObject:
        # Every field of the body, validated as a configuration entry would be (name pattern, limits).
        settings = TenantSettings(**dict(data))
        for dictionary_id in data.pronunciation_dictionaries:
            if await pronunciation.store.get(data.name, dictionary_id) is None:
                raise OpenAIError(
                    HTTP_400_BAD_REQUEST,
                    f"Tenant '{data.name}' has no pronunciation dictionary '{dictionary_id}'.",
                    param="pronunciation_dictionaries",
                    code="pronunciation_dictionary_not_found",
                )
        return _tenant(await auth_store.put_tenant(tenant_from_settings(settings)))

    @delete(
        "/tenants/{name:str}",
        status_code=200,
        operation_id="adminDeleteTenant",
        responses=_ERRORS,
        description="Deletes the tenant's keys, closes its realtime sessions on every replica, cancels its queued "
        "and running speech jobs on every replica and deletes its jobs and their audio, its voices, consent "
        "recordings and pronunciation dictionaries; its usage is retired (kept apart, with what its streams still in "
        "flight and its cancelled jobs spoke: `GET /admin/retired-usage/{name}`) and its cached audio becomes "
        "unreachable. A tenant created again under the same name starts empty.",
    )
    async def delete_tenant(  # noqa: PLR0917 - Litestar's parameters
        self,
        request: Request[Any, Any, Any],
        name: FromPath[str],
        auth_store: AuthStoreDep,
        voices: VoicesDep,
        consents: ConsentsDep,
        usage: UsageDep,
        pronunciation: PronunciationDep,
    ) -> TenantDeleted:
        tenant = await auth_store.get_tenant(name)
        if tenant is None or not await auth_store.delete_tenant(name):
            raise _no_tenant(name)
        await voices.forget_tenant(name)
        await consents.forget_tenant(name)
        await pronunciation.store.forget_tenant(name)
        if (jobs := gateway_state(request.app).jobs) is not None:
            await jobs.forget_tenant(tenant)
        await usage.retire(tenant)
        return TenantDeleted(id=name, name=name, deleted=True)

    @post("/tenants/{name:str}/keys", status_code=HTTP_201_CREATED, operation_id="adminCreateKey", responses=_ERRORS)
    async def create_key(self, name: FromPath[str], auth_store: AuthStoreDep) -> CreatedKey:
        try:
            key, record = await auth_store.create_key(name)
        except TenantNotFoundError:
            raise _no_tenant(name) from None
        return CreatedKey(**_key(record).model_dump(exclude={"object"}), key=key)  # the only time it is ever shown

    @get("/tenants/{name:str}/keys", operation_id="adminListKeys", responses=_ERRORS)
    async def list_keys(
        self, name: FromPath[str], auth_store: AuthStoreDep, after: After = None, limit: Limit = 20
    ) -> KeyList:
        if await auth_store.get_tenant(name) is None:  # as creating a key of it is
            raise _no_tenant(name)
        return KeyList.of_records(await auth_store.page_keys(name, after=after, limit=limit), _key)

    @delete("/keys/{key_id:str}", status_code=200, operation_id="adminRevokeKey", responses=_ERRORS)
    async def revoke_key(self, key_id: FromPath[str], auth_store: AuthStoreDep) -> KeyRevoked:
        if not await auth_store.revoke_key(key_id):
            raise OpenAIError(
                HTTP_404_NOT_FOUND, f"Key '{key_id}' was not found.", param="key_id", code="key_not_found"
            )
        return KeyRevoked(id=key_id, revoked=True)

    @get("/usage", operation_id="adminUsage", responses=_ERRORS)
    async def usage(
        self, auth_store: AuthStoreDep, usage: UsageDep, after: After = None, limit: Limit = 20
    ) -> TenantUsageList:
        page = await auth_store.page_tenants(after=after, limit=limit)
        records = await usage.many(page.data)  # one round trip for the page
        data = [_usage(tenant.name, record) for tenant, record in zip(page.data, records, strict=True)]
        return TenantUsageList.of(data, has_more=page.has_more)

    @get("/retired-usage/{name:str}", operation_id="adminRetiredUsage", responses=_ERRORS)
    async def retired_usage(self, name: FromPath[str], usage: UsageDep) -> RetiredUsageList:
        """The usage of deleted tenants of this name, kept for ``auth.retired_usage_retention_s``."""
        return RetiredUsageList.of([_retired(retired) for retired in await usage.retired(name)], has_more=False)
