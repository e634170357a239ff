"""Tenants: who a caller is, what they may use and how much."""

from __future__ import annotations

from dataclasses import dataclass, field

from auth.settings import TenantLimits, TenantScheduling, TenantSettings

__all__ = ["ANONYMOUS", "Tenant", "tenant_from_settings"]


@dataclass(frozen=True, slots=True)
class Tenant:
    """A caller of the gateway and its limits.

    Attributes:
        name: Unique name (``^[a-z0-9][a-z0-9_.-]{0,62}$`` when it comes from the configuration).
        limits: Per-tenant limits; treat as read-only, it is shared.
        models: Model names (engines or aliases) the tenant may request; ``None`` means every model, an empty set
            none.
        generation: Random id the store gives the tenant when it is created (kept when it is replaced); a tenant
            deleted and created again under the same name gets a new one, so what was scoped by it (cached audio)
            is out of reach of the new tenant. Empty for tenants stored before generations existed.
        scheduling: How its requests wait for busy engine workers among other tenants'; treat as read-only.
        pronunciation_dictionaries: Ids of its pronunciation dictionaries that requests naming none apply.
        control_tokens: Its requests read the engine's control tokens typed in their text, opted in or not.
        voice_aliases: Voice names and ids its callers send, with the voice each speaks in, sorted by name.
    """

    name: str
    limits: TenantLimits
    models: frozenset[str] | None
    generation: str = field(default="", compare=False)  # store-assigned: two tenants alike in settings are equal
    scheduling: TenantScheduling = field(default_factory=TenantScheduling)
    pronunciation_dictionaries: tuple[str, ...] = ()
    control_tokens: bool = False
    voice_aliases: tuple[tuple[str, str], ...] = ()

    def allows_model(self, model: str) -> bool:
        """Whether the tenant may request ``model`` (the name as the client sent it)."""
        return self.models is None or model in self.models


ANONYMOUS = Tenant(name="anonymous", limits=TenantLimits.unlimited(), models=None)
"""The one tenant of a gateway that runs open: no limits, every model."""


def tenant_from_settings(settings: TenantSettings) -> Tenant:
    """Build the tenant a configuration entry declares (its ``api_key_sha256`` go to the store separately)."""
    models = None if settings.models is None else frozenset(settings.models)
    return Tenant(
        name=settings.name,
        limits=settings.limits.model_copy(),
        models=models,
        scheduling=settings.scheduling.model_copy(),
        pronunciation_dictionaries=tuple(settings.pronunciation_dictionaries),
        control_tokens=settings.control_tokens,
        voice_aliases=tuple(sorted(settings.voice_aliases.items())),
    )
