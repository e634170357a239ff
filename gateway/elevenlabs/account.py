"""ElevenLabs' account calls, answered as far as the gateway can answer them truthfully (``docs/elevenlabs.md``), and
ElevenLabs' error for the rest of its paths.

- ``GET /v1/user/subscription`` and ``GET /v1/user``: the tenant's character budget. With a monthly budget
  (``limits.characters_per_month`` or ``limits.audio_seconds_per_month``), as ElevenLabs counts it:
  ``character_count`` the month's characters (UTC), ``character_limit`` the character budget (2147483647 without
  one), ``next_character_count_reset_unix`` the next month's start, ``character_refresh_period`` ``monthly_period``.
  ElevenLabs' subscription counts characters only: a spent audio budget shows as ``character_count`` at
  ``character_limit``, nothing left, which is what a client checking its quota reads. Else its
  ``characters_per_minute`` limit: ``character_count`` is what it spoke in the current minute,
  ``next_character_count_reset_unix`` when the minute's count falls. A tenant with none has ``character_limit``
  2147483647 (none) and ``character_count`` the characters it has spoken in all. Its voice slots are its custom
  voices against ``voices.max_per_tenant``. There is no billing: ``status`` ``active``, nothing owed.
- ``GET /v1/history``: empty. The gateway keeps no history of what it spoke (its cache keys audio by what was said,
  not by who asked), so it says so rather than inventing one.
- ``GET /v1/voices/settings/default`` and ``GET /v1/voices/{voice_id}/settings``: ElevenLabs' defaults, the settings
  every voice here has.
- Any other route under a path only ElevenLabs has (``/v1/user/…``, ``/v1/history/…``, ``/v1/speech-to-text``,
  ``/v1/convai/…``, ...): after the caller's credential is checked (a wrong key is a 401, never a 404 that would
  tell it nothing of its key), ElevenLabs' 404 ``{"detail": {"status": "not_found", ...}}``.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias

from litestar import Controller, HttpMethod, Request, get, route
from litestar.di import NamedDependency, Provide
from litestar.exceptions import NotFoundException
from litestar.params import Parameter
from pydantic import BaseModel, Field

from gateway.elevenlabs.errors import error_responses
from gateway.elevenlabs.voices import voice_of
from gateway.elevenlabs.wire import DEFAULT_VOICE_SETTINGS, VoiceSettings
from gateway.http.auth.dependencies import Caller, Router, UsageDep, VoicesDep
from gateway.state import gateway_state

if TYPE_CHECKING:
    from auth.limits import BudgetState

__all__ = ["UNSERVED_PATHS", "AccountController", "unserved_elevenlabs_route"]

NO_LIMIT = 2**31 - 1
"""``character_limit`` of a tenant without a character budget: ElevenLabs' field is a required integer."""


class Price(BaseModel):
    amount: str = "0"
    currency: Literal["usd"] = "usd"


class Subscription(BaseModel):
    """ElevenLabs' ``Subscription`` (what its SDK's ``user.subscription.get()`` reads), from the tenant's limits."""

    tier: str = "chattts-gateway"
    character_count: int
    character_limit: int
    max_character_limit_extension: int | None = None
    max_credit_limit_extension: int = 0
    can_extend_character_limit: bool = False
    allowed_to_extend_character_limit: bool = False
    next_character_count_reset_unix: int | None
    voice_slots_used: int
    professional_voice_slots_used: int = 0
    professional_voice_slots_used_in_workspace: int = 0
    voice_limit: int
    max_voice_add_edits: int | None = None
    voice_add_edit_counter: int = 0
    professional_voice_limit: int = 0
    can_extend_voice_limit: bool = False
    can_use_instant_voice_cloning: bool = True
    """Voices from a recording (``POST /v1/audio/voices``), where an engine makes them."""
    can_use_professional_voice_cloning: bool = False
    currency: Literal["usd"] | None = None
    current_overage: Price = Field(default_factory=Price)
    status: Literal["active"] = "active"
    billing_period: None = None
    character_refresh_period: Literal["monthly_period"] | None = None
    """``monthly_period`` for a tenant's monthly budget (characters or audio seconds); none for a per-minute limit (no
    period of ElevenLabs')."""
    next_invoice: None = None
    open_invoices: list[Any] = []
    has_open_invoices: bool = False


class User(BaseModel):
    """ElevenLabs' ``User``: the tenant, with its subscription."""

    user_id: str
    """The tenant's name."""
    workspace_id: str
    subscription: Subscription
    is_new_user: bool = False
    can_use_delayed_payment_methods: bool = False
    is_onboarding_completed: bool = True
    is_onboarding_checklist_completed: bool = True
    first_name: str | None = None
    xi_api_key_preview: str | None = None
    created_at: int = 0
    """Unknown here (tenants keep no creation time): 0."""
    seat_type: Literal["workspace_member"] = "workspace_member"


class History(BaseModel):
    """ElevenLabs' ``GetSpeechHistoryResponse``: always empty, as the gateway keeps no history."""

    history: list[Any] = []
    last_history_item_id: str | None = None
    has_more: bool = False
    scanned_until: int | None = None


async def _subscription(
    request: Request[Any, Any, Any], principal: Caller, usage: UsageDep, voices: VoicesDep
) -> Subscription:
    tenant = principal.tenant
    state = gateway_state(request.app)
    slots = _Slots(len(await voices.list(tenant.name)), state.settings.voices.max_per_tenant)
    budget = await state.admission.budget(tenant)
    if budget.counted:
        return slots.subscription(*_month_count(budget), budget.month.end, monthly=True)
    limit = tenant.limits.characters_per_minute
    if limit is None:
        spoken = asdict(await usage.get(tenant))["input_characters"]
        return slots.subscription(spoken, NO_LIMIT, None)
    standing = await state.limiter.state(tenant.name, tenant.limits)
    remaining = limit if standing.remaining_tokens is None else standing.remaining_tokens
    reset_s = standing.reset_tokens_s or 0.0
    return slots.subscription(max(limit - remaining, 0), limit, int(time.time() + reset_s))


def _month_count(budget: BudgetState) -> tuple[int, int]:
    """``(character_count, character_limit)`` of a month: its characters against its character budget (none:
    :data:`NO_LIMIT`); with its audio budget spent, the count at the limit. ElevenLabs' subscription has no field for
    audio, and a client that checks its quota (``character_limit - character_count``) must see none left, as every
    request is refused (``quota_exceeded``) until the month's end."""
    limit = NO_LIMIT if budget.characters_limit is None else budget.characters_limit
    audio_spent = (budget.fraction_used("audio_seconds_per_month") or 0.0) >= 1.0
    return (limit if audio_spent else budget.characters_used or 0), limit


TenantSubscription: TypeAlias = NamedDependency[Subscription]
"""The caller's subscription (provided as ``subscription`` to the account routes)."""


class AccountController(Controller):
    path = "/v1"
    dependencies = {"subscription": Provide(_subscription)}  # noqa: RUF012 - Litestar's declared type

    @get(
        "/user/subscription",
        operation_id="elevenLabsGetSubscription",
        summary="ElevenLabs: the tenant's character budget (its month's, else its minute's) and voice slots.",
        responses=error_responses(401, 429, 503),
    )
    async def get_subscription(self, subscription: TenantSubscription) -> Subscription:
        return subscription

    @get(
        "/user",
        operation_id="elevenLabsGetUser",
        summary="ElevenLabs: the tenant, with its subscription.",
        responses=error_responses(401, 429, 503),
    )
    async def get_user(self, principal: Caller, subscription: TenantSubscription) -> User:
        name = principal.tenant.name
        return User(user_id=name, workspace_id=name, subscription=subscription)

    @get(
        "/history",
        operation_id="elevenLabsListHistory",
        summary="ElevenLabs: the history of generated audio, which the gateway does not keep (always empty).",
        responses=error_responses(401, 422, 429),
    )
    async def list_history(self, principal: Caller) -> History:
        return History()

    @get(
        "/voices/settings/default",
        operation_id="elevenLabsGetDefaultVoiceSettings",
        summary="ElevenLabs: the default voice settings, ElevenLabs' own (every voice here has them).",
        responses=error_responses(401, 429),
    )
    async def get_default_voice_settings(self, principal: Caller) -> VoiceSettings:
        return DEFAULT_VOICE_SETTINGS

    @get(
        "/voices/{voice_id:str}/settings",
        operation_id="elevenLabsGetVoiceSettings",
        summary="ElevenLabs: a voice's settings, ElevenLabs' defaults (every voice here has them).",
        responses=error_responses(401, 404, 429, 503),
    )
    async def get_voice_settings(
        self,
        request: Request[Any, Any, Any],
        principal: Caller,
        router: Router,
        voices: VoicesDep,
        voice_id: Annotated[str, Parameter(min_length=1, max_length=256)],
    ) -> VoiceSettings:
        await voice_of(request, voice_id, router, voices, principal)  # a voice the caller has, else 404
        return DEFAULT_VOICE_SETTINGS


@dataclass(frozen=True, slots=True)
class _Slots:
    """The tenant's custom voices against ``voices.max_per_tenant``."""

    used: int
    limit: int

    def subscription(self, count: int, limit: int, reset_unix: int | None, *, monthly: bool = False) -> Subscription:
        return Subscription(
            character_count=count,
            character_limit=limit,
            next_character_count_reset_unix=reset_unix,
            character_refresh_period="monthly_period" if monthly else None,
            voice_slots_used=self.used,
            voice_limit=self.limit,
        )


UNSERVED_PATHS = (
    "/v1/user/{rest:path}",
    "/v1/history/{rest:path}",
    "/v1/voices/add",
    "/v1/voices/{voice_id:str}/edit",
    "/v1/shared-voices",
    "/v1/similar-voices",
    "/v1/sound-generation",
    "/v1/speech-to-text",
    "/v1/speech-to-speech/{rest:path}",
    "/v1/audio-isolation",
    "/v1/audio-native",
    "/v1/dubbing",
    "/v1/convai/{rest:path}",
    "/v1/studio/{rest:path}",
    "/v1/projects",
    "/v1/workspace/{rest:path}",
    "/v1/text-to-voice/{rest:path}",
    "/v1/voice-generation/{rest:path}",
    "/v1/music",
    "/v1/forced-alignment",
    "/v1/single-use-token/{rest:path}",
)
"""Paths only ElevenLabs' API has, which the gateway does not serve: answered with ElevenLabs' 404."""


@route(
    list(UNSERVED_PATHS),
    http_method=[HttpMethod.GET, HttpMethod.POST, HttpMethod.PUT, HttpMethod.PATCH, HttpMethod.DELETE],
    operation_id="elevenLabsNotServed",
    include_in_schema=False,
)
async def unserved_elevenlabs_route(request: Request[Any, Any, Any], principal: Caller) -> None:
    """The caller authenticated (``principal``), then told the route is not here, in ElevenLabs' shape."""
    raise NotFoundException(f"This gateway does not serve {request.method} {request.url.path} of ElevenLabs' API.")
