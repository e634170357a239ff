"""Engine settings: the queue knobs every engine has, the pool knobs of local engines, and one options model per
kind, selected by ``kind``.

The gateway's settings (``gateway/settings/``) compose these; the engines never read anything else. Options are
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
    """Requests that may wait for a free slot (a place in a worker's batch, or among a remote endpoint's
    ``max_in_flight``); beyond it: ``503`` with ``Retry-After``."""
    queue_timeout_s: float = Field(default=30.0, gt=0)
    """How long a request may wait in the queue before it gets a 503."""
    scheduling: Scheduling = "fair"
    """Who of the waiting requests gets the next free slot (``engines/scheduling/``, the same for every kind).
    ``fair``: each tenant waits in its own queue; a tenant's ``scheduling.priority`` class is served strictly before
    lower ones, and within a class tenants get turns in proportion to their ``scheduling.weight`` (weighted fair
    queueing by work: a request costs the seconds of speech its text should make — syllables of words, one per CJK
    character, numbers as read out, pauses at punctuation — and when it ends the charge is corrected by the audio it
    actually made, so a tenant whose text makes more speech per character than the estimate says, or less, is charged
    what it used, and a cancelled request gives back what it did not use; counting the requests already running, so a
    tenant holding every worker goes behind one holding none; a tenant idle for a while starts even, with no saved-up
    credit). ``fifo``: one queue in arrival order, weights and priorities ignored (the old behaviour; the baseline of
    ``bench/fairness.py``). Tenants' ``max_queued`` caps apply either way. Watch it per tenant in
    ``tts_engine_tenant_queue_depth{engine,tenant}`` (waiting now) and
    ``tts_engine_queue_wait_seconds{engine,tenant}`` (histogram of waits for a worker, 503s included)."""
    reserved_slots: int = Field(default=1, ge=0)
    """At most this many free worker slots (workers x batch size) kept for tenants below their fair share of the
    engine. Every tenant holding or waiting for a slot, or expected back (within twice its usual time between
    requests, at most ``reservation_window_s``), has a share of the slots (by its ``scheduling.weight``, at least
    one); a tenant at or above its share gets a free slot only while more are free than the tenants not waiting now
    lack of theirs (tenants that are waiting take free slots in fair order), so a tenant that comes back while
    another floods the engine starts at once instead of waiting for a running job to end (jobs are not preempted). A
    tenant alone, tenants that all use their shares, or one that asked once lose nothing, and the last slot is never
    kept. The price: while a light tenant is between requests, the slot kept for it stays idle (for at most twice its
    time between requests). Only with ``scheduling: fair``; ``0`` hands every free slot to the next waiter."""
    reservation_window_s: float = Field(default=10.0, gt=0)
    """The longest a share is kept for a tenant that is not holding or waiting for a slot (a tenant asking every 2 s
    is expected back for 4 s; one asking every 30 s is not kept for)."""


class PoolSettings(QueueSettings):
    """An engine run by worker processes of this gateway: the queue knobs, the workers and their watchdogs."""

    workers: int = Field(default=1, ge=1, le=64)
    """Worker processes, each holding one engine instance (1 to 64)."""
    low_priority_workers: int = Field(default=0, ge=0, le=64)
    """More worker processes, kept for the engines' ``low`` priority class (speech jobs' segments, by
    ``jobs.priority``) and started at a lower CPU priority (nice +10): the ``low`` class then runs on these only, and
    every other request on the ``workers`` only. So an interactive request never waits for a job's segment to end
    (a segment on a worker is not preempted), and on a busy CPU the jobs' worker yields the cores to it, while on an
    idle one the jobs speak at full speed. While any other request is in flight, the ``low`` workers' audio is not
    read (they pause once their pipe is full) for at most 0.5 s at a time, then for as long it is: a steady stream of
    requests slows the jobs, never stops them. The built-in ``espeak`` engine has ``1`` (a process of a few MB);
    ``0`` (0 to 64): every class shares the ``workers``, a ``low`` request taking a free one when nobody else
    waits. See [jobs.md](jobs.md#how-tenants-share-the-runners)."""
    start_timeout_s: float = Field(default=120.0, gt=0)
    """How long a worker may take to load and warm up before it counts as failed."""
    warm_start: bool = True
    """Fork workers from a template process that has already imported the engine's modules (torch, transformers and
    ChatTTS for ``chattts``), so that a worker, and above all the replacement for a dead or hung one, pays only for
    loading its weights; ``false``: each worker starts as a fresh interpreter and imports everything itself. See
    [Warm worker starts](configuration.md#warm-worker-starts)."""
    stall_timeout_s: float = Field(default=30.0, gt=0)
    """A worker whose running request produces no audio for this long is killed and replaced (watchdog)."""
    cancel_timeout_s: float = Field(default=3.0, gt=0)
    """A worker still busy this long after its request was cancelled is killed and replaced."""
    health_interval_s: float = Field(default=5.0, gt=0)
    """Idle workers are pinged this often; one that does not answer within the interval is replaced."""
    max_buffered_audio_s: float = Field(default=120.0, gt=0)
    """Audio seconds buffered for a client that reads slower than the engine speaks before the request is dropped."""
    breaker: BreakerSettings = Field(default_factory=BreakerSettings)
    """The engine's circuit breaker: after ``failures`` failed jobs (a worker died, the engine failed) within
    ``window_s`` the gateway stops sending it requests for ``open_s`` (aliases fall through to their next engine),
    then lets ``half_open_probes`` requests try it again."""


class ChatTTSEngineSettings(PoolSettings):
    kind: Literal["chattts"]
    """``chattts``, ``espeak``, ``synthetic``, or ``openai`` (a remote engine: no worker processes, see [``kind:
    openai``](configuration.md#kind-openai-options))."""
    options: ChatTTSOptions = Field(default_factory=ChatTTSOptions)
    """Options of the engine kind, below (all have defaults but ``kind: openai``'s ``endpoints``)."""


class EspeakEngineSettings(PoolSettings):
    kind: Literal["espeak"]
    """``chattts``, ``espeak``, ``synthetic``, or ``openai`` (a remote engine: no worker processes, see [``kind:
    openai``](configuration.md#kind-openai-options))."""
    options: EspeakOptions = Field(default_factory=EspeakOptions)
    """Options of the engine kind, below (all have defaults but ``kind: openai``'s ``endpoints``)."""


class SyntheticEngineSettings(PoolSettings):
    """Deterministic tones, for tests and benchmarks."""

    kind: Literal["synthetic"]
    """``chattts``, ``espeak``, ``synthetic``, or ``openai`` (a remote engine: no worker processes, see [``kind:
    openai``](configuration.md#kind-openai-options))."""
    options: SyntheticOptions = Field(default_factory=SyntheticOptions)
    """Options of the engine kind, below (all have defaults but ``kind: openai``'s ``endpoints``)."""


class RemoteEngineSettings(QueueSettings):
    """Upstream servers that speak OpenAI's speech API (``engines.remote``): the queue knobs (a slot is a place among
    an endpoint's ``options.max_in_flight``) and the options; no worker processes, and a breaker per endpoint address
    (``options.breaker``)."""

    kind: Literal["openai"]
    """``chattts``, ``espeak``, ``synthetic``, or ``openai`` (a remote engine: no worker processes, see [``kind:
    openai``](configuration.md#kind-openai-options))."""
    options: OpenAIRemoteOptions
    """Options of the engine kind, below (all have defaults but ``kind: openai``'s ``endpoints``)."""


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
