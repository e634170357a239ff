"""The one settings object, :class:`Settings`, its built-ins and its sources (see the package's docstring)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BeforeValidator, Field, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from auth.settings import AuthSettings, LimitsSettings
from engines.settings import (
    ChatTTSEngineSettings,
    EngineSettings,
    EspeakEngineSettings,
    RemoteEngineSettings,
    SyntheticEngineSettings,
)
from gateway.observability.tracing import TracingSettings
from gateway.uploads.settings import UploadSettings
from lifecycle import naming
from storage.settings import RedisPoolSettings

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pydantic.fields import FieldInfo
from gateway.settings.sections import (
    AliasSettings,
    CacheSettings,
    FailoverSettings,
    JobsSettings,
    PronunciationSettings,
    ReadinessSettings,
    RealtimeSettings,
    SpeechSettings,
    VoicesSettings,
    _usable_redis_url,
)
from gateway.settings.server import (
    ENGINE_NODE_MIN_BODY_BYTES,
    ServerSettings,
)

__all__ = [
    "BUILT_IN_ALIASES",
    "BUILT_IN_ENGINES",
    "BUILT_IN_MODEL_NAMES",
    "ELEVENLABS_MODEL_NAMES",
    "OPENAI_MODEL_NAMES",
    "Settings",
    "load_settings",
]


BUILT_IN_ENGINES: dict[str, dict[str, Any]] = {
    "chattts": {"kind": "chattts"},
    "espeak": {"kind": "espeak", "low_priority_workers": 1},
}
_ENGINE_FIELDS: dict[str, frozenset[str]] = {
    kind: frozenset(model.model_fields)
    for kind, model in (
        ("chattts", ChatTTSEngineSettings),
        ("espeak", EspeakEngineSettings),
        ("synthetic", SyntheticEngineSettings),
        ("openai", RemoteEngineSettings),
    )
}
"""The settings each engine kind takes."""
#: OpenAI's model names, dated snapshots included (a client pinned to one keeps working): ChatTTS, else espeak. The
#: speech models, then the Realtime models OpenAI sends speech callers to when the speech models retire (2027-01-06):
#: on ``/v1/realtime`` (and ``/v1/audio/speech`` alike) they are aliases like any other.
OPENAI_MODEL_NAMES = (
    "tts-1",
    "tts-1-hd",
    "tts-1-1106",
    "tts-1-hd-1106",
    "gpt-4o-mini-tts",
    "gpt-4o-mini-tts-2025-03-20",
    "gpt-4o-mini-tts-2025-12-15",
    "gpt-realtime",
    "gpt-realtime-2025-08-28",
    "gpt-realtime-1.5",
    "gpt-realtime-2",
    "gpt-realtime-2.1",
    "gpt-realtime-2.1-mini",
    "gpt-realtime-mini",
    "gpt-realtime-mini-2025-10-06",
    "gpt-realtime-mini-2025-12-15",
)
#: ElevenLabs' model ids (its ``model_id``), so that a client written for ElevenLabs keeps its own: the same engines.
ELEVENLABS_MODEL_NAMES = (
    "eleven_multilingual_v2",
    "eleven_flash_v2_5",
    "eleven_turbo_v2_5",
    "eleven_v3",
    "eleven_v3_conversational",
    "eleven_v4",
    "eleven_v4_turbo",
    "eleven_monolingual_v1",
    "eleven_multilingual_v1",
    "eleven_flash_v2",
    "eleven_turbo_v2",
)
#: Every built-in alias: OpenAI's names, then ElevenLabs' (the Helm chart's values.yaml and _helpers.tpl mirror them).
BUILT_IN_MODEL_NAMES = OPENAI_MODEL_NAMES + ELEVENLABS_MODEL_NAMES
BUILT_IN_ALIASES: dict[str, list[str]] = {name: ["chattts", "espeak"] for name in BUILT_IN_MODEL_NAMES}


class _BuiltIns(PydanticBaseSettingsSource):
    """The built-in engines and aliases, as a settings source below every other one."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ returns the whole mapping

    def __call__(self) -> dict[str, Any]:
        # Aliases in the mapping form, so that a file or variable setting only ``spill_on_overload`` merges into them.
        aliases = {name: {"engines": list(engines)} for name, engines in BUILT_IN_ALIASES.items()}
        return {"engines": copy.deepcopy(BUILT_IN_ENGINES), "aliases": aliases}


def _without_removed(value: object) -> object:
    """Entries set to ``null`` (YAML) or ``"null"`` (an environment variable) remove a built-in one."""
    if not isinstance(value, dict):
        return value
    return {name: entry for name, entry in value.items() if entry is not None and entry != "null"}


def _engines_as_given(value: object) -> object:
    """Engines without the removed ones; a built-in engine redefined as another kind keeps no setting of the built-in
    that its kind does not take (``espeak`` as ``kind: openai`` gets no ``low_priority_workers``)."""
    kept = _without_removed(value)
    if not isinstance(kept, dict):
        return kept
    for name, built_in in BUILT_IN_ENGINES.items():
        entry = kept.get(name)
        if isinstance(entry, dict) and entry.get("kind", built_in["kind"]) != built_in["kind"]:
            taken = _ENGINE_FIELDS.get(str(entry.get("kind")), frozenset(entry))
            kept[name] = {key: item for key, item in entry.items() if key in taken or key not in built_in}
    return kept


def _aliases_as_mappings(value: object) -> object:
    """Aliases without the removed ones, each in the mapping form (the list form is short for ``{engines: [...]}``)."""
    kept = _without_removed(value)
    if not isinstance(kept, dict):
        return kept
    return {name: {"engines": entry} if isinstance(entry, list | tuple) else entry for name, entry in kept.items()}


class Settings(BaseSettings):
    """Everything the gateway is configured with, built once at start and injected where needed."""

    model_config = SettingsConfigDict(env_prefix=naming.ENV_PREFIX, env_nested_delimiter="__", extra="forbid")

    server: ServerSettings = Field(default_factory=ServerSettings)
    """The HTTP server."""
    engines: Annotated[dict[str, EngineSettings], BeforeValidator(_engines_as_given)] = Field(default_factory=dict)
    """Engines by the model name clients use for them directly (built in: ``chattts``, ``espeak``)."""
    aliases: Annotated[dict[str, AliasSettings], BeforeValidator(_aliases_as_mappings)] = Field(default_factory=dict)
    """Model names that route to engines: a list of engines (the first ready one serves the request, the next ones
    take over when it fails before the first audio), or ``{engines: [...], fallback: bool, spill_on_overload: bool}``
    (``fallback: false``: the first engine only)."""
    failover: FailoverSettings = Field(default_factory=FailoverSettings)
    """Retrying a request that failed before its first audio."""
    readiness: ReadinessSettings = Field(default_factory=ReadinessSettings)
    """What ``/readyz`` waits for."""
    redis_url: str | None = Field(default=None, repr=False)  # its password must not reach a log through a repr
    """Where limits, cache, keys, voices and usage live, shared by every replica: one Redis
    ``redis://[[user]:password@]host:port/db`` (``rediss://`` for TLS, ``unix:///path/to/redis.sock``), the master of a
    Sentinel set-up ``redis+sentinel://[[user]:password@]h1:p1,h2:p2/service[/db]`` or a Redis Cluster
    ``redis+cluster://[[user]:password@]h1:p1,h2:p2`` (each with a ``rediss+`` TLS variant), with query options
    ``sentinel_password``, ``sentinel_username``, ``db`` and, over TLS, ``ssl_ca_certs``, ``ssl_certfile``,
    ``ssl_keyfile``, ``ssl_cert_reqs``, ``ssl_check_hostname`` (``storage/redis_url.py``). Checked at load; the
    password never appears in logs or errors. Unset: each replica keeps them in its own memory."""
    redis_pool: RedisPoolSettings = Field(default_factory=RedisPoolSettings)
    """The connections of this process's Redis client (``redis_url``'s; a ``cache.redis_url`` client of its own
    keeps the defaults)."""
    auth: AuthSettings = Field(default_factory=AuthSettings)
    """Tenants, API keys, JWTs, the admin and service tokens."""
    limits: LimitsSettings = Field(default_factory=LimitsSettings)
    """How per-tenant limits behave when Redis is out of reach."""
    cache: CacheSettings = Field(default_factory=CacheSettings)
    """The audio cache."""
    speech: SpeechSettings = Field(default_factory=SpeechSettings)
    """How a long input is scheduled."""
    realtime: RealtimeSettings = Field(default_factory=RealtimeSettings)
    """The realtime WebSocket endpoints."""
    jobs: JobsSettings = Field(default_factory=JobsSettings)
    """Long inputs spoken in the background (``/v1/audio/speech/jobs``)."""
    voices: VoicesSettings = Field(default_factory=VoicesSettings)
    """Custom voices and consent recordings."""
    pronunciation: PronunciationSettings = Field(default_factory=PronunciationSettings)
    """Per-tenant pronunciation dictionaries."""
    uploads: UploadSettings = Field(default_factory=UploadSettings)
    """Decoding uploaded recordings apart from the server, and what uploads may hold."""
    tracing: TracingSettings = Field(default_factory=TracingSettings)
    """W3C trace context in logs and across tiers; OpenTelemetry spans over OTLP."""

    _redis_url_is_usable = field_validator("redis_url")(_usable_redis_url)

    @model_validator(mode="after")
    def _aliases_name_known_engines(self) -> Settings:
        self._prune_built_in_aliases()
        for alias, settings in self.aliases.items():
            if alias in self.engines:
                raise ValueError(f"alias {alias!r} has the name of an engine")
            targets = settings.engines
            unknown = [t for t in targets if t not in self.engines]
            if unknown or not targets:
                raise ValueError(f"alias {alias!r} must list configured engines, got unknown {unknown}")
        return self

    def _prune_built_in_aliases(self) -> None:
        """A built-in alias left as it is follows the removal of a built-in engine (and goes when none is left)."""
        for alias, settings in list(self.aliases.items()):
            if settings.engines == BUILT_IN_ALIASES.get(alias):
                kept = [target for target in settings.engines if target in self.engines]
                if kept:
                    settings.engines = kept
                else:
                    del self.aliases[alias]

    @model_validator(mode="after")
    def _engine_profile_is_sound(self) -> Settings:
        if self.server.profile != "engine":
            return self
        auth = self.auth
        if auth.service_token is None:
            raise ValueError("server.profile engine needs auth.service_token (the front gateway's api_key)")
        if auth.tenants or auth.admin_token is not None or auth.jwt is not None:
            raise ValueError(
                "server.profile engine takes only auth.service_token: tenants, admin_token and jwt "
                "belong to the front gateway"
            )
        # A node must take the largest body a front sends: the longest input and instructions and a custom voice's
        # speaker (engines/remote/context.py), which a front gateway's own callers could not send it.
        self.server.max_body_bytes = max(self.server.max_body_bytes, ENGINE_NODE_MIN_BODY_BYTES)
        return self

    @model_validator(mode="after")
    def _readiness_names_known_engines(self) -> Settings:
        unknown = sorted(set(self.readiness.engines or ()) - set(self.engines))
        if unknown:
            raise ValueError(f"readiness.engines must list configured engines, got unknown {unknown}")
        return self

    @model_validator(mode="after")
    def _tenants_name_known_models(self) -> Settings:
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
        # ones, so a Secret can add tenants and tokens to a ConfigMap's settings), which beat the built-ins; every
        # source deep-merges into the ones below it. The former prefix is read beneath the new one, so a deployment's
        # environment keeps working and a variable under the new name wins over its former one.
        return (
            init_settings,
            env_settings,
            EnvSettingsSource(settings_cls, env_prefix=naming.FORMER_ENV_PREFIX),
            YamlConfigSettingsSource(settings_cls, deep_merge=True),
            _BuiltIns(settings_cls),
        )


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
