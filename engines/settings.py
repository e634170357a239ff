"""Engine settings: the queue knobs every engine has, the pool knobs of local engines, and one options model per
kind, selected by ``kind``.

The gateway's settings (``gateway/settings.py``) compose these; the engines never read anything else. Options are
typed pydantic models, so values from environment variables (strings) are coerced and a typo or an out-of-range
value stops the start with a message naming the option, before a worker process exists.
"""

from __future__ import annotations

from typing import Annotated, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from engines.breaker import BreakerSettings
from engines.chattts.options import ChatTTSOptions
from engines.espeak.options import EspeakOptions
from engines.remote.options import OpenAIRemoteOptions
from engines.scheduling import Scheduling
from engines.synthetic import SyntheticOptions

__all__ = [
    "AnyEngineSettings",
    "ChatTTSEngineSettings",
    "EngineSettings",
    "EspeakEngineSettings",
    "LocalEngineSettings",
    "PoolSettings",
    "QueueSettings",
    "RemoteEngineSettings",
    "SyntheticEngineSettings",
    "engine_settings",
    "local_engine_settings",
]


class QueueSettings(BaseModel):
    """How one engine's requests wait for a free slot (a worker's batch place, or a remote endpoint's in-flight
    place), and who gets the next one (``engines.scheduling``): the knobs every engine kind has."""

    model_config = ConfigDict(extra="forbid")

    queue_size: int = Field(default=16, ge=0)
    """Requests allowed to wait for a free worker; beyond it the gateway answers 503 with Retry-After."""
    queue_timeout_s: float = Field(default=30.0, gt=0)
    """How long a request may wait in the queue before it gets a 503."""
    scheduling: Scheduling = "fair"
    """Who of the waiting requests gets the next free worker: ``fair`` (per-tenant queues, weighted fairly, priority
    classes first) or ``fifo`` (arrival order, one tenant can hold every worker: the baseline of bench/fairness.py)."""
    reserved_slots: int = Field(default=1, ge=0)
    """At most this many free worker slots are kept for tenants below their fair share of the engine. Every tenant
    holding or waiting for a slot, or expected back (within twice its usual time between requests, at most
    ``reservation_window_s``), has a share of the slots (workers x batch size, by weight, at least one); a tenant at
    or above its share gets a free slot only while more are free than the tenants not waiting lack, so a tenant that
    comes back while another floods the engine starts at once instead of waiting for a running job to end (no job is
    preempted). A tenant alone, tenants that all use their shares, or one that asked once lose nothing; the last slot
    is never kept. Only with ``scheduling: fair``; 0: the pool hands every free slot to the next waiter."""
    reservation_window_s: float = Field(default=10.0, gt=0)
    """The longest a share is kept for a tenant not here (a tenant asking every 2 s is expected back for 4 s)."""


class PoolSettings(QueueSettings):
    """An engine run by worker processes of this gateway: the queue knobs, the workers and their watchdogs."""

    workers: int = Field(default=1, ge=1, le=64)
    """Worker processes, each holding one engine instance."""
    start_timeout_s: float = Field(default=120.0, gt=0)
    """How long a worker may take to load and warm up before it counts as failed."""
    warm_start: bool = True
    """Fork workers from a template process that has already imported the engine's modules (torch and ChatTTS for
    ``chattts``), so that a replacement for a dead or hung worker loads only its weights; ``false``: every worker
    starts as a fresh interpreter and imports them itself. CUDA is never initialised before the fork."""
    stall_timeout_s: float = Field(default=30.0, gt=0)
    """A worker whose running request produces no audio for this long is killed and replaced (watchdog)."""
    cancel_timeout_s: float = Field(default=3.0, gt=0)
    """A worker that has not stopped this long after a cancellation is killed and replaced."""
    health_interval_s: float = Field(default=5.0, gt=0)
    """How often idle workers are pinged; one that does not answer within the interval is replaced."""
    max_buffered_audio_s: float = Field(default=120.0, gt=0)
    """Audio seconds buffered for a client that reads slower than the engine speaks before the request is dropped."""
    breaker: BreakerSettings = Field(default_factory=BreakerSettings)
    """The engine's circuit breaker: after ``failures`` failed jobs (a worker died, the engine failed) within
    ``window_s`` the gateway stops sending it requests for ``open_s`` (aliases fall through to their next engine),
    then lets ``half_open_probes`` requests try it again."""


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


class RemoteEngineSettings(QueueSettings):
    """Upstream servers that speak OpenAI's speech API (``engines.remote``): the queue knobs (a slot is a place among
    an endpoint's ``options.max_in_flight``) and the options; no worker processes, and a breaker per endpoint address
    (``options.breaker``)."""

    kind: Literal["openai"]
    options: OpenAIRemoteOptions


EngineSettings: TypeAlias = Annotated[
    ChatTTSEngineSettings | EspeakEngineSettings | SyntheticEngineSettings | RemoteEngineSettings,
    Field(discriminator="kind"),
]
"""One engine's settings; ``kind`` picks the model, and so the options it accepts."""

LocalEngineSettings: TypeAlias = ChatTTSEngineSettings | EspeakEngineSettings | SyntheticEngineSettings
"""The settings of an engine run by this gateway's worker processes (``engines.pool``)."""

AnyEngineSettings: TypeAlias = (
    ChatTTSEngineSettings | EspeakEngineSettings | SyntheticEngineSettings | RemoteEngineSettings
)
_ENGINE_SETTINGS: TypeAdapter[AnyEngineSettings] = TypeAdapter(EngineSettings)


def engine_settings(**fields: object) -> AnyEngineSettings:
    """One engine's settings validated from plain values (``kind`` picks the model), for tests and benchmarks."""
    return _ENGINE_SETTINGS.validate_python(fields)


def local_engine_settings(**fields: object) -> LocalEngineSettings:
    """``engine_settings`` of an engine run by worker processes (what ``engines.pool.EnginePool`` takes)."""
    settings = engine_settings(**fields)
    if isinstance(settings, RemoteEngineSettings):
        raise TypeError(f"a {settings.kind!r} engine has no worker processes")
    return settings
