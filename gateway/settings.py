"""The gateway's one settings object: environment variables (``CHATTTS_GATEWAY_*``, then the former ``TTS_GATEWAY_*``)
over YAML files over built-ins.

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
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from auth.settings import AuthSettings, LimitsSettings, VoiceAliases
from engines.settings import EngineSettings
from gateway.observability.tracing import TracingSettings
from gateway.uploads.settings import UploadSettings
from lifecycle import naming
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
    """Address to bind."""
    port: int = Field(default=8000, ge=0, le=65535)
    """Port to bind."""
    tls_certfile: Path | None = None
    """PEM certificate (its chain after it): with ``tls_keyfile``, the gateway serves HTTPS and WSS on ``port``
    (``chattts-gateway serve --tls-certfile … --tls-keyfile …`` says the same); see
    [TLS](realtime.md#tls-wss-for-the-sdks-realtime-helpers)."""
    tls_keyfile: Path | None = Field(default=None, repr=False)
    """The certificate's PEM private key (unencrypted); both or neither."""
    max_body_bytes: int = Field(default=64 * 1024, ge=1024)
    """Largest request body accepted; larger bodies get ``413`` with OpenAI's error body. An engine node (``profile:
    engine``) takes at least ``131072`` (what a front sends at most: the longest input and instructions and a custom
    voice's speaker)."""
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    """``debug``, ``info``, ``warning`` or ``error``."""
    shutdown_grace_s: int = Field(default=30, ge=0)
    """On SIGTERM: stop accepting; realtime sessions take no more text, finish the segment being spoken and close
    with 1012; in-flight HTTP streams finish; all within this long in total, then the engines stop."""
    send_timeout_s: float = Field(default=30.0, gt=0)
    """A client that leaves one write of its response unread this long (it stopped reading) counts as gone: its
    response is abandoned, releasing its concurrent-stream lease and its synthesis and recording its usage, and the
    connection is closed."""
    playground: bool = True
    """Serve the playground page at ``/`` and ``/playground``: try the speech API from a browser, hearing the audio
    as it streams (public; its API calls carry the key pasted into it)."""
    profile: Literal["gateway", "engine"] = "gateway"
    """``engine``: run as an **engine node**, the engine tier behind front gateways (their ``kind: openai`` engines).
    Every request but the probes must carry ``auth.service_token`` as ``Authorization: Bearer …`` (else ``401``, or a
    refused WebSocket handshake; never in a URL), and ``/readyz`` shows pids and engine reasons only with it; there
    are no tenants, per-tenant limits, audio cache, custom voices (``404``) or admin API (``404``) of its own; it
    schedules, counts and labels each request as the tenant its front names (``service`` when the front names none;
    see [What crosses the hop](deployment.md#what-crosses-the-hop-and-whom-each-tier-trusts)). Needs
    ``auth.service_token``; ``auth.tenants``, ``auth.admin_token`` and ``auth.jwt`` are refused (they belong to the
    front). See [Two tiers](deployment.md#two-tiers-gateways-in-front-of-engine-nodes)."""
    max_header_bytes: int = Field(default=16 * 1024, ge=1024, le=1024 * 1024)
    """Largest request head (request line and headers) accepted; a larger one gets ``431`` with OpenAI's error body
    and the connection is closed. An unfinished head is cut off once it passes the limit, so an endless header costs
    the server at most this plus one socket read."""
    max_headers: int = Field(default=100, ge=8, le=10_000)
    """Most header lines in one request; more get ``431``."""
    header_timeout_s: float = Field(default=10.0, gt=0)
    """Time a connection has to deliver a complete request head, counted from the connect (or, on a kept-alive
    connection, from the next request's first byte); then ``408`` and the connection is closed (silently when nothing
    was sent at all). Idle and byte-at-a-time ("slowloris") sockets cannot pile up."""
    body_min_rate_bytes_per_s: int = Field(default=1024, ge=1)
    """Least rate a request body must keep arriving at (a tenant may have its own:
    ``limits.body_min_rate_bytes_per_s``; what bursty clients need is measured in
    [security.md](security.md#idle-and-slow-clients)), measured over each ``body_rate_interval_s`` from the end of
    its head: an interval that brings fewer bytes than this rate times its length, without ending the body, gets
    ``408`` (``request_timeout``), the connection is closed and the request is logged with status ``499`` (no
    traceback). Stops the "slow POST": a body dripped a byte at a time to hold a connection (cut after one interval,
    where a single total time held it for all of that time), while a large body on a slow but steady link — a 10 MiB
    voice sample over a poor uplink — takes as long as it needs. An interval in which the server itself was not
    reading is not held against the client (the application had not asked for the body yet: a client waiting for
    ``100 Continue``; or its buffer was full)."""
    body_rate_interval_s: float = Field(default=10.0, gt=0)
    """The interval over which ``body_min_rate_bytes_per_s`` is measured (so a body must bring 10 KiB in each 10 s
    unless it ends); the first interval is a body's grace for its first bytes. Shorter cuts a dripping body sooner;
    longer forgives a link that stalls for a while and then catches up."""
    body_timeout_s: float | None = Field(default=None, gt=0)
    """Optional bound on the whole body's time, however fast it arrives: then 408 and the connection is closed.
    ``None`` (the default): no bound but the minimum rate, which holds a body's time to its size over
    ``body_min_rate_bytes_per_s`` and one interval, so a 10 MiB voice sample on a slow link is not cut at an arbitrary
    total. (Before the minimum rate this was the only body deadline, 30 s: configurations that set it keep it.)"""
    keep_alive_timeout_s: int = Field(default=5, ge=1)
    """An idle keep-alive connection is closed after this many seconds between requests."""
    max_connections_per_address: int = Field(default=256, ge=1)
    """Open connections one client address may hold, HTTP and realtime WebSockets alike (an upgraded WebSocket counts
    until it closes); one more gets ``429`` (``too_many_connections``, ``Retry-After: 1``) as soon as it sends its
    request (a WebSocket upgrade included), so one address cannot take the connections everyone else needs (the
    slot-exhaustion attack, with idle sockets, unfinished requests or open sessions). An IPv6 client counts by its
    /64 network, which one host commonly holds whole: it cannot dodge the cap with a fresh address per connection. A
    connection from one of ``trusted_proxies`` counts against the client its latest request was forwarded for, not
    against the proxy."""
    max_auth_failures_per_address: int = Field(default=20, ge=1)
    """Credentials (API keys, JWTs) one client address may present and have refused (``401``/``403``) within
    ``auth_failure_window_s``. Past it, a request or realtime socket from that address whose credential has not
    authenticated on this replica lately gets ``429`` (``too_many_failed_authentications``, with ``Retry-After``
    until the oldest refusal leaves the window; a socket closes with ``1013``) before its credential is looked up.
    Stops key guessing and the store flood that comes with it: every well-formed key otherwise costs a Redis lookup,
    found or not, so a stranger sending random keys as fast as it can loads the store like a busy tenant. A tenant
    whose key has authenticated on this replica (from any address; the last 10,000 credentials are remembered, as
    keyed hashes) goes on being served from the throttled address, so a stranger behind the same NAT does not lock it
    out; a valid key never used on this replica waits, from that address, for ``Retry-After`` like a guess (nothing
    tells the two apart). Requests without a credential are not counted (their ``401`` costs nothing). One warning
    line per throttled address. Counted per replica, in memory."""
    auth_failure_window_s: int = Field(default=60, ge=1)
    """The moving window over which ``max_auth_failures_per_address`` counts refused credentials."""
    max_connections: int = Field(default=1000, ge=1)
    """Open connections (HTTP and WebSocket). At the cap the oldest connection with no request in progress (idle, or
    still sending its head) is closed to make room; when every connection is busy, a new one gets ``503`` with
    OpenAI's body and ``Retry-After: 1`` as soon as it sends its request (dropped after 1 s if it sends nothing).
    Lowered at start, with a warning, to the open-file limit (``ulimit -n``) minus a reserve of a quarter of it (at
    least 64). What tenants hold for long (WebSocket sessions open, request bodies still arriving) is shared fairly
    when the replica is crowded: once they reach 80 % of this cap and two tenants or more hold them, a tenant already
    holding its fair share (those 80 % divided among the tenants holding anything) is refused one more (``429``
    ``concurrency_limit_exceeded`` for a body, an ``error`` event and close code ``1013`` for a session), while a
    tenant under its share still gets in; each tenant is also held to its own ``open_sessions`` and
    ``bodies_in_flight`` ([tenants](configuration.md#auth))."""
    max_json_depth: int = Field(default=32, ge=2, le=512)
    """Deepest nesting of arrays and objects in a JSON request body; deeper bodies get ``400`` (``code:
    json_too_deep``) before any parser sees them. Realtime messages have the same bound (32) and get an ``error``
    event."""
    trusted_proxies: list[str] = Field(default_factory=list)
    """Addresses or networks (``10.0.0.0/8``) of the reverse proxies in front of the gateway; anything else is
    refused at start. Only for connections from them are ``X-Forwarded-For`` / ``X-Forwarded-Proto`` believed and the
    client address taken from them: the last address in ``X-Forwarded-For`` that is not a trusted proxy's (each proxy
    appends the address it was called from, so entries a client forges come before its proxy's and are never taken).
    That address is what every per-address limit counts (``max_connections_per_address``,
    ``max_auth_failures_per_address``, ``realtime.max_unauthenticated_per_address``, the admin throttle) and what the
    access log shows. Empty: forwarding headers are ignored, so a caller cannot forge an address to dodge a
    per-address limit or to charge its failures to someone else (uvicorn alone believes them from ``127.0.0.1``);
    behind a proxy, list it, or every caller shares the proxy's address: one cap for all of them, and a stranger's
    failed admin attempts throttle the admin too."""

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
    of 24 kHz PCM a second and its encoding, a third more as base64). ``1`` to ``7200``. The streaming routes hold
    none of it."""


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
    """Tries of a segment that failed (an engine error) before the job fails with that error; ``1`` to ``10``."""


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
#: The espeak engine keeps a worker for speech jobs (``low_priority_workers``: ``docs/jobs.md``).
BUILT_IN_ENGINES: dict[str, dict[str, Any]] = {
    "chattts": {"kind": "chattts"},
    "espeak": {"kind": "espeak", "low_priority_workers": 1},
}
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

    model_config = SettingsConfigDict(env_prefix=naming.ENV_PREFIX, env_nested_delimiter="__", extra="forbid")

    server: ServerSettings = Field(default_factory=ServerSettings)
    """The HTTP server."""
    engines: Annotated[dict[str, EngineSettings], BeforeValidator(_without_removed)] = Field(default_factory=dict)
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
