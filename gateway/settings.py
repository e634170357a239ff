"""The gateway's one settings object: environment variables (``TTS_GATEWAY_*``) over an optional YAML file.

Every field is documented in ``docs/configuration.md``; keep the two in step.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, YamlConfigSettingsSource

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "AuthSettings",
    "CacheSettings",
    "EngineSettings",
    "JWTSettings",
    "LimitsSettings",
    "RealtimeSettings",
    "ServerSettings",
    "Settings",
    "TenantLimits",
    "TenantSettings",
    "load_settings",
]

EngineKind = Literal["chattts", "espeak", "synthetic"]


class EngineSettings(BaseModel):
    """One engine: which implementation, how many worker processes, and how its pool behaves."""

    model_config = ConfigDict(extra="forbid")

    kind: EngineKind
    """Implementation: ``chattts``, ``espeak`` or ``synthetic`` (deterministic tones, for tests and benchmarks)."""
    workers: int = Field(default=1, ge=1, le=64)
    """Worker processes, each holding one engine instance."""
    queue_size: int = Field(default=16, ge=0)
    """Requests allowed to wait for a free worker; beyond it the gateway answers 503 with Retry-After."""
    queue_timeout_s: float = Field(default=30.0, gt=0)
    """How long a request may wait in the queue before it gets a 503."""
    start_timeout_s: float = Field(default=120.0, gt=0)
    """How long a worker may take to load and warm up before it counts as failed."""
    stall_timeout_s: float = Field(default=30.0, gt=0)
    """A worker whose running request produces no audio for this long is killed and replaced (watchdog)."""
    cancel_timeout_s: float = Field(default=3.0, gt=0)
    """A worker that has not stopped this long after a cancellation is killed and replaced."""
    health_interval_s: float = Field(default=5.0, gt=0)
    """How often idle workers are pinged; one that does not answer within the interval is replaced."""
    max_buffered_audio_s: float = Field(default=120.0, gt=0)
    """Audio seconds buffered for a client that reads slower than the engine speaks before the request is dropped."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Options passed to the engine implementation (see docs/configuration.md for each kind)."""


class ServerSettings(BaseModel):
    """HTTP server knobs."""

    model_config = ConfigDict(extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    max_body_bytes: int = Field(default=64 * 1024, ge=1024)
    """Largest request body accepted; larger ones get 413."""
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    shutdown_grace_s: int = Field(default=30, ge=0)
    """On SIGTERM: stop accepting, let in-flight streams finish for up to this long, then stop the engines."""
    send_timeout_s: float = Field(default=30.0, gt=0)
    """A client that leaves one write of its response unread this long counts as gone: the response is abandoned,
    releasing its stream lease and synthesis (``gateway/backpressure.py``)."""
    playground: bool = True
    """Serve the playground page at / and /playground"""


class TenantLimits(BaseModel):
    """Per-tenant limits; ``None`` means unlimited."""

    model_config = ConfigDict(extra="forbid")

    requests_per_minute: int | None = Field(default=None, ge=1)
    characters_per_minute: int | None = Field(default=None, ge=1)
    """Input characters per minute: the speech analogue of tokens per minute."""
    concurrent_streams: int | None = Field(default=None, ge=1)


class TenantSettings(BaseModel):
    """A tenant declared in the configuration file."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]{0,62}$")
    limits: TenantLimits = Field(default_factory=TenantLimits)
    models: list[str] | None = None
    """Models (engines or aliases) the tenant may use; ``None``: every model."""
    api_key_sha256: list[str] = Field(default_factory=list)
    """Hex SHA-256 hashes of API keys issued out of band (``tts-gateway keys hash``); keys are never stored."""


class JWTSettings(BaseModel):
    """JSON Web Tokens for business callers: one pinned algorithm and its key."""

    model_config = ConfigDict(extra="forbid")

    algorithm: Literal["HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "ES256", "ES384", "ES512"] = "HS256"
    secret: SecretStr | None = None
    """The shared secret, for HS* algorithms."""
    public_key: str | None = None
    """The PEM public key, for RS*/ES* algorithms."""
    audience: str | None = None
    issuer: str | None = None
    tenant_claim: str = "tenant"
    leeway_s: int = Field(default=0, ge=0, le=300)

    @model_validator(mode="after")
    def _key_matches_algorithm(self) -> JWTSettings:
        if self.algorithm.startswith("HS") and (self.secret is None or self.public_key is not None):
            raise ValueError("HS* algorithms need `secret` and no `public_key`")
        if not self.algorithm.startswith("HS") and (self.public_key is None or self.secret is not None):
            raise ValueError("RS*/ES* algorithms need `public_key` and no `secret`")
        return self


class AuthSettings(BaseModel):
    """Who may call the gateway."""

    model_config = ConfigDict(extra="forbid")

    required: bool = False
    """Refuse to start without tenants or an admin token (the Helm chart's default).

    The gateway runs open (no credentials needed, one anonymous tenant) only when no tenants are configured and no
    admin token is set; it says so loudly at start-up.
    """
    admin_token: SecretStr | None = None
    """Bearer token of the admin API (``/admin/...``); the admin API is off without it."""
    tenants: list[TenantSettings] = Field(default_factory=list)
    jwt: JWTSettings | None = None


class LimitsSettings(BaseModel):
    """How per-tenant limits behave when their storage is out of reach."""

    model_config = ConfigDict(extra="forbid")

    fail_mode: Literal["open", "closed"] = "open"
    """``open``: admit requests while Redis is unreachable (counted and logged); ``closed``: answer 503."""
    lease_ttl_s: float = Field(default=30.0, gt=0)
    """A concurrent-stream lease not renewed for this long expires (a replica that died mid-stream)."""
    stream_wait_s: float = Field(default=0.25, ge=0, le=10)
    """A stream over the tenant's concurrency limit waits this long for one of its streams to end before a 429: a
    client that aborts a stream and asks again at once is often faster than the server noticing the abort."""


class CacheSettings(BaseModel):
    """The audio cache (Redis when ``redis_url`` is set, else in memory)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    ttl_s: int = Field(default=24 * 3600, ge=1)
    max_entry_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    max_memory_entries: int = Field(default=1024, ge=1)
    """Entries kept by the in-memory cache (least recently used go first)."""
    shared_across_tenants: bool = False
    """Let tenants hit each other's entries. Off by default: a hit would tell one tenant what another asked for."""


class RealtimeSettings(BaseModel):
    """The realtime WebSocket endpoint, ``/v1/audio/speech/stream`` (see ``docs/realtime.md``)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    max_segment_chars: int = Field(default=300, ge=20, le=4096)
    """A sentence longer than this is cut at a clause or word boundary, so that speech can start sooner."""
    max_pending_chars: int = Field(default=4096, ge=1, le=65536)
    """Text appended but not yet spoken, per session; an append beyond it is refused with an error event."""
    auth_timeout_s: float = Field(default=10.0, gt=0)
    """How long a socket without credentials may take to send its first message (which must carry them)."""
    idle_timeout_s: float = Field(default=300.0, gt=0)
    """A session with no client event and nothing to speak for this long is closed, freeing its stream lease."""


def _default_engines() -> dict[str, EngineSettings]:
    return {
        "chattts": EngineSettings(kind="chattts"),
        "espeak": EngineSettings(kind="espeak", workers=1),
    }


def _default_aliases() -> dict[str, list[str]]:
    fallback = ["chattts", "espeak"]
    return {"tts-1": fallback, "tts-1-hd": fallback, "gpt-4o-mini-tts": fallback}


class Settings(BaseSettings):
    """Everything the gateway is configured with, built once at start and injected where needed."""

    model_config = SettingsConfigDict(env_prefix="TTS_GATEWAY_", env_nested_delimiter="__", extra="forbid")

    server: ServerSettings = Field(default_factory=ServerSettings)
    engines: dict[str, EngineSettings] = Field(default_factory=_default_engines)
    """Engines by the model name clients use for them directly."""
    aliases: dict[str, list[str]] = Field(default_factory=_default_aliases)
    """Model names that route to engines: the first ready engine in the list serves the request."""
    redis_url: str | None = None
    """``redis://[:password@]host:port/db``: limits, cache, keys, voices and usage shared by every replica."""
    auth: AuthSettings = Field(default_factory=AuthSettings)
    limits: LimitsSettings = Field(default_factory=LimitsSettings)
    cache: CacheSettings = Field(default_factory=CacheSettings)
    realtime: RealtimeSettings = Field(default_factory=RealtimeSettings)

    @model_validator(mode="after")
    def _aliases_name_known_engines(self) -> Settings:
        for alias, targets in self.aliases.items():
            if alias in self.engines:
                raise ValueError(f"alias {alias!r} has the name of an engine")
            unknown = [t for t in targets if t not in self.engines]
            if unknown or not targets:
                raise ValueError(f"alias {alias!r} must list configured engines, got unknown {unknown}")
        return self

    @model_validator(mode="after")
    def _tenants_are_sound(self) -> Settings:
        names = [tenant.name for tenant in self.auth.tenants]
        if len(set(names)) != len(names):
            raise ValueError("tenant names must be unique")
        if self.auth.required and not names and self.auth.admin_token is None:
            raise ValueError("auth.required is true but no tenants are configured (nor an admin token to add them)")
        known = set(self.engines) | set(self.aliases)
        for tenant in self.auth.tenants:
            unknown = sorted(set(tenant.models or ()) - known)
            if unknown:
                raise ValueError(f"tenant {tenant.name!r} allows unknown models {unknown}")
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Environment beats the YAML files (``yaml_file`` in the model config; later files deep-merge over earlier
        # ones, so a Secret can add tenants and tokens to a ConfigMap's settings), which beat the defaults.
        return init_settings, env_settings, YamlConfigSettingsSource(settings_cls, deep_merge=True)


def load_settings(config_files: Path | Sequence[Path] | None = None) -> Settings:
    """Build the settings from the environment and, when given, YAML files (later ones deep-merge over earlier)."""
    files = [config_files] if isinstance(config_files, Path) else list(config_files or ())
    for file in files:
        if not file.is_file():
            raise FileNotFoundError(f"config file not found: {file}")
    if not files:
        return Settings()

    class FileSettings(Settings):
        model_config = SettingsConfigDict(yaml_file=files)

    return FileSettings()
