"""What auth is configured with: tenants and their limits, JWTs, the admin token, and how limits behave in an outage.

The gateway's settings (``gateway/settings/``) compose these; nothing in ``auth`` reads any other settings.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, StringConstraints, field_validator, model_validator

__all__ = [
    "AuthSettings",
    "DictionaryId",
    "JWTSettings",
    "LimitsSettings",
    "TenantLimits",
    "TenantScheduling",
    "TenantSettings",
    "VoiceAliases",
]


DictionaryId = Annotated[str, StringConstraints(min_length=1, max_length=256)]
"""A pronunciation dictionary's id (``pd_…``)."""


class TenantLimits(BaseModel):
    """Per-tenant limits; ``None`` means unlimited, but for the two that refine a server setting (``None``: the
    server's)."""

    model_config = ConfigDict(extra="forbid")

    requests_per_minute: int | None = Field(default=None, ge=1)
    """Moving window (unset: unlimited, as for the other limits)."""
    characters_per_minute: int | None = Field(default=None, ge=1)
    """Characters, moving window (the speech analogue of tokens per minute): those the engine is asked to speak,
    after dictionaries, ``say-as`` and breaks, never fewer than the input's
    ([pronunciation.md](pronunciation.md#what-a-request-is-charged))."""
    characters_per_month: int | None = Field(default=None, ge=1)
    """Characters per calendar month (UTC), charged as per minute, across replicas, counted as each request is
    admitted; a request that would pass the line is refused until the month ends ([monthly
    budgets](configuration.md#monthly-budgets))."""
    audio_seconds_per_month: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """Seconds of audio spoken per calendar month (UTC), across replicas, counted as each request ends; once they
    reach the line the next request is refused until the month ends (one in flight may finish past it: [monthly
    budgets](configuration.md#monthly-budgets))."""
    concurrent_streams: int | None = Field(default=None, ge=1)
    """Responses streaming at once (a lease, released when the stream ends or the client leaves, expiring by itself
    if a replica dies)."""
    open_sessions: int | None = Field(default=100, ge=1)
    """WebSocket sessions open at once, across replicas (a lease each, released when the session closes, expiring by
    itself if its replica dies); one more is refused as it opens (an ``error`` event ``concurrency_limit_exceeded``
    and close code ``1013``). ``null``: unlimited. The default holds one tenant to a tenth of a replica's
    ``server.max_connections``, so a tenant's idle sessions cannot take the connections other tenants need."""
    bodies_in_flight: int | None = Field(default=50, ge=1)
    """Requests whose body is still arriving, on each replica (a slow body holds one of that replica's connections; a
    response being streamed does not count); one more gets ``429`` ``concurrency_limit_exceeded`` with
    ``Retry-After`` before its body is read, once it has waited for its own body for the top-level
    [``limits.body_wait_s``](configuration.md#limits) (a body in by then holds nothing). A body stops counting when
    its last byte reaches the server, not when the handler gets round to reading it (a body that came with its head
    never counts), so a busy replica does not refuse requests whose bodies are in. Counted per replica, in memory: a
    round trip to Redis before every body would double what a request costs. ``null``: unlimited."""
    body_min_rate_bytes_per_s: int | None = Field(default=None, ge=1)
    """The least rate this tenant's request bodies must keep arriving at, over each ``server.body_rate_interval_s``,
    as the server's own (``408`` when slower). Unset: ``server.body_min_rate_bytes_per_s``. The tenant is known from
    the request's head, so its rate holds for all of the body; a request whose caller is not known yet (or needs
    none) has the server's. Lower it for a tenant whose clients are on poor links
    ([security.md](security.md#idle-and-slow-clients) measures what bursty senders need); a change holds for the
    tenant's next requests."""
    session_idle_timeout_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """How long this tenant's realtime sessions (``/v1/audio/speech/stream`` and ``/v1/realtime``) may go without a
    client event and with nothing to speak before they are closed (``session_idle_timeout``, close code ``1000``).
    Unset: ``realtime.idle_timeout_s``. Read as each session opens: a change holds for the tenant's next sessions,
    one open keeps what it opened with."""
    speech_input_characters: int | None = Field(default=None, ge=1)
    """The longest ``input`` of this tenant's ``POST /v1/audio/speech``, within the server's
    ``speech.max_input_chars`` (longer: ``400 invalid_value``, worded as OpenAI's). Unset: OpenAI's 4096."""
    job_input_characters: int | None = Field(default=None, ge=1)
    """The longest ``input`` of one of the tenant's speech jobs (``POST /v1/audio/speech/jobs``); longer: 400.
    ``None``: ``jobs.max_input_chars`` (500,000)."""
    job_storage_bytes: int | None = Field(default=None, ge=0)
    """The audio this tenant's speech jobs may keep stored at once: a new job gets ``429 insufficient_quota`` when
    its expected audio does not fit beside what the tenant's jobs hold (see ``jobs.storage_quota_bytes``; ``0``: no
    jobs). Unset: ``jobs.storage_quota_bytes``."""

    @classmethod
    def unlimited(cls) -> TenantLimits:
        """No limit at all: the one tenant of a gateway running open, the front gateways' service on an engine node."""
        return cls(open_sessions=None, bodies_in_flight=None)


class TenantScheduling(BaseModel):
    """How the tenant's requests wait for busy engine workers among other tenants' (engines with ``scheduling: fair``).

    Kept apart from :class:`TenantLimits`: these do not refuse requests by rate, they order the waiting ones (and a
    stored tenant record written before they existed still loads, with the defaults).
    """

    model_config = ConfigDict(extra="forbid")

    weight: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    """Share of a busy engine among waiting tenants of the same priority class (``2``: twice the turns of a weight-1
    tenant), and of its slots for the engine's ``reserved_slots``; a number > 0."""
    priority: Literal["high", "normal", "low"] = "normal"
    """``high``, ``normal`` or ``low``: waiting requests of a higher class get workers first (strictly: a steady
    ``high`` load can starve ``low``)."""
    max_queued: int | None = Field(default=None, ge=1)
    """Requests of this tenant that may wait per engine; beyond it this tenant alone gets ``503 engine_overloaded``
    with ``Retry-After``. Unset: only the engine's ``queue_size`` bounds them (so one tenant can fill it)."""


VoiceAliases = Annotated[
    dict[
        Annotated[str, StringConstraints(min_length=1, max_length=256)],
        Annotated[str, StringConstraints(min_length=1, max_length=256)],
    ],
    Field(max_length=256),
]
"""Voice names and ids mapped to voices (a tenant's ``voice_aliases``): at most 256, each side 1 to 256 characters."""


class TenantSettings(BaseModel):
    """A tenant declared in the configuration file."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]{0,62}$")
    """The tenant's name, matching ``^[a-z0-9][a-z0-9_.-]{0,62}$``."""
    limits: TenantLimits = Field(default_factory=TenantLimits)
    """The tenant's own limits: rates, quotas, what it may hold at once; every one unset means unlimited (or the
    server's own bound)."""
    models: list[str] | None = None
    """Models (engines or aliases) the tenant may use; ``None``: every model."""
    scheduling: TenantScheduling = Field(default_factory=TenantScheduling)
    """The tenant's place in the engines' queues: its weight, priority class and how many of its requests may wait."""
    pronunciation_dictionaries: list[DictionaryId] = Field(default_factory=list, max_length=3)
    """Ids of the tenant's own [pronunciation dictionaries](pronunciation.md) (at most 3, latest version each) that
    its requests naming none are spoken with: every OpenAI and realtime request, and ElevenLabs requests without
    ``pronunciation_dictionary_locators``. A dictionary the tenant does not have is skipped (with a warning in the
    log)."""
    control_tokens: bool = False
    """Every request of the tenant reads the engine's [control tokens](ssml.md#chattts-control-tokens) typed in its
    text (ChatTTS's ``[laugh]``, ``[uv_break]``, …), as a request's own ``"control_tokens": true`` does; ``false``:
    only requests that opt in."""
    voice_aliases: VoiceAliases = Field(default_factory=dict)
    """Voice names and ids the tenant's callers send, each mapped to the voice that speaks it (a built-in voice, or
    one of the tenant's custom voices by its ``voice_…`` id), on every API; over ``voices.aliases`` and ElevenLabs'
    [premade ids](elevenlabs.md#voice-ids-as-clients-send-them). At most 256."""
    api_key_sha256: list[str] = Field(default_factory=list)
    """Hex SHA-256 hashes of API keys issued out of band (``chattts-gateway keys create`` prints one when no
    ``redis_url`` is set); keys are never stored."""


class JWTSettings(BaseModel):
    """JSON Web Tokens for business callers: one pinned algorithm and its key."""

    model_config = ConfigDict(extra="forbid")

    algorithm: Literal["HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "ES256", "ES384", "ES512"] = "HS256"
    """One of ``HS256``, ``HS384``, ``HS512``, ``RS256``, ``RS384``, ``RS512``, ``ES256``, ``ES384``, ``ES512``."""
    secret: SecretStr | None = None
    """The shared secret, for HS* (and then no ``public_key``)."""
    public_key: str | None = None
    """The PEM public key, for RS* and ES* (and then no ``secret``)."""
    audience: str | None = None
    """Checked when set."""
    issuer: str | None = None
    """Checked when set."""
    tenant_claim: str = "tenant"
    """The claim that names the tenant."""
    leeway_s: int = Field(default=0, ge=0, le=300)
    """Seconds of clock skew allowed when checking the token's times (``exp``, ``nbf``, ``iat``), 0 to 300."""

    @model_validator(mode="after")
    def _key_matches_algorithm(self) -> JWTSettings:
        if self.algorithm.startswith("HS") and (self.secret is None or self.public_key is not None):
            raise ValueError("HS* algorithms need `secret` and no `public_key`")
        if not self.algorithm.startswith("HS") and (self.public_key is None or self.secret is not None):
            raise ValueError("RS*/ES* algorithms need `public_key` and no `secret`")
        return self


#: The shortest admin token accepted.
MIN_ADMIN_TOKEN_CHARS = 32


class AuthSettings(BaseModel):
    """Who may call the gateway."""

    model_config = ConfigDict(extra="forbid")

    required: bool = False
    """Refuse to start without tenants or an admin token (the Helm chart's default).

    The gateway runs open (no credentials needed, one anonymous tenant) only when no tenants are configured and no
    admin token is set; it says so loudly at start-up.
    """
    admin_token: SecretStr | None = None
    """Token of the admin API (``/admin/...``), accepted only as ``Authorization: Bearer <admin_token>``; the admin
    API is off without it. At least 32 characters (``openssl rand -hex 32``): an empty or shorter one refuses to
    start. Failed attempts (a wrong token; a request with none is refused but not counted) are logged as warnings
    (never the token) and throttled per client address: after 10 in a minute every admin request from that address
    gets ``429`` with ``Retry-After`` until the oldest leaves the minute, even one with the right token, so that a
    guesser never learns it guessed right (counted in each replica's memory). The address is the peer's, or the
    forwarded client's behind ``server.trusted_proxies``: reach the admin API from an address strangers do not share."""
    tenants: list[TenantSettings] = Field(default_factory=list)
    """Tenants declared here (below); more can be created at runtime through the admin API."""
    jwt: JWTSettings | None = None
    """Accept JSON Web Tokens (below)."""
    lookup_cache_s: float = Field(default=60.0, ge=0)
    """How long a replica answers for an API key or tenant it looked up without asking Redis again, so that a known
    caller costs no round trip. Revocations, deletions and tenant changes reach every replica's memory at once
    through the revocation channel (``tts:auth:revocations``), and a replica whose subscription is down asks Redis on
    every request until it is back (then it forgets which answers were fresh); this bounds what a missed announcement
    could cost. ``0`` asks Redis on every request."""
    revoked_key_retention_s: int = Field(default=30 * 24 * 3600, ge=1)
    """A revoked key stays in its tenant's key listing this long (for audit), then its record is deleted. Keys
    configured by their hash (``api_key_sha256``) stay listed as revoked for good, so that re-seeding the
    configuration cannot bring them back. Default: 30 days."""
    retired_usage_retention_s: int = Field(default=90 * 24 * 3600, ge=1)
    """How long a deleted tenant's usage is kept apart for the operator (``GET /admin/retired-usage/{name}``): 90
    days by default."""
    service_token: SecretStr | None = Field(default=None, min_length=32)
    """The credential of an engine node (``server.profile: engine``): every request to it must carry ``Authorization:
    Bearer <service_token>``, which the front gateway sends as its ``kind: openai`` engine's ``api_key``. At least 32
    characters (``openssl rand -hex 32``); compared in constant time, never logged. Only used with ``profile:
    engine``."""

    @field_validator("admin_token")
    @classmethod
    def _admin_token_is_strong(cls, token: SecretStr | None) -> SecretStr | None:
        # An empty token (a variable set to "") once opened the admin API to anyone: refuse it, and guessable ones.
        if token is not None and len(token.get_secret_value()) < MIN_ADMIN_TOKEN_CHARS:
            raise ValueError(
                f"must be at least {MIN_ADMIN_TOKEN_CHARS} characters, got "
                f"{len(token.get_secret_value())} (generate one: openssl rand -hex 32); leave it unset "
                "to turn the admin API off"
            )
        return token

    @model_validator(mode="after")
    def _tenants_are_sound(self) -> AuthSettings:
        names = [tenant.name for tenant in self.tenants]
        if len(set(names)) != len(names):
            raise ValueError("tenant names must be unique")
        if self.required and not names and self.admin_token is None and self.service_token is None:
            raise ValueError("auth.required is true but no tenants are configured (nor an admin token to add them)")
        return self


class LimitsSettings(BaseModel):
    """How per-tenant limits behave when their storage is out of reach."""

    model_config = ConfigDict(extra="forbid")

    fail_mode: Literal["open", "closed"] = "open"
    """Redis unreachable: ``open`` admits requests (known API keys keep working from memory; counted in the
    ``tts_limits_fail_open_admissions_total`` metric and logged once per outage), ``closed`` answers ``503``."""
    lease_ttl_s: float = Field(default=30.0, gt=0)
    """A concurrent-stream lease not renewed for this long expires (a replica that died mid-stream)."""
    stream_wait_s: float = Field(default=0.25, ge=0, le=10)
    """A stream over the tenant's ``concurrent_streams`` waits this long for one of its streams to end before the
    ``429`` (a client that aborts a stream and asks again at once is often faster than the server noticing the
    abort); ``0`` refuses at once."""
    body_wait_s: float = Field(default=0.5, ge=0, le=10)
    """A request whose tenant has its ``bodies_in_flight`` bodies arriving on the replica (or holds its fair share of
    a crowded one) waits this long, before its body is read, for its own body to arrive: a body in by then holds
    nothing and the request goes on; one still arriving takes a place if one has freed, else ``429``. A client whose
    own event loop is busy (a thousand requests at once) writes each body a moment after its head, and the server
    cannot tell that from a slow body without waiting; a slow body's extra request holds its connection this long
    before it is refused. ``0`` refuses at once."""
    outage_cache_entries: int = Field(default=10_000, ge=1)
    """With ``redis_url``: how many API keys (and, separately, tenants) each replica remembers, least recently used
    first out: they answer lookups for ``auth.lookup_cache_s`` without a round trip and, with ``fail_mode: open``,
    keep those callers served through a Redis outage. Only keys that were valid are remembered (unknown keys cost no
    memory); a key or tenant this replica learned was revoked or deleted — from a lookup or from any replica's
    announcement — is remembered as such and refused during the outage. Keys not remembered get ``503`` during an
    outage."""
