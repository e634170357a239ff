"""Engine settings: the pool knobs every engine has, and one options model per kind, selected by ``kind``.

The gateway's settings (``gateway/settings.py``) compose these; the engines never read anything else. Options are
typed pydantic models, so values from environment variables (strings) are coerced and a typo or an out-of-range
value stops the start with a message naming the option, before a worker process exists.
"""

from __future__ import annotations

from typing import Annotated, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from engines.chattts.options import ChatTTSOptions
from engines.espeak.options import EspeakOptions
from engines.synthetic import SyntheticOptions

__all__ = [
    "AnyEngineSettings",
    "ChatTTSEngineSettings",
    "EngineSettings",
    "EspeakEngineSettings",
    "PoolSettings",
    "SyntheticEngineSettings",
    "engine_settings",
]


class PoolSettings(BaseModel):
    """How one engine's pool behaves: worker processes, its wait queue and its watchdogs."""

    model_config = ConfigDict(extra="forbid")

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


class ChatTTSEngineSettings(PoolSettings):
    kind: Literal["chattts"]
    options: ChatTTSOptions = Field(default_factory=ChatTTSOptions)


class EspeakEngineSettings(PoolSettings):
    kind: Literal["espeak"]
    options: EspeakOptions = Field(default_factory=EspeakOptions)


class SyntheticEngineSettings(PoolSettings):
    """Deterministic tones, for tests and benchmarks."""

    kind: Literal["synthetic"]
    options: SyntheticOptions = Field(default_factory=SyntheticOptions)


EngineSettings: TypeAlias = Annotated[
    ChatTTSEngineSettings | EspeakEngineSettings | SyntheticEngineSettings, Field(discriminator="kind")
]
"""One engine's settings; ``kind`` picks the model, and so the options it accepts."""

AnyEngineSettings: TypeAlias = ChatTTSEngineSettings | EspeakEngineSettings | SyntheticEngineSettings
_ENGINE_SETTINGS: TypeAdapter[AnyEngineSettings] = TypeAdapter(EngineSettings)


def engine_settings(**fields: object) -> AnyEngineSettings:
    """One engine's settings validated from plain values (``kind`` picks the model), for tests and benchmarks."""
    return _ENGINE_SETTINGS.validate_python(fields)
