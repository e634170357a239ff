"""OpenAI's ``x-ratelimit-*`` response headers, rendered from a tenant's standing against its limits.

OpenAI sends all six on every response, and clients that pace themselves read them as integers, so they are sent
for every tenant: a dimension without a limit reports :data:`UNLIMITED` as its limit and remaining count, and a reset
of ``0s`` (nothing is waiting to reset). While the limits' storage is unreachable the remaining count and the reset
of a limited dimension are unknown and left out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from auth.limits import QuotaExceededError, RequestTooLargeError

if TYPE_CHECKING:
    from auth.limits import LimitState, RateLimitExceededError

__all__ = ["UNLIMITED", "format_reset", "rate_limit_headers", "refusal_headers"]

UNLIMITED = 2**31 - 1
"""What a dimension without a limit reports: more than any client will spend, and still a 32-bit integer."""


def rate_limit_headers(state: LimitState) -> dict[str, str]:
    """The six ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}`` headers ("tokens" are input characters)."""
    headers: dict[str, str] = {}
    for kind, limit, remaining, reset in (
        ("requests", state.limit_requests, state.remaining_requests, state.reset_requests_s),
        ("tokens", state.limit_tokens, state.remaining_tokens, state.reset_tokens_s),
    ):
        if limit is None:  # no limit: report one nobody reaches, never the absence that clients cannot parse
            headers.update(_unlimited(kind))
            continue
        headers[f"x-ratelimit-limit-{kind}"] = str(limit)
        if remaining is not None:
            headers[f"x-ratelimit-remaining-{kind}"] = str(remaining)
        if reset is not None:
            headers[f"x-ratelimit-reset-{kind}"] = format_reset(reset)
    return headers


def refusal_headers(exc: RateLimitExceededError) -> dict[str, str]:
    """The headers of a tenant's limit's refusal: the six above, ``Retry-After``, and ``x-should-retry: false`` where no
    wait helps (a monthly budget spent, a request larger than a whole minute's limit), which the OpenAI SDKs honour."""
    headers = {**rate_limit_headers(exc.state), "Retry-After": str(exc.retry_after_s)}
    if isinstance(exc, QuotaExceededError | RequestTooLargeError):
        headers["x-should-retry"] = "false"
    return headers


def _unlimited(kind: str) -> dict[str, str]:
    return {
        f"x-ratelimit-limit-{kind}": str(UNLIMITED),
        f"x-ratelimit-remaining-{kind}": str(UNLIMITED),
        f"x-ratelimit-reset-{kind}": "0s",
    }


def format_reset(seconds: float) -> str:
    """A duration the way OpenAI's ``x-ratelimit-reset-*`` headers write it: ``120ms``, ``1s``, ``1.5s``, ``6m0s``."""
    ms = max(0, round(seconds * 1000))
    if ms == 0:
        return "0s"
    if ms < 1000:
        return f"{ms}ms"
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    secs = f"{ms / 1000:.3f}".rstrip("0").rstrip(".")
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"
