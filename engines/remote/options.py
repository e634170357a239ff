"""The ``openai`` engine kind's options: upstream servers that speak OpenAI's ``POST /v1/audio/speech``.

Validated when the settings load, so a malformed endpoint, a missing credential variable or a contradiction stops
the start with a message naming the option, before anything listens.
"""

from __future__ import annotations

import os

import httpx
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from engines.breaker import BreakerSettings

__all__ = ["OpenAIRemoteOptions"]


class OpenAIRemoteOptions(BaseModel):
    """Options of the ``openai`` engine kind. Unknown keys are rejected."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    endpoints: list[str] = Field(min_length=1)
    """Base URLs of the upstream API, such as ``http://engine:8000/v1``; a host name that resolves to several
    addresses (a Kubernetes headless Service) counts as one endpoint per address."""
    model: str = Field(default="tts-1", min_length=1)
    """The ``model`` sent upstream."""
    voices: dict[str, str] = Field(default_factory=dict)
    """Gateway voice → upstream voice; a voice not listed is sent under its own name. The engine offers OpenAI's
    voices plus these."""
    api_key: SecretStr | None = None
    """Sent upstream as ``Authorization: Bearer`` (an engine node's ``auth.service_token``); never logged."""
    api_key_env: str | None = None
    """The name of an environment variable holding the key instead (it must be set at start); not both."""
    connect_timeout_s: float = Field(default=2.0, gt=0)
    """Connecting to an endpoint."""
    first_byte_timeout_s: float = Field(default=15.0, gt=0)
    """From sending the request to the first audio byte; beyond it the try fails (and counts in the endpoint's
    breaker)."""
    idle_timeout_s: float = Field(default=15.0, gt=0)
    """Longest silence between two chunks once audio flows; beyond it the stream is cut."""
    max_in_flight: int = Field(default=16, ge=1)
    """Requests in flight per endpoint address; with every address full a request waits in the queue (``queue_size``,
    ``queue_timeout_s``), then gets ``503`` with ``Retry-After``."""
    sample_rate: int = Field(default=24000, ge=8000, le=192000)
    """The rate of the upstream's raw ``pcm`` (OpenAI's is 24 kHz)."""
    probe_interval_s: float = Field(default=2.0, gt=0)
    """How often each endpoint's health is checked."""
    resolve_interval_s: float = Field(default=10.0, gt=0)
    """How often host names are resolved again (addresses that come and go)."""
    breaker: BreakerSettings = Field(default_factory=BreakerSettings)
    """Each endpoint address's circuit breaker (``failures``, ``window_s``, ``open_s``, ``half_open_probes``)."""

    @field_validator("endpoints")
    @classmethod
    def _endpoints_are_http_urls(cls, endpoints: list[str]) -> list[str]:
        return [_checked_endpoint(url) for url in endpoints]

    @model_validator(mode="after")
    def _one_credential_source(self) -> OpenAIRemoteOptions:
        if self.api_key is not None and self.api_key_env is not None:
            raise ValueError("set api_key or api_key_env, not both")
        if self.api_key_env is not None and not os.environ.get(self.api_key_env):
            raise ValueError(f"api_key_env names the environment variable {self.api_key_env!r}, which is not set")
        return self

    def credential(self) -> str | None:
        """The key to send upstream, from ``api_key`` or the variable ``api_key_env`` names."""
        if self.api_key is not None:
            return self.api_key.get_secret_value()
        if self.api_key_env is not None:
            return os.environ.get(self.api_key_env) or None
        return None


def _checked_endpoint(url: str) -> str:
    """``url`` without a trailing slash, or a ValueError naming it."""
    try:
        parsed = httpx.URL(url.strip())
    except (httpx.InvalidURL, TypeError) as exc:
        raise ValueError(f"endpoint {url!r} is not a valid URL: {exc}") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ValueError(f"endpoint {url!r} must be an http:// or https:// URL with a host")
    if parsed.userinfo:
        # The URL shows in /readyz and metric labels: credentials belong in api_key.
        raise ValueError(
            f"endpoint {parsed.copy_with(username=None, password=None)!s} must not carry credentials; "
            "use api_key or api_key_env"
        )
    if parsed.query or parsed.fragment:
        raise ValueError(f"endpoint {url!r} must be a base URL without query or fragment")
    return str(parsed).rstrip("/")
