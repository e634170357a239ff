"""What auth is configured with: tenants and their limits, JWTs, the admin token, and how limits behave in an outage.

The gateway's settings (``gateway/settings.py``) compose these; nothing in ``auth`` reads any other settings.
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
    characters_per_minute: int | None = Field(default=None, ge=1)
    """Input characters per minute: the speech analogue of tokens per minute."""
    characters_per_month: int | None = Field(default=None, ge=1)
    """Input characters per calendar month (UTC), across replicas, counted when a request is admitted; a request that
    would pass it is refused (429 ``insufficient_quota``; ElevenLabs' ``quota_exceeded``) until the month ends."""
    audio_seconds_per_month: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """Seconds of audio spoken per calendar month (UTC), across replicas. Audio is known only once spoken: it counts
    when a request ends, so a request in flight may finish past the line, and the next one is refused."""
    concurrent_streams: int | None = Field(default=None, ge=1)
    open_sessions: int | None = Field(default=100, ge=1)
    """WebSocket sessions the tenant may hold open at once, across replicas (a lease each, released when the session
    closes, expiring by itself if its replica dies); one more is refused when it opens. ``None``: unlimited. The
    default holds one tenant to a tenth of a replica's ``server.max_connections``."""
    bodies_in_flight: int | None = Field(default=50, ge=1)
    """Requests of the tenant whose body is still arriving, on each replica (a body holds one of that replica's
    connections while it arrives, until its last byte reaches the server); one more gets 429 before its body is read,
    once it has waited ``limits.body_wait_s`` for its own body. ``None``: unlimited."""
    body_min_rate_bytes_per_s: int | None = Field(default=None, ge=1)
    """Least rate the tenant's request bodies must keep arriving at, from the moment the tenant is known (its head),
    measured over each ``server.body_rate_interval_s`` as the server's own; slower: 408. Lower for a tenant whose
    clients are on poor links, higher to free connections sooner. ``None``: ``server.body_min_rate_bytes_per_s``."""
    session_idle_timeout_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """How long the tenant's realtime sessions (every WebSocket dialect) may sit idle, with no client event and
    nothing to speak, before they are closed; read when a session opens. ``None``: ``realtime.idle_timeout_s``."""
    speech_input_characters: int | None = Field(default=None, ge=1)
    """The longest ``input`` of the tenant's ``POST /v1/audio/speech`` (streamed segment by segment as any long
    input), within the server's ``speech.max_input_chars``. ``None``: OpenAI's 4096."""
    job_input_characters: int | None = Field(default=None, ge=1)
    """The longest ``input`` of one of the tenant's speech jobs (``POST /v1/audio/speech/jobs``); longer: 400.
    ``None``: ``jobs.max_input_chars`` (500,000)."""
    job_storage_bytes: int | None = Field(default=None, ge=0)
    """The audio the tenant's speech jobs may keep stored at once (their results until they expire or are deleted);
    a job is refused (429 ``insufficient_quota``) while the tenant's stored results reach it. ``None``:
    ``jobs.storage_quota_bytes``."""

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
    """Relative share of a busy engine among waiting tenants of the same priority class (2: twice a weight-1 one)."""
    priority: Literal["high", "normal", "low"] = "normal"
    """Strict class: waiting ``high`` requests get workers before ``normal`` ones, and those before ``low`` ones."""
    max_queued: int | None = Field(default=None, ge=1)
    """Requests of this tenant allowed to wait per engine; beyond it a 503 with Retry-After for this tenant only.
    ``None``: only the engine's ``queue_size`` bounds them."""


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
    limits: TenantLimits = Field(default_factory=TenantLimits)
    models: list[str] | None = None
    """Models (engines or aliases) the tenant may use; ``None``: every model."""
    scheduling: TenantScheduling = Field(default_factory=TenantScheduling)
    pronunciation_dictionaries: list[DictionaryId] = Field(default_factory=list, max_length=3)
    """The tenant's pronunciation dictionaries (ids, latest version each) that requests which name none are spoken
    with: every OpenAI and realtime request, and ElevenLabs requests without ``pronunciation_dictionary_locators``.
    At most 3, as ElevenLabs' locators."""
    control_tokens: bool = False
    """Read the engine's control tokens typed in every request's text (ChatTTS's ``[laugh]``, ``[uv_break]``...), as
    a request's own ``control_tokens: true`` does; off, a request still opts in by itself (``docs/ssml.md``)."""
    voice_aliases: VoiceAliases = Field(default_factory=dict)
    """Voice names and ids its callers send, each mapped to the voice that speaks it: a built-in voice, or one of
    the tenant's custom voices (``voice_…``). Over the configuration's ``voices.aliases`` and ElevenLabs' premade ids
    (``docs/elevenlabs.md``)."""
    api_key_sha256: list[str] = Field(default_factory=list)
    """Hex SHA-256 hashes of API keys issued out of band (``chattts-gateway keys create`` prints one when no
    ``redis_url`` is set); keys are never stored."""


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
    """Bearer token of the admin API (``/admin/...``); the admin API is off without it. At least 32 characters: an
    empty or short one refuses to start."""
    tenants: list[TenantSettings] = Field(default_factory=list)
    jwt: JWTSettings | None = None
    lookup_cache_s: float = Field(default=60.0, ge=0)
    """How long a replica answers for an API key or tenant it looked up without asking Redis again: a known caller
    costs no round trip. Revocations, deletions and tenant changes reach every replica's memory at once through the
    revocation channel, and a replica that lost that channel asks Redis until it has it back; this bounds what a
    missed announcement could cost. 0: ask Redis on every request."""
    revoked_key_retention_s: int = Field(default=30 * 24 * 3600, ge=1)
    """How long a revoked key stays in its tenant's key listing (for audit); then its record is gone. Keys configured
    by their hash (``api_key_sha256``) stay listed as revoked for good, so that the configuration cannot bring them
    back."""
    retired_usage_retention_s: int = Field(default=90 * 24 * 3600, ge=1)
    """How long a deleted tenant's usage is kept apart for the operator (``GET /admin/retired-usage/{name}``)."""
    service_token: SecretStr | None = Field(default=None, min_length=32)
    """The credential an engine node (``server.profile: engine``) requires: the front gateway sends it as its remote
    engine's ``api_key``. At least 32 characters; never logged."""

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
    """``open``: admit requests while Redis is unreachable (counted and logged); ``closed``: answer 503."""
    lease_ttl_s: float = Field(default=30.0, gt=0)
    """A concurrent-stream lease not renewed for this long expires (a replica that died mid-stream)."""
    stream_wait_s: float = Field(default=0.25, ge=0, le=10)
    """A stream over the tenant's concurrency limit waits this long for one of its streams to end before a 429: a
    client that aborts a stream and asks again at once is often faster than the server noticing the abort."""
    body_wait_s: float = Field(default=0.5, ge=0, le=10)
    """A request whose tenant has ``bodies_in_flight`` bodies arriving (or its fair share of a crowded replica) waits
    this long for its own body to arrive before a 429: a body in by then holds nothing, and one still arriving gets a
    place if one has freed. A client whose own event loop is busy writes its body a moment after its head, and the
    server cannot tell that from a slow body until it has waited."""
    outage_cache_entries: int = Field(default=10_000, ge=1)
    """The API keys (and, separately, the tenants) each replica remembers, least recently used first out: they answer
    lookups for ``auth.lookup_cache_s`` without a Redis round trip and, with ``fail_mode: open``, keep those callers
    served while Redis is unreachable. Only keys that were valid are remembered, and what was revoked or deleted is
    remembered as such."""
