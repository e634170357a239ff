"""The gateway's one settings object: environment variables (``TTS_GATEWAY_*``) over an optional YAML file.

Every field is documented in ``docs/configuration.md``; keep the two in step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, YamlConfigSettingsSource

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["EngineSettings", "ServerSettings", "Settings", "load_settings"]

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

    @model_validator(mode="after")
    def _aliases_name_known_engines(self) -> Settings:
        for alias, targets in self.aliases.items():
            if alias in self.engines:
                raise ValueError(f"alias {alias!r} has the name of an engine")
            unknown = [t for t in targets if t not in self.engines]
            if unknown or not targets:
                raise ValueError(f"alias {alias!r} must list configured engines, got unknown {unknown}")
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
        # Environment beats the YAML file (``yaml_file`` in the model config), which beats the defaults.
        return init_settings, env_settings, YamlConfigSettingsSource(settings_cls)


def load_settings(config_file: Path | None = None) -> Settings:
    """Build the settings from the environment and, when given, a YAML file."""
    if config_file is not None and not config_file.is_file():
        raise FileNotFoundError(f"config file not found: {config_file}")
    if config_file is None:
        return Settings()

    class FileSettings(Settings):
        model_config = SettingsConfigDict(yaml_file=config_file)

    return FileSettings()
