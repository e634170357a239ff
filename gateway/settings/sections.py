"""The gateway's own sections of the settings: cache, speech, jobs, realtime, failover, aliases, readiness, voices,
pronunciation."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from auth.settings import VoiceAliases
from storage.redis_url import parse_redis_url

__all__ = [
    "AliasSettings",
    "CacheSettings",
    "FailoverSettings",
    "JobsSettings",
    "PronunciationSettings",
    "ReadinessSettings",
    "RealtimeSettings",
    "SpeechSettings",
    "VoicesSettings",
]


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
    """The bytes of Redis memory the cache's entries may take (at least 65536), enforced by the gateway. Unset: half
    of what the Redis's ``maxmemory`` leaves to data (three quarters in a ``redis_url`` of the cache's own), read at
    start; 256 MiB when the Redis has no ``maxmemory`` or does not tell it (``INFO`` and ``CONFIG`` refused).
    Default: half of Redis's `maxmemory`."""
    max_memory_entries: int = Field(default=1024, ge=1)
    """Entries of the in-memory cache (no Redis), least recently used go first."""
    shared_across_tenants: bool = False
    """Let tenants hit each other's entries. Off by default: a hit would tell one tenant what another asked for."""


class SpeechSettings(BaseModel):
    """``POST /v1/audio/speech``: how a long input is scheduled (``gateway/speech/segments.py``)."""

    model_config = ConfigDict(extra="forbid")

    max_segment_chars: int = Field(default=300, ge=20, le=4096)
    """An input longer than this is spoken in segments of at most this many characters (as many whole sentences as
    fit; a sentence longer than that is cut at a clause, else a word, break), one engine job each, one after the
    other: between two segments the engine's slot goes back to its scheduler, so another tenant's waiting request
    goes first and a long input holds a slot for one segment at a time. The audio streams as one (one container, in
    order); a client that leaves cancels the segment being spoken and no later one starts; a segment that fails after
    the first audio ends the stream as a failing job does (it is not retried). Each segment waits for a worker as a
    request does, within the engine's queue limits and ``queue_timeout_s``, and is counted in
    ``tts_engine_queue_wait_seconds``. ``20`` to ``4096``; ``4096`` turns segmenting off. Realtime segments longer
    than this are cut the same way."""
    max_input_chars: int = Field(default=4096, ge=4096, le=100_000)
    """The longest ``input`` any tenant's ``limits.speech_input_characters`` may allow on ``POST /v1/audio/speech``
    (a tenant's cap is at most this); ``4096`` to ``100000``. Above ``4096`` the route also takes bodies of up to six
    bytes per character of it (JSON's longest spelling of one) beyond ``server.max_body_bytes``. Such inputs stream
    segment by segment as any long input; ElevenLabs' routes and the realtime sockets keep 4,096."""
    max_whole_audio_s: float = Field(default=600.0, ge=1.0, le=7200.0)
    """The longest audio a whole (not streamed) response holds: ElevenLabs' ``POST /v1/text-to-speech/{voice_id}``,
    its ``/with-timestamps`` and ``POST /v1/text-to-dialogue`` answer ``400`` ``audio_too_long`` once a request's
    audio passes it (its synthesis stopped there), so that one request holds at most this much audio in memory (48 KB
    of 24 kHz PCM a second and its encoding, a third more as base64). A vLLM-Omni sentence sent as one file (no
    ``stream_audio``) holds at most the bytes of this much 24 kHz WAV; one that outgrows it fails alone, as
    [realtime.md](realtime.md#sentences-sent-as-one-file) says. ``1`` to ``7200``. The streaming routes hold none of
    it."""


class JobsSettings(BaseModel):
    """Speech jobs (``POST /v1/audio/speech/jobs``, ``docs/jobs.md``): long inputs spoken in the background, segment by
    segment, their progress committed per segment so that another replica resumes a job whose replica died."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    """Serve the jobs routes (a front gateway only; an engine node never does)."""
    run: bool = True
    """This replica speaks jobs (its worker takes them from the queue in Redis). ``false``: it accepts jobs and
    serves their progress and audio, and another deployment of the gateway with ``run: true`` speaks them (Helm:
    ``jobs.runner: dedicated``). Without ``redis_url`` every replica speaks its own jobs, whatever this says."""
    concurrency: int = Field(default=2, ge=1, le=256)
    """Segments one replica speaks at once: the jobs it holds take turns at these slots, one segment a turn, tenant
    by tenant (the waiting tenant served longest ago goes next), so one tenant's backlog delays another's job by at
    most one segment per slot; see [jobs.md](jobs.md#how-tenants-share-the-runners). ``1`` to ``256``."""
    max_in_progress: int = Field(default=32, ge=1, le=4096)
    """Jobs one replica holds at once with Redis, each waiting for its tenant's turns at the ``concurrency`` slots. A
    replica takes from the queue the oldest job of the tenant with the fewest jobs running (on all replicas); once it
    holds ``concurrency`` jobs it takes only jobs of tenants it holds none of, so another tenant's job starts within
    a segment of a flood, and the flood's other jobs go to replicas with free slots. ``1`` to ``4096``."""
    max_followers_per_tenant: int = Field(default=32, ge=1, le=100_000)
    """Event streams (``GET /v1/audio/speech/jobs/{id}/events``) one tenant may have open at once on one replica; one
    more gets ``429`` (``type`` ``requests``, ``code`` ``concurrency_limit_exceeded``, ``Retry-After: 1``). The
    followers of one job share one poll of the store per replica (every ``poll_s``), however many they are. ``1`` to
    ``100000``."""
    max_input_chars: int = Field(default=500_000, ge=1, le=5_000_000)
    """The longest ``input`` of a job, unless the tenant's ``limits.job_input_characters`` says otherwise; longer:
    ``400 string_above_max_length``. ``1`` to ``5000000``. The jobs route takes bodies of up to six bytes per
    character of it (JSON's longest spelling of one), whatever ``server.max_body_bytes`` says."""
    storage_quota_bytes: int = Field(default=2 * 1024**3, ge=0)
    """The stored audio one tenant's jobs may keep at once (2 GiB), unless the tenant's ``limits.job_storage_bytes``
    says otherwise: a new job gets ``429 insufficient_quota`` (``job_storage_quota``) when the audio it is expected
    to store does not fit beside what the tenant's jobs hold. A job reserves its expected audio when it is created
    (its text at 15 characters a second of speech, divided by ``speed``: about 3.2 KB a character in ``wav``/``pcm``,
    530 bytes in ``mp3``/``aac``) in one atomic step with the check, so creations at the same instant never overbook
    it; a running job holds its reservation (or what it stored, once more), a completed one what it stored until its
    audio expires, a failed, cancelled or deleted one nothing. A job that speaks longer than expected completes."""
    max_jobs_per_tenant: int = Field(default=1000, ge=1, le=100_000)
    """Jobs (of any status, until they expire or are deleted) one tenant may hold; one more gets ``429
    insufficient_quota`` (``job_too_many_jobs``). ``1`` to ``100000``."""
    ttl_s: int = Field(default=24 * 3600, ge=1)
    """How long a job's audio is kept after it ended (24 h); its record then says ``expired`` for as long again and
    is gone after (``404``). It also bounds how long a job may take: a segment's audio expires twice this long after
    it was committed."""
    priority: Literal["high", "normal", "low"] | None = "low"
    """The engines' priority class of job segments: ``low`` lets every interactive request (the same tenant's too)
    take a free worker first; ``high`` or ``normal`` name another class; ``null``: the tenant's own
    (``scheduling.priority``), where its jobs and interactive requests take turns fairly."""
    heartbeat_s: int = Field(default=10, ge=1)
    """A running job's replica proves it lives three times this often; a job without a sign for this long is taken
    over by another replica, from its last committed segment. At least ``1``."""
    sweep_s: int = Field(default=5, ge=1)
    """How often one of the replicas looks for jobs whose replica died. At least ``1``."""
    poll_s: float = Field(default=0.25, gt=0, le=5)
    """How often a reader following a job (its audio or its events) looks for new segments; above ``0``, at most
    ``5``."""
    directory: Path | None = None
    """Keep the jobs' audio as files in this directory, one per segment, instead of in Redis: a volume every replica
    mounts (a ReadWriteMany PersistentVolumeClaim; Helm: ``jobs.volume.existingClaim``); records and progress stay in
    Redis. A segment's file is written whole under a name of its own before its commit records that name, so a runner
    whose commit is refused never replaces the committed file. Every replica removes the files of expired jobs every
    ``min(ttl_s, 600)`` seconds. Needs ``redis_url`` (ignored without it)."""
    segment_chars: int = Field(default=1200, ge=20, le=4096)
    """A job is spoken and committed in segments of at most this many characters (whole sentences where they fit),
    each one call of the speech service, which speaks it in engine jobs of ``speech.max_segment_chars`` as any long
    input: what a replica that dies loses, and how often a follower sees progress. Smaller costs throughput (each
    call has its own planning and worker hand-over: 300 made a 100,000-character espeak job 0.67x as fast as the same
    text in 4,096-character requests, on a loaded machine)."""
    segment_attempts: int = Field(default=3, ge=1, le=10)
    """Tries of a segment whose engine failed while speaking it (a worker that died, a stream cut) before the job fails
    with that error; ``1`` to ``10``. An engine that cannot take the segment yet (loading, busy) is waited for instead,
    up to 300 s (docs/jobs.md)."""


class RealtimeSettings(BaseModel):
    """The realtime WebSocket endpoints, ``/v1/audio/speech/stream`` and OpenAI's ``/v1/realtime`` (see
    ``docs/realtime.md``)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    """Serve both endpoints."""
    max_segment_chars: int = Field(default=300, ge=20, le=4096)
    """A sentence longer than this is cut at a clause or word boundary, so that speech can start sooner."""
    max_pending_chars: int = Field(default=4096, ge=1, le=65536)
    """Text appended but not yet spoken, per session: the text not yet segmented plus the segments queued behind the
    one being spoken; an append beyond it gets an ``input_buffer_full`` error event (wait for ``audio.done`` events,
    then append more)."""
    auth_timeout_s: float = Field(default=5.0, gt=0)
    """A socket without credentials in its header or query must send them in its first message within this time."""
    max_unauthenticated: int = Field(default=32, ge=0)
    """Sockets that may wait at once for their first message's credentials (browsers cannot set a header); one more
    is refused at once with close code ``1013`` (try again later) and a ``too_many_connections`` error event, so
    sockets that never authenticate cannot hold the connections that callers with credentials need
    (``server.max_connections`` and ``server.max_connections_per_address`` count WebSockets too). A socket with
    credentials in its ``Authorization`` header never waits."""
    max_unauthenticated_per_address: int = Field(default=4, ge=0)
    """Of ``max_unauthenticated``, the sockets one client address (an IPv6 client by its /64; taken as
    ``server.trusted_proxies`` says) may have waiting at once; one more from it is refused the same way. Stops one
    address from taking every waiting place, reconnecting as each times out, and so shutting every browser out of the
    realtime endpoint."""
    idle_timeout_s: float = Field(default=300.0, gt=0)
    """A session with no client event and nothing queued or being spoken (no response in progress, on
    ``/v1/realtime``) for this long is closed, releasing its concurrent-stream lease. A tenant may have its own
    (``limits.session_idle_timeout_s``); [security.md](security.md#idle-and-slow-clients) says what an idle session
    costs."""
    first_message_wait_s: float = Field(default=0.25, ge=0, le=5)
    """How long a new session waits for the client's first message before it greets with ``session.created``: that
    message chooses the protocol, and a vLLM-Omni client (whose ``session.config`` comes first) expects no greeting
    (see [realtime.md](realtime.md#vllm-omni-clients); ``/v1/realtime`` greets at once). A client that waits for
    ``session.created`` gets it this much later; one that speaks first gets it at once. ``0`` to ``5``; ``0`` greets
    at once."""
    max_socket_messages_per_s: float = Field(default=200.0, gt=0)
    """Messages a client may send on one realtime socket a second, on every protocol (``/v1/audio/speech/stream`` in
    both its dialects, ``/v1/realtime``, ElevenLabs' text-to-speech sockets), and ``socket_burst_s`` times as many at
    once after a pause. The message one past it is not parsed: the protocol's own error (``rate_limit_exceeded``),
    then close code ``1008``. Generous for a client that appends each token of a language model's reply; see
    [security.md](security.md#socket-budgets)."""
    max_socket_bytes_per_s: int = Field(default=256 * 1024, ge=1024)
    """Bytes (characters of a text frame) a client may send on one realtime socket a second, at least ``1024``; what
    the server sends back only because of a message (``/v1/realtime``'s ``conversation.item.added`` and ``.done``
    repeat the item) counts too, so echoes never multiply what a client may make the server send. ``socket_burst_s``
    times as many at once, and at least one message of ``server.max_body_bytes``. Over it, as above. Together with
    the message rate it bounds the JSON a socket makes the event loop parse a second."""
    socket_burst_s: float = Field(default=2.0, gt=0, le=60)
    """Seconds of the two socket rates a client may send at once after a pause (above ``0``, at most ``60``)."""
    max_tenant_socket_messages_per_s: float = Field(default=1000.0, gt=0)
    """Messages all of one tenant's realtime sockets may send a second together, each socket within
    ``max_socket_messages_per_s`` as well, so that opening more sockets does not multiply what a tenant may send;
    ``socket_burst_s`` times as many at once. On every replica together with ``redis_url`` (the replicas share what
    their sockets sent ten times a second), else on this replica. The message one past it gets the same error and
    close ``1008`` on the socket that sent it."""
    max_tenant_socket_bytes_per_s: int = Field(default=1024 * 1024, ge=1024)
    """Bytes all of one tenant's realtime sockets may send a second together (the server's echoes included), at least
    ``1024``; ``socket_burst_s`` times as many at once, and at least one message of ``server.max_body_bytes``. Shared
    by the replicas and over it, as above."""
    max_conversation_chars: int = Field(default=32768, ge=4096, le=1048576)
    """Characters of text one ``/v1/realtime`` conversation keeps (``4096`` to ``1048576``): the oldest items drop to
    make room for a new one, as they do past 64 items; an item longer than this alone is refused with a
    ``conversation_too_large`` error event and the session goes on."""


class FailoverSettings(BaseModel):
    """Retrying a request that failed before its first audio (``gateway/speech/failover.py``)."""

    model_config = ConfigDict(extra="forbid")

    same_engine_attempts: int = Field(default=2, ge=1, le=10)
    """Tries on one engine before the next engine of the alias (1 to 10; 1: no retry on the same engine). A request
    that kills every worker it reaches (a "query of death") costs at most this many workers per engine."""
    deadline_s: float = Field(default=30.0, gt=0)
    """From the first try: no try starts later, and a try still waiting for its first audio then (in a queue or for
    the engine) is abandoned; the client gets ``503 engine_failed`` naming the deadline."""


class AliasSettings(BaseModel):
    """One alias: the engines behind a model name, in order of preference, and whether the next ones may answer."""

    model_config = ConfigDict(extra="forbid")

    engines: list[str]
    """Engine names: a request goes to the first; with ``fallback``, to the first that can serve it, failing over
    down the list."""
    fallback: bool = True
    """The engines after the first may answer: while the first is not ready (starting, unavailable, stopped, breaker
    open) and when it fails before its first audio. ``false``: the alias speaks with its first engine only, its
    [retries](configuration.md#failover) stay on that engine, and while it is not ready a request gets ``503
    engine_not_ready`` with ``Retry-After`` instead of another engine's voice;
    [``/readyz``](configuration.md#readiness) then waits for that engine. The rest of the list is kept for the day
    ``fallback`` is turned on (the Helm chart's ``aliasFallback`` does that)."""
    spill_on_overload: bool = False
    """When an engine is overloaded (every worker busy and its queue full, or the wait timed out) the request goes to
    the next engine of the list instead of a ``503``. Off by default: spilling from ChatTTS to espeak changes the
    voice the client hears. Needs ``fallback`` (``spill_on_overload: true`` with ``fallback: false`` is refused at
    start)."""

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
    """Custom voices a tenant may have at once (as OpenAI); one more gets ``400`` with code ``voice_limit_reached``
    (delete one first). Enforced across replicas through Redis when ``redis_url`` is set."""
    max_consents_per_tenant: int = Field(default=20, ge=0)
    """Consent recordings a tenant may keep at once; one more gets ``400`` with code ``consent_limit_reached``. Each
    is kept as at most 30 s of 16 kbit/s Opus (about 60 KB); see [voices.md](voices.md)."""
    aliases: VoiceAliases = Field(default_factory=dict)
    """Voice names and ids callers send, each mapped to the voice that speaks it (a built-in voice of the model's
    engine, or a tenant's custom voice by its ``voice_…`` id), for every tenant and every API: over ElevenLabs'
    [premade ids](elevenlabs.md#voice-ids-as-clients-send-them), under a tenant's own ``voice_aliases``. One step: a
    target is not looked up again."""
    max_speaker_chars: int = Field(default=16384, ge=1, le=16384)
    """Longest ``speaker`` accepted, at most 16384 (the API's own ceiling); longer gets ``400``
    ``string_above_max_length``. ChatTTS's full-size speakers are 862 characters. A speaker an engine makes from an
    audio sample is held to it too (``400`` naming ``audio_sample``)."""


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
    """Largest PLS file ``add-from-file`` reads, 1 KiB to 16 MiB (``400`` beyond it); its body may hold this and 64
    KiB more, whatever ``server.max_body_bytes`` (``413`` beyond)."""
    compile_characters_per_minute: int = Field(default=1_048_576, ge=65_536)
    """Grapheme characters of new dictionary versions one tenant may have a replica compile a minute (a version is
    compiled once per replica, on the first request that applies it): the default is 16 versions of the most a
    version may hold (65,536 grapheme characters, about 0.07 s of CPU each), so one tenant's compiles take at most a
    few percent of a replica's CPU. A request that needs one more compile is refused (429 ``rate_limit_exceeded``
    with ``Retry-After``); versions already compiled are applied whatever this budget."""


#: The engines and aliases every gateway starts from: the lowest-priority settings source, so YAML files and
#: environment variables merge into them (``engines: {chattts: null}`` removes one).
