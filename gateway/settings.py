"""The gateway's one settings object: environment variables (``TTS_GATEWAY_*``) over YAML files over built-ins.

It composes the settings each part owns: ``engines.settings`` (engines), ``auth.settings`` (tenants, limits, JWTs);
the HTTP server, cache and realtime settings are the gateway's own.

Every field is documented in ``docs/configuration.md``; ``tests/unit/test_configuration_reference.py`` fails when
the two disagree.
"""

from __future__ import annotations

import copy
import ipaddress
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, YamlConfigSettingsSource

from auth.settings import AuthSettings, LimitsSettings, VoiceAliases
from engines.settings import EngineSettings
from gateway.observability.tracing import TracingSettings
from gateway.uploads.settings import UploadSettings
from storage.redis_url import parse_redis_url
from storage.settings import RedisPoolSettings

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pydantic.fields import FieldInfo

__all__ = [
    "BUILT_IN_ALIASES",
    "BUILT_IN_ENGINES",
    "BUILT_IN_MODEL_NAMES",
    "ELEVENLABS_MODEL_NAMES",
    "OPENAI_MODEL_NAMES",
    "AliasSettings",
    "CacheSettings",
    "FailoverSettings",
    "JobsSettings",
    "PronunciationSettings",
    "ReadinessSettings",
    "RealtimeSettings",
    "ServerSettings",
    "Settings",
    "SpeechSettings",
    "VoicesSettings",
    "load_settings",
]


ENGINE_NODE_MIN_BODY_BYTES = 128 * 1024
"""The least ``server.max_body_bytes`` of an engine node: 4,096 characters of input and of instructions (16 KiB each
at most in UTF-8) and a speaker of 16,384 characters (48 KiB), with room to spare."""


class ServerSettings(BaseModel):
    """HTTP server knobs."""

    model_config = ConfigDict(extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    tls_certfile: Path | None = None
    """PEM certificate (its chain after it) to serve HTTPS and WSS with, with ``tls_keyfile``; unset: plain HTTP."""
    tls_keyfile: Path | None = Field(default=None, repr=False)
    """The certificate's PEM private key (unencrypted); both or neither."""
    max_body_bytes: int = Field(default=64 * 1024, ge=1024)
    """Largest request body accepted; larger ones get 413. An engine node takes at least 128 KiB (what a front sends
    at most: the longest input and instructions and a custom voice's speaker)."""
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    shutdown_grace_s: int = Field(default=30, ge=0)
    """On SIGTERM: stop accepting, let in-flight streams finish for up to this long, then stop the engines."""
    send_timeout_s: float = Field(default=30.0, gt=0)
    """A client that leaves one write of its response unread this long counts as gone: the response is abandoned,
    releasing its stream lease and synthesis (``gateway/http/backpressure.py``)."""
    playground: bool = True
    """Serve the playground page at / and /playground"""
    profile: Literal["gateway", "engine"] = "gateway"
    """``engine``: serve as the engine tier behind another gateway (its ``kind: openai`` engine): every request needs
    ``auth.service_token``; no tenants, limits, audio cache, custom voices or admin API of its own."""
    max_header_bytes: int = Field(default=16 * 1024, ge=1024, le=1024 * 1024)
    """Largest request head (request line and headers) accepted; larger ones get 431 and the connection is closed."""
    max_headers: int = Field(default=100, ge=8, le=10_000)
    """Most header lines in one request; more get 431."""
    header_timeout_s: float = Field(default=10.0, gt=0)
    """Time a connection has to deliver a complete request head, from its first byte (or, on a new connection, from
    the connect); then 408 and the connection is closed. Idle and slow ("slowloris") sockets cannot pile up."""
    body_min_rate_bytes_per_s: int = Field(default=1024, ge=1)
    """Least rate a request body must keep arriving at, measured over each ``body_rate_interval_s`` from the end of its
    head: an interval that brings fewer than this rate times its length (and does not end the body) gets 408 and the
    connection is closed. A body dripped a byte at a time ("slow POST") is cut after one interval, while a large body
    on a slow but honest link takes as long as it needs. An interval in which the server itself is not reading (the
    application has not asked for the body yet: ``Expect: 100-continue``, or its buffer is full) is not counted."""
    body_rate_interval_s: float = Field(default=10.0, gt=0)
    """The interval over which ``body_min_rate_bytes_per_s`` is measured; the first one is the body's grace for its
    first bytes. Shorter cuts a dripping body sooner; longer forgives a link that stalls for a while and catches up."""
    body_timeout_s: float | None = Field(default=None, gt=0)
    """Optional bound on the whole body's time, however fast it arrives: then 408 and the connection is closed.
    ``None`` (the default): no bound but the minimum rate, which holds a body's time to its size over
    ``body_min_rate_bytes_per_s`` and one interval, so a 10 MiB voice sample on a slow link is not cut at an arbitrary
    total. (Before the minimum rate this was the only body deadline, 30 s: configurations that set it keep it.)"""
    keep_alive_timeout_s: int = Field(default=5, ge=1)
    """An idle keep-alive connection (between requests) is closed after this long."""
    max_connections_per_address: int = Field(default=256, ge=1)
    """Open connections one client address may hold, HTTP and realtime WebSockets alike (an upgraded WebSocket counts
    until it closes); one more gets 429 with ``Retry-After`` as soon as it sends its request, so one address cannot
    take the connections everyone else needs. An IPv6 client counts by its /64 network (one host commonly holds a
    whole /64). A connection from one of ``trusted_proxies`` counts against the client its latest request was
    forwarded for (``X-Forwarded-For``), not against the proxy."""
    max_auth_failures_per_address: int = Field(default=20, ge=1)
    """Credentials (API keys, JWTs) one client address may present and have refused within ``auth_failure_window_s``.
    Beyond it, a request or realtime socket from that address carrying a credential that has not authenticated on this
    replica (the last 10,000 that did are remembered) gets 429 with ``Retry-After`` before any store lookup, so a flood
    of guessed keys costs no Redis round trip; a tenant whose key has authenticated here (from anywhere) goes on being
    served from the same address (a shared NAT), so a stranger's guesses do not lock it out. Requests without a
    credential are not counted (a 401 for them costs nothing). The address is taken from ``X-Forwarded-For`` only by
    ``trusted_proxies``'s rule."""
    auth_failure_window_s: int = Field(default=60, ge=1)
    """The moving window over which ``max_auth_failures_per_address`` counts refused credentials."""
    max_connections: int = Field(default=1000, ge=1)
    """Open connections (HTTP and WebSocket) the server holds. At the cap the oldest connection without a request in
    progress (idle, or still sending its head) is closed to make room; when every one is busy, the new connection gets
    503 with ``Retry-After``. Lowered at start to fit the open-file limit (``ulimit -n``)."""
    max_json_depth: int = Field(default=32, ge=2, le=512)
    """Deepest nesting of arrays and objects in a JSON request body; deeper bodies get 400."""
    trusted_proxies: list[str] = Field(default_factory=list)
    """Addresses or networks (``10.0.0.0/8``) of the reverse proxies in front of the gateway: only for a connection
    from one of them are ``X-Forwarded-For`` and ``X-Forwarded-Proto`` believed, and the client's address (what every
    per-address limit counts under, the admin throttle's, the logs') taken from them: the last address in
    ``X-Forwarded-For`` that is not a trusted proxy's, so a client's own forged entries, which come before its proxy's,
    are never taken. Empty: forwarding headers are ignored, so nobody can forge an address."""

    @field_validator("trusted_proxies")
    @classmethod
    def _proxies_are_addresses(cls, proxies: list[str]) -> list[str]:
        for proxy in proxies:
            try:
                ipaddress.ip_network(proxy, strict=False)
            except ValueError:
                raise ValueError(f"{proxy!r} is not an IP address or network") from None
        return proxies

    @model_validator(mode="after")
    def _tls_has_both_files(self) -> ServerSettings:
        if (self.tls_certfile is None) != (self.tls_keyfile is None):
            raise ValueError("tls_certfile and tls_keyfile go together: give both, or neither for plain HTTP")
        return self


def _usable_redis_url(url: str | None) -> str | None:
    """A URL the gateway cannot use fails at start, not at the first request; the message hides its password."""
    if url is not None:
        parse_redis_url(url)
    return url


class CacheSettings(BaseModel):
    """The audio cache: in Redis when ``cache.redis_url`` or ``redis_url`` is set, else in this process's memory."""

    model_config = ConfigDict(extra="forbid")

    _redis_url_is_usable = field_validator("redis_url")(_usable_redis_url)

    enabled: bool = True
    """Store finished audio and answer repeats from it (identical requests in flight share one synthesis anyway)."""
    ttl_s: int = Field(default=24 * 3600, ge=1)
    """How long an entry lives."""
    max_entry_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    """Larger results are not stored (in Redis, neither are results over a sixteenth of ``max_redis_bytes``)."""
    redis_url: str | None = Field(default=None, repr=False)  # its password must not reach a log through a repr
    """A Redis of the cache's own (same URL forms as ``redis_url``), so that audio never takes the room of API keys,
    tenants, voices and usage; it may use any ``maxmemory-policy``, ``allkeys-lru`` included. Unset: the cache shares
    ``redis_url``'s Redis (within ``max_redis_bytes``)."""
    max_redis_bytes: int | None = Field(default=None, ge=65536)
    """The bytes of Redis memory the cache's entries may take, enforced by the gateway (the oldest entries go first,
    whatever their TTL). Unset: half of the Redis's ``maxmemory`` (three quarters with a ``cache.redis_url`` of its
    own), read at start, or 256 MiB when the Redis has no ``maxmemory`` or does not tell it."""
    max_memory_entries: int = Field(default=1024, ge=1)
    """Entries kept by the in-memory cache (least recently used go first)."""
    shared_across_tenants: bool = False
    """Let tenants hit each other's entries. Off by default: a hit would tell one tenant what another asked for."""


class SpeechSettings(BaseModel):
    """``POST /v1/audio/speech``: how a long input is scheduled (``gateway/speech/segments.py``)."""

    model_config = ConfigDict(extra="forbid")

    max_segment_chars: int = Field(default=300, ge=20, le=4096)
    """A longer input is spoken in segments of at most this many characters (whole sentences where they fit, else
    cut at a clause or word), one engine job each, one after the other: between two segments the engine's slot goes
    back to its scheduler, so a long input holds it for one segment at a time while other requests wait. The audio
    still streams as one. 4096 (the longest input) turns segmenting off."""
    max_input_chars: int = Field(default=4096, ge=4096, le=100_000)
    """The most any tenant's ``limits.speech_input_characters`` may allow on ``POST /v1/audio/speech`` (whatever a
    tenant says, its cap is at most this); above 4096 the route also takes bodies of up to six bytes per character of
    it (JSON's longest spelling of one) beyond ``server.max_body_bytes``."""
    max_whole_audio_s: float = Field(default=600.0, ge=1.0, le=7200.0)
    """The longest audio a whole (not streamed) response holds: ElevenLabs' text-to-speech, its ``/with-timestamps``
    and its text-to-dialogue answer ``400`` ``audio_too_long`` once a request's audio passes it (its synthesis
    stopped there), so that one request holds at most this much audio in memory (48 KB of 24 kHz PCM a second, its
    encoding beside it, a third more again as base64). The streaming routes hold none of it."""


class JobsSettings(BaseModel):
    """Speech jobs (``POST /v1/audio/speech/jobs``, ``docs/jobs.md``): long inputs spoken in the background, segment by
    segment, their progress committed per segment so that another replica resumes a job whose replica died."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    """Serve the jobs routes (a front gateway only; an engine node never does)."""
    run: bool = True
    """This replica runs jobs (takes them from the queue). ``false``: it accepts jobs and serves their progress and
    audio, and another deployment of the gateway with ``run: true`` speaks them (Helm: ``jobs.runner: dedicated``).
    Without ``redis_url`` every replica runs its own jobs, whatever this says."""
    concurrency: int = Field(default=2, ge=1, le=256)
    """Segments one replica speaks at once: its jobs take turns at these slots, one segment a turn, tenant by tenant
    (``gateway/jobs/turns.py``)."""
    max_in_progress: int = Field(default=32, ge=1, le=4096)
    """Jobs one replica holds at once (with Redis), each waiting for its tenant's turns at the ``concurrency`` slots.
    Once it holds ``concurrency`` jobs it takes only jobs of tenants it holds none of, so that a tenant's flood neither
    keeps another tenant's job queued nor gathers on one replica."""
    max_followers_per_tenant: int = Field(default=32, ge=1, le=100_000)
    """Event streams (``/events``) one tenant may have open at once on one replica; one more gets 429. Followers of
    one job share one poll of the store per replica, whatever their number."""
    max_input_chars: int = Field(default=500_000, ge=1, le=5_000_000)
    """The longest ``input`` of a job, unless the tenant's ``limits.job_input_characters`` says otherwise."""
    storage_quota_bytes: int = Field(default=2 * 1024**3, ge=0)
    """The audio one tenant's jobs may keep stored at once, unless the tenant's ``limits.job_storage_bytes`` says
    otherwise: a new job is refused (429) while the tenant's stored results reach it."""
    max_jobs_per_tenant: int = Field(default=1000, ge=1, le=100_000)
    """Jobs (of any status, until they expire or are deleted) one tenant may hold; one more gets 429."""
    ttl_s: int = Field(default=24 * 3600, ge=1)
    """How long a job's audio is kept after it ended (and how long a job may take: its first segments expire after
    this long). Its record says ``expired`` for as long again, then the job is gone (404)."""
    priority: Literal["high", "normal", "low"] | None = "low"
    """The engines' priority class of job segments (``engines/scheduling``): ``low`` lets every interactive request,
    the same tenant's included, go first. ``None``: the tenant's own class (``scheduling.priority``), where its jobs
    and its interactive requests take turns fairly."""
    heartbeat_s: int = Field(default=10, ge=1)
    """A running job's replica proves it is alive at least this often; a job without a sign for this long is taken
    over by another replica, from its last committed segment."""
    sweep_s: int = Field(default=5, ge=1)
    """How often one of the replicas looks for jobs whose replica died."""
    poll_s: float = Field(default=0.25, gt=0, le=5)
    """How often a reader following a job (its audio or its events) looks for new segments."""
    directory: Path | None = None
    """Keep the jobs' audio as files in this directory, one per segment, instead of in Redis: a volume every replica
    mounts (a ReadWriteMany PersistentVolumeClaim); records and progress stay in Redis. Every replica removes the
    files of expired jobs every ``min(ttl_s, 600)`` seconds. Needs ``redis_url`` (ignored without it)."""
    segment_chars: int = Field(default=1200, ge=20, le=4096)
    """A job is spoken and committed in segments of at most this many characters (whole sentences where they fit),
    each one call of the speech service, which speaks it in engine jobs of ``speech.max_segment_chars`` as any long
    input: what a replica that dies loses, and how often a follower sees progress. Smaller costs throughput (each
    call has its own planning and worker hand-over: 300 made a 100,000-character espeak job 0.67x as fast as the same
    text in 4,096-character requests, on a loaded machine)."""
    segment_attempts: int = Field(default=3, ge=1, le=10)
    """Tries of one segment that failed (an engine error) before the job fails."""


class RealtimeSettings(BaseModel):
    """The realtime WebSocket endpoints, ``/v1/audio/speech/stream`` and OpenAI's ``/v1/realtime`` (see
    ``docs/realtime.md``)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    max_segment_chars: int = Field(default=300, ge=20, le=4096)
    """A sentence longer than this is cut at a clause or word boundary, so that speech can start sooner."""
    max_pending_chars: int = Field(default=4096, ge=1, le=65536)
    """Text appended but not yet spoken, per session; an append beyond it is refused with an error event."""
    auth_timeout_s: float = Field(default=5.0, gt=0)
    """How long a socket without credentials may take to send its first message (which must carry them)."""
    max_unauthenticated: int = Field(default=32, ge=0)
    """Sockets that may wait at once for their first message's credentials (browsers cannot send a header); one more
    is refused at once (close code 1013, try again later), so sockets that never authenticate cannot hold the
    connections callers with credentials need. Credentials in the ``Authorization`` header never wait."""
    max_unauthenticated_per_address: int = Field(default=4, ge=0)
    """Of ``max_unauthenticated``, the sockets one client address may have waiting at once (an IPv6 client counts by
    its /64); one more from it is refused the same way, so one address cannot take every waiting place and shut the
    browsers of everyone else out."""
    idle_timeout_s: float = Field(default=300.0, gt=0)
    """A session with no client event and nothing to speak for this long is closed, freeing its stream lease."""
    first_message_wait_s: float = Field(default=0.25, ge=0, le=5)
    """How long a session waits for the client's first message before it sends ``session.created``. That message
    chooses the dialect, and vLLM-Omni's clients (whose ``session.config`` comes first) expect no greeting; a client
    that waits for ``session.created`` gets it this much later. 0 greets at once."""
    max_socket_messages_per_s: float = Field(default=200.0, gt=0)
    """Messages a client may send on one realtime socket a second, on every protocol (``gateway/realtime/budget.py``);
    ``socket_burst_s`` of them at once. One more: the protocol's error (``rate_limit_exceeded``), then close 1008."""
    max_socket_bytes_per_s: int = Field(default=256 * 1024, ge=1024)
    """Bytes a client may send on one realtime socket a second (the server's echoes of what it sent count too);
    ``socket_burst_s`` of them at once, and at least one message of ``server.max_body_bytes``. Over it, as above."""
    socket_burst_s: float = Field(default=2.0, gt=0, le=60)
    """How many seconds of the two socket rates a client may send at once, after a pause."""
    max_conversation_chars: int = Field(default=32768, ge=4096, le=1048576)
    """Characters of text one ``/v1/realtime`` conversation keeps: older items drop to make room (as past 64 items);
    an item longer than this alone is refused with an ``error`` event."""


class FailoverSettings(BaseModel):
    """Retrying a request that failed before its first audio (``gateway/speech/failover.py``)."""

    model_config = ConfigDict(extra="forbid")

    same_engine_attempts: int = Field(default=2, ge=1, le=10)
    """Tries on one engine (each on the worker or endpoint the engine hands out then) before the next engine of the
    alias; 1 means no retry on the same engine."""
    deadline_s: float = Field(default=30.0, gt=0)
    """From the start of the first try: no try starts later, and a try still waiting for its first audio then is
    abandoned (the client gets the last error)."""


class AliasSettings(BaseModel):
    """One alias: the engines behind a model name, in order of preference, and whether the next ones may answer."""

    model_config = ConfigDict(extra="forbid")

    engines: list[str]
    """Engine names: a request goes to the first; with ``fallback``, to the first that can serve it, failing over
    down the list."""
    fallback: bool = True
    """Whether the engines after the first may answer: when the first is not ready (starting, unavailable, stopped,
    breaker open) or fails before its first audio. Off: the alias speaks with its first engine only (its retries stay
    on it) and answers 503 with ``Retry-After`` while that engine is not ready; ``/readyz`` then waits for it."""
    spill_on_overload: bool = False
    """When the engine is overloaded (every worker busy, queue full), try the next engine instead of a 503. Off by
    default: spilling from ChatTTS to espeak changes the voice. Needs ``fallback``."""

    @model_validator(mode="after")
    def _spill_needs_fallback(self) -> AliasSettings:
        if self.spill_on_overload and not self.fallback:
            raise ValueError("spill_on_overload needs fallback: without it an alias never leaves its first engine")
        return self


class ReadinessSettings(BaseModel):
    """What ``/readyz`` (a pod's readiness) waits for, besides Redis when the limits fail closed without it."""

    model_config = ConfigDict(extra="forbid")

    engines: list[str] | None = Field(default=None, min_length=1)
    """Engines that must all be ready. ``None``: every alias must be answerable (its first engine ready, or any of
    its engines for an alias with ``fallback``); with no alias, every engine."""


class VoicesSettings(BaseModel):
    """Custom voices (``/v1/audio/voices``) and consent recordings (``/v1/audio/voice_consents``): how many a tenant
    may keep and how large a speaker may be."""

    model_config = ConfigDict(extra="forbid")

    max_per_tenant: int = Field(default=20, ge=0)
    """Custom voices a tenant may have at once (20, as OpenAI); creating one more is refused (400,
    ``voice_limit_reached``)."""
    max_consents_per_tenant: int = Field(default=20, ge=0)
    """Consent recordings a tenant may keep at once; uploading one more is refused (400, ``consent_limit_reached``).
    Each is kept as at most 30 s of 16 kbit/s Opus (about 60 KB)."""
    aliases: VoiceAliases = Field(default_factory=dict)
    """Voice names and ids callers send, each mapped to the voice that speaks it (a built-in voice of the model's
    engine, or a tenant's custom voice by ``voice_…`` id), for every tenant and every API: over ElevenLabs' premade
    ids (``gateway/speech/voice_aliases.py``), under a tenant's own ``voice_aliases``."""
    max_speaker_chars: int = Field(default=16384, ge=1, le=16384)
    """Longest ``speaker`` accepted (400 beyond it); ChatTTS's full-size speakers are 862 characters. 16384 is
    also the API's own ceiling."""


class PronunciationSettings(BaseModel):
    """Pronunciation dictionaries (``/v1/pronunciation-dictionaries``): how many a tenant may keep and how large."""

    model_config = ConfigDict(extra="forbid")

    max_dictionaries_per_tenant: int = Field(default=20, ge=0)
    """Dictionaries a tenant may keep at once; creating one more is refused (400,
    ``pronunciation_dictionary_limit_reached``)."""
    max_rules_per_dictionary: int = Field(default=1000, ge=1, le=100_000)
    """Rules one version of a dictionary may hold (400 beyond it). Matching costs the same whatever their number
    (linear in the text); compiling a version's rules is done once per replica."""
    max_file_bytes: int = Field(default=1_048_576, ge=1024, le=16_777_216)
    """Largest PLS file ``add-from-file`` reads (400 beyond it); its body may hold this and 64 KiB more, whatever
    ``server.max_body_bytes`` (413 beyond)."""


#: The engines and aliases every gateway starts from: the lowest-priority settings source, so YAML files and
#: environment variables merge into them (``engines: {chattts: null}`` removes one).
BUILT_IN_ENGINES: dict[str, dict[str, Any]] = {"chattts": {"kind": "chattts"}, "espeak": {"kind": "espeak"}}
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


def _aliases_as_mappings(value: object) -> object:
    """Aliases without the removed ones, each in the mapping form (the list form is short for ``{engines: [...]}``)."""
    kept = _without_removed(value)
    if not isinstance(kept, dict):
        return kept
    return {name: {"engines": entry} if isinstance(entry, list | tuple) else entry for name, entry in kept.items()}


class Settings(BaseSettings):
    """Everything the gateway is configured with, built once at start and injected where needed."""

    model_config = SettingsConfigDict(env_prefix="TTS_GATEWAY_", env_nested_delimiter="__", extra="forbid")

    server: ServerSettings = Field(default_factory=ServerSettings)
    engines: Annotated[dict[str, EngineSettings], BeforeValidator(_without_removed)] = Field(default_factory=dict)
    """Engines by the model name clients use for them directly (built in: ``chattts``, ``espeak``)."""
    aliases: Annotated[dict[str, AliasSettings], BeforeValidator(_aliases_as_mappings)] = Field(default_factory=dict)
    """Model names that route to engines: a list of engines (the first ready one serves the request, the next ones
    take over when it fails before the first audio), or ``{engines: [...], fallback: bool, spill_on_overload: bool}``
    (``fallback: false``: the first engine only)."""
    failover: FailoverSettings = Field(default_factory=FailoverSettings)
    readiness: ReadinessSettings = Field(default_factory=ReadinessSettings)
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
    limits: LimitsSettings = Field(default_factory=LimitsSettings)
    cache: CacheSettings = Field(default_factory=CacheSettings)
    speech: SpeechSettings = Field(default_factory=SpeechSettings)
    realtime: RealtimeSettings = Field(default_factory=RealtimeSettings)
    jobs: JobsSettings = Field(default_factory=JobsSettings)
    voices: VoicesSettings = Field(default_factory=VoicesSettings)
    pronunciation: PronunciationSettings = Field(default_factory=PronunciationSettings)
    uploads: UploadSettings = Field(default_factory=UploadSettings)
    tracing: TracingSettings = Field(default_factory=TracingSettings)

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
        # source deep-merges into the ones below it.
        return (
            init_settings,
            env_settings,
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
