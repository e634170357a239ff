"""The refusals every API family shares (the HTTP guards', auth's, the limits', the engines') through each family's
table: what an OpenAI client and an ElevenLabs client see, pinned to what they were answered before the guards
raised errors of their own (issue #48), and ElevenLabs' answer taken from its own table, not from OpenAI's codes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from litestar.exceptions import InternalServerException, NotFoundException
from litestar.testing import AsyncTestClient
from redis.exceptions import RedisError

from auth.errors import AuthBackendError, InvalidCredentialsError, UnknownTenantError
from auth.limits import LimitsUnavailableError, QuotaExceededError, RateLimitExceededError
from auth.limits.base import BudgetState, LimitState, Month
from engines.errors import EngineNotReadyError, EngineOverloadedError, SynthesisFailedError
from gateway.elevenlabs.errors import as_elevenlabs_error
from gateway.http.connection_refusals import (
    over_capacity,
    refusal_bodies,
    request_line_target,
    target_of,
    too_many_from_address,
)
from gateway.http.errors import as_openai_error, error_body
from gateway.http.refusals import (
    AddressThrottledError,
    ClientClosedError,
    JsonTooDeepError,
    NotServedHereError,
    ProtocolRefusalError,
    RefusedBeforeBodyError,
    UnsupportedMediaTypeError,
    quota_message,
)
from gateway.uploads.errors import TooManyUploadsError, UploadsBusyError
from tests.inprocess import in_process_app

# 2026-01-01T00:00:00Z, the end of the month the budgets count in.
MONTH = Month(start=1764547200, end=1767225600)
STATE = LimitState(
    limit_requests=10,
    remaining_requests=0,
    reset_requests_s=3.0,
    budget=BudgetState(month=MONTH, characters_limit=100, characters_used=90),
)
LIMIT_HEADERS = {
    "x-ratelimit-limit-requests": "10",
    "x-ratelimit-remaining-requests": "0",
    "x-ratelimit-reset-requests": "3s",
    # a tenant without a characters limit: OpenAI's SDKs read the headers as numbers, so "unlimited" is the largest
    "x-ratelimit-limit-tokens": "2147483647",
    "x-ratelimit-remaining-tokens": "2147483647",
    "x-ratelimit-reset-tokens": "0s",
}
RETRY_1 = {"Retry-After": "1"}
THROTTLED = "Too many refused credentials from your address; retry after 5 s."
ADMIN_THROTTLED = "Too many failed admin authentications; retry after 5 s."
ENGINE_NODE = "Custom voices and consent recordings are managed by the front gateway, not an engine node."
QUOTA = (
    "You exceeded your current quota: your monthly budget of 100 input characters: 10 remain, this request needs 20. "
    "It starts again at 2026-01-01T00:00:00Z."
)
GONE_MID_BODY = "The client closed the connection before sending the whole body."
UPLOADS = "Your tenant has 4 uploads in flight, the most it may have at once. Retry after 2 s."
NEEDS_AUTHORIZATION = "Neither authorization header nor xi-api-key received, please provide one."
DEEP_32 = "The JSON body is nested deeper than 32 levels."
BACKEND = "A backend of the gateway is unreachable; retry soon."
HEAD_TOO_LARGE = "The request headers are too large."
FROM_ADDRESS = "Too many open connections from your address; close some or retry soon."
OVER_CAPACITY = "The server has too many open connections; retry soon."

# (error, OpenAI's (status, type, code, message, headers), ElevenLabs' (status, detail.status, message, headers)),
# for a request that presented a credential.
OpenAIAnswer = tuple[int, str, str | None, str, dict[str, str]]
ElevenLabsAnswer = tuple[int, str, str, dict[str, str]]
CASES: list[tuple[str, Exception, OpenAIAnswer, ElevenLabsAnswer]] = [
    (
        "not_served_here",
        NotServedHereError(ENGINE_NODE),
        (404, "invalid_request_error", "not_found", ENGINE_NODE, {}),
        (404, "not_found", ENGINE_NODE, {}),
    ),
    (
        "address_throttled",
        AddressThrottledError(THROTTLED, retry_after_s=5, kind="too_many_failed_authentications"),
        (429, "requests", "too_many_failed_authentications", THROTTLED, {"Retry-After": "5"}),
        (429, "too_many_failed_authentications", THROTTLED, {"Retry-After": "5"}),
    ),
    (
        "admin_throttled",
        AddressThrottledError(ADMIN_THROTTLED, retry_after_s=5, kind="rate_limit_exceeded"),
        (429, "requests", "rate_limit_exceeded", ADMIN_THROTTLED, {"Retry-After": "5"}),
        (429, "rate_limit_exceeded", ADMIN_THROTTLED, {"Retry-After": "5"}),
    ),
    (
        "unsupported_media_type",
        UnsupportedMediaTypeError("text/plain"),
        (
            415,
            "invalid_request_error",
            "unsupported_media_type",
            "Unsupported content type 'text/plain': send application/json.",
            {},
        ),
        (415, "unsupported_media_type", "Unsupported content type 'text/plain': send application/json.", {}),
    ),
    (
        "json_too_deep",
        JsonTooDeepError(64),
        (400, "invalid_request_error", "json_too_deep", "The JSON body is nested deeper than 64 levels.", {}),
        (400, "json_too_deep", "The JSON body is nested deeper than 64 levels.", {}),
    ),
    (
        "client_closed",
        ClientClosedError("The client left."),
        (499, "invalid_request_error", "client_closed_request", "The client left.", {}),
        (499, "client_closed_request", "The client left.", {}),
    ),
    (
        "client_gone_mid_body",
        InternalServerException(detail="client disconnected prematurely"),
        (499, "invalid_request_error", "client_closed_request", GONE_MID_BODY, {}),
        (499, "client_closed_request", GONE_MID_BODY, {}),
    ),
    (
        "refused_before_body",
        RefusedBeforeBodyError(UnknownTenantError("Tenant 't' does not exist.")),
        (403, "invalid_request_error", "unknown_tenant", "Tenant 't' does not exist.", {"connection": "close"}),
        (403, "unknown_tenant", "Tenant 't' does not exist.", {"connection": "close"}),
    ),
    (
        "invalid_credentials",
        InvalidCredentialsError("Invalid admin token."),
        (401, "invalid_request_error", "invalid_api_key", "Invalid admin token.", {}),
        (401, "invalid_api_key", "Invalid admin token.", {}),
    ),
    (
        "rate_limited",
        RateLimitExceededError("requests", 7, STATE),
        (
            429,
            "requests",
            "rate_limit_exceeded",
            "Rate limit reached for requests per minute. Retry after 7 s.",
            {**LIMIT_HEADERS, "Retry-After": "7"},
        ),
        (
            429,
            "rate_limit_exceeded",
            "Rate limit reached for requests per minute. Retry after 7 s.",
            {**LIMIT_HEADERS, "Retry-After": "7"},
        ),
    ),
    (
        "characters_limited",
        RateLimitExceededError("characters", 7, STATE),
        (
            429,
            "tokens",
            "rate_limit_exceeded",
            "Rate limit reached for input characters per minute. Retry after 7 s.",
            {**LIMIT_HEADERS, "Retry-After": "7"},
        ),
        (
            429,
            "rate_limit_exceeded",
            "Rate limit reached for input characters per minute. Retry after 7 s.",
            {**LIMIT_HEADERS, "Retry-After": "7"},
        ),
    ),
    (
        "bodies_in_flight",
        RateLimitExceededError("bodies", 1, STATE),
        (
            429,
            "requests",
            "concurrency_limit_exceeded",
            "Too many requests of your tenant are still sending their body. Retry after 1 s.",
            {**LIMIT_HEADERS, **RETRY_1},
        ),
        (
            429,
            "too_many_concurrent_requests",
            "Too many requests of your tenant are still sending their body. Retry after 1 s.",
            {**LIMIT_HEADERS, **RETRY_1},
        ),
    ),
    (
        "quota_exceeded",
        QuotaExceededError("characters_per_month", 1000, STATE, 20),
        (
            429,
            "insufficient_quota",
            "insufficient_quota",
            QUOTA,
            {**LIMIT_HEADERS, "Retry-After": "1000", "x-should-retry": "false"},
        ),
        (401, "quota_exceeded", QUOTA, {**LIMIT_HEADERS, "Retry-After": "1000", "x-should-retry": "false"}),
    ),
    (
        "engine_not_ready",
        EngineNotReadyError("e", "loading"),
        (503, "server_error", "engine_not_ready", "engine 'e' is not ready: loading", {"Retry-After": "5"}),
        (503, "engine_not_ready", "engine 'e' is not ready: loading", {"Retry-After": "5"}),
    ),
    (
        "engine_overloaded",
        EngineOverloadedError("e", 4),
        (
            503,
            "server_error",
            "engine_overloaded",
            "engine 'e' is overloaded, retry after 4 s",
            {"Retry-After": "4"},
        ),
        # ElevenLabs' own status for its system_busy (issue #48: it was OpenAI's 503)
        (429, "system_busy", "engine 'e' is overloaded, retry after 4 s", {"Retry-After": "4"}),
    ),
    (
        "engine_failed",
        SynthesisFailedError("boom"),
        (503, "server_error", "engine_failed", "The engine failed: boom", RETRY_1),
        (503, "engine_failed", "The engine failed: boom", RETRY_1),
    ),
    (
        "uploads_busy",
        UploadsBusyError("Busy.", 3),
        (503, "server_error", "uploads_busy", "Busy.", {"Retry-After": "3"}),
        (503, "uploads_busy", "Busy.", {"Retry-After": "3"}),
    ),
    (
        "too_many_uploads",
        TooManyUploadsError(4, 2),
        (429, "requests", "concurrency_limit_exceeded", UPLOADS, {"Retry-After": "2"}),
        (429, "too_many_concurrent_requests", UPLOADS, {"Retry-After": "2"}),
    ),
    *(
        (
            f"backend_{type(down).__name__}",
            down,
            (503, "server_error", "backend_unavailable", BACKEND, RETRY_1),
            (503, "backend_unavailable", BACKEND, RETRY_1),
        )
        for down in (LimitsUnavailableError("x"), AuthBackendError("x"), RedisError("x"))
    ),
    (
        "protocol_head_too_large",
        ProtocolRefusalError(431, HEAD_TOO_LARGE, "request_headers_too_large"),
        (431, "invalid_request_error", "request_headers_too_large", HEAD_TOO_LARGE, {}),
        (431, "request_headers_too_large", HEAD_TOO_LARGE, {}),
    ),
    (
        "protocol_http_version",
        ProtocolRefusalError(505, "HTTP/2.0 is not supported: speak HTTP/1.1.", "http_version_not_supported"),
        (
            505,
            "invalid_request_error",
            "http_version_not_supported",
            "HTTP/2.0 is not supported: speak HTTP/1.1.",
            {},
        ),
        (505, "http_version_not_supported", "HTTP/2.0 is not supported: speak HTTP/1.1.", {}),
    ),
    (
        "protocol_too_many_from_address",
        too_many_from_address(),
        (429, "requests", "too_many_connections", FROM_ADDRESS, RETRY_1),
        (429, "too_many_connections", FROM_ADDRESS, RETRY_1),
    ),
    (
        "protocol_over_capacity",
        over_capacity(),
        (503, "server_error", "too_many_connections", OVER_CAPACITY, RETRY_1),
        (503, "too_many_connections", OVER_CAPACITY, RETRY_1),
    ),
    (
        "http_not_found",
        NotFoundException(detail="Not here."),
        (404, "invalid_request_error", "not_found", "Not here.", {}),
        (404, "not_found", "Not here.", {}),
    ),
]


@pytest.mark.parametrize(("error", "openai", "elevenlabs"), [case[1:] for case in CASES], ids=[c[0] for c in CASES])
def test_each_family_answers_a_shared_refusal_as_it_did(
    error: Exception, openai: OpenAIAnswer, elevenlabs: ElevenLabsAnswer
) -> None:
    status_code, kind, code, message, headers = openai
    answer = as_openai_error(error)
    assert (answer.status_code, answer.headers) == (status_code, headers)
    assert error_body(answer.message, answer.type, answer.param, answer.code) == error_body(message, kind, None, code)
    rest = as_elevenlabs_error(error, {"xi-api-key": "k"})
    assert (rest.status_code, rest.body(), rest.headers) == (
        elevenlabs[0],
        {"detail": {"status": elevenlabs[1], "message": elevenlabs[2]}},
        elevenlabs[3],
    )


@pytest.mark.parametrize(
    "error",
    [
        InvalidCredentialsError("Invalid API key."),
        RefusedBeforeBodyError(InvalidCredentialsError("Invalid API key.")),
    ],
    ids=["refused", "refused_before_body"],
)
def test_a_401_without_any_credential_is_needs_authorization_on_elevenlabs_routes(error: Exception) -> None:
    presented = as_elevenlabs_error(error, {"authorization": "Bearer k"})
    assert (presented.status_code, presented.code) == (401, "invalid_api_key")
    missing: Any = as_elevenlabs_error(error, {})
    assert (missing.status_code, missing.body()["detail"]["status"]) == (401, "needs_authorization")
    assert (
        missing.body()["detail"]["message"]
        == "Neither authorization header nor xi-api-key received, please provide one."
    )
    assert as_openai_error(error).code == "invalid_api_key"  # OpenAI's table does not tell them apart


def test_a_spent_quota_is_never_needs_authorization() -> None:
    answer = as_elevenlabs_error(QuotaExceededError("characters_per_month", 9, STATE, 1), {})
    assert (answer.status_code, answer.code) == (401, "quota_exceeded")


SPENT = BudgetState(
    month=MONTH, characters_limit=200, characters_used=215, audio_seconds_limit=3, audio_seconds_used=3.2
)


@pytest.mark.parametrize(
    ("refused", "standing"),
    [
        (
            QuotaExceededError("characters_per_month", 9, STATE, 20),
            "100 input characters: 10 remain, this request needs 20",
        ),
        # A session or a job asks no characters as it opens: what was used says why it is refused (before: "0 remain,
        # this request needs 0").
        (
            QuotaExceededError("characters_per_month", 9, LimitState(budget=SPENT), 0),
            "200 input characters is spent (215 used this month)",
        ),
        (
            QuotaExceededError("audio_seconds_per_month", 9, LimitState(budget=SPENT), 0),
            "3 audio seconds is spent (3.2 used this month)",
        ),
    ],
    ids=["characters asked", "nothing asked", "audio"],
)
def test_a_spent_budget_is_said_with_the_numbers_that_refused_it(refused: QuotaExceededError, standing: str) -> None:
    assert quota_message(refused) == (
        f"You exceeded your current quota: your monthly budget of {standing}. It starts again at 2026-01-01T00:00:00Z."
    )


def test_a_refusal_a_socket_carries_is_answered_from_its_source() -> None:
    """A handshake refused with the error object a socket carries (OpenAI's, for now) is answered from the refusal it
    renders, in ElevenLabs' table: a spent quota is 401 ``quota_exceeded``, a tenant's concurrency limit
    ``too_many_concurrent_requests``."""
    quota = as_elevenlabs_error(as_openai_error(QuotaExceededError("characters_per_month", 9, STATE, 1)), {"a": "b"})
    assert (quota.status_code, quota.code) == (401, "quota_exceeded")
    sessions = as_elevenlabs_error(as_openai_error(RateLimitExceededError("sessions", 1, STATE)), {"xi-api-key": "k"})
    assert (sessions.status_code, sessions.code) == (429, "too_many_concurrent_requests")


# ------------------------------------------------------------------------------------------ through the real app

IN_PROCESS: dict[str, Any] = {
    "engines": {"chattts": None, "tones": {"kind": "synthetic", "options": {"seconds_per_char": 0.01}}},
    "aliases": {"tts-1": ["tones"], "eleven_multilingual_v2": ["tones"]},
}
SPEAK = {"model": "tts-1", "voice": "alloy", "input": "Hello."}
SAY = {"text": "Hello.", "model_id": "tones"}


async def test_the_guards_refusals_reach_each_family_in_its_shape() -> None:
    """A guard's refusal on an ElevenLabs route answers from ElevenLabs' table, on an OpenAI route from OpenAI's: a
    credential refused from the head (the body unread, so the connection closes) and a body nested too deep."""
    config = {**IN_PROCESS, "auth": {"admin_token": "refusal-tables-admin-token-0123456789"}}
    async with AsyncTestClient(app=in_process_app(config)) as http:
        wrong = {"xi-api-key": "sk-wrong"}
        eleven = await http.post("/v1/text-to-speech/alloy", json=SAY, headers=wrong)
        assert (eleven.status_code, eleven.json()["detail"]["status"]) == (401, "invalid_api_key")
        assert eleven.headers["connection"] == "close"
        missing = await http.post("/v1/text-to-speech/alloy", json=SAY)
        assert missing.json()["detail"] == {"status": "needs_authorization", "message": NEEDS_AUTHORIZATION}
        openai_ = await http.post("/v1/audio/speech", json=SPEAK, headers={"authorization": "Bearer sk-wrong"})
        assert (openai_.status_code, openai_.json()["error"]["code"]) == (401, "invalid_api_key")
        assert openai_.headers["connection"] == "close"
    async with AsyncTestClient(app=in_process_app(IN_PROCESS)) as http:
        deep = b'{"text": ' + b"[" * 40 + b"]" * 40 + b"}"
        eleven = await http.post("/v1/text-to-speech/alloy", content=deep, headers={"content-type": "application/json"})
        assert eleven.json() == {"detail": {"status": "json_too_deep", "message": DEEP_32}}
        assert eleven.status_code == 400
        openai_ = await http.post("/v1/audio/speech", content=deep, headers={"content-type": "application/json"})
        assert (openai_.status_code, openai_.json()["error"]["code"]) == (400, "json_too_deep")


@dataclass(frozen=True)
class RoutingRefusal:
    """A request the app's routing refuses itself, and the family that answers it."""

    method: str
    path: str
    status: int
    family: str
    allow: frozenset[str] = frozenset()
    """The methods its ``Allow`` names (a 405's)."""
    headers: tuple[tuple[str, str], ...] = ()

    def __str__(self) -> str:
        return f"{self.method} {self.path}{' xi-api-key' if self.headers else ''}"


POST_ONLY, GET_ONLY = frozenset({"POST", "OPTIONS"}), frozenset({"GET", "OPTIONS"})
XI = (("xi-api-key", "k"),)
ROUTING_REFUSALS = [
    RoutingRefusal("DELETE", "/v1/text-to-speech/alloy", 405, "elevenlabs", POST_ONLY),
    RoutingRefusal("GET", "/v1/text-to-speech/alloy", 405, "elevenlabs", POST_ONLY),
    RoutingRefusal("PUT", "/v1/voices", 405, "elevenlabs", GET_ONLY),
    RoutingRefusal("POST", "/v1/text-to-speech/alloy/multi-stream-input", 405, "elevenlabs", frozenset({"websocket"})),
    RoutingRefusal("GET", "/v1/text-to-speech/alloy/nothing", 404, "elevenlabs"),  # under a route of ElevenLabs'
    RoutingRefusal("GET", "/v1/voices/alloy/settings/nothing", 404, "elevenlabs"),
    RoutingRefusal("POST", "/v1/text-to-dialogue/nothing/more", 404, "elevenlabs"),
    RoutingRefusal("PATCH", "/v1/models", 405, "elevenlabs", GET_ONLY, XI),  # the route answers in the caller's shape
    RoutingRefusal("GET", "/v1/nothing", 404, "elevenlabs", headers=XI),  # under no route: the caller's shape
    RoutingRefusal("GET", "/v1/nothing", 404, "openai"),
    RoutingRefusal("GET", "/v1/audio/speech", 405, "openai", POST_ONLY),
    RoutingRefusal("GET", "/v1/audio/voices/v/nothing", 404, "openai"),
    RoutingRefusal("PATCH", "/v1/models", 405, "openai", GET_ONLY),
]


@pytest.mark.parametrize("refusal", ROUTING_REFUSALS, ids=str)
async def test_a_path_or_method_no_route_takes_is_refused_in_its_familys_shape(refusal: RoutingRefusal) -> None:
    """The routing's 404 and 405 come before any route's handlers: the family whose routes the path is on (or under),
    else the caller's, answers them from its table, with the routing's status and ``Allow``."""
    async with AsyncTestClient(app=in_process_app(IN_PROCESS)) as http:
        answer = await http.request(refusal.method, refusal.path, headers=dict(refusal.headers))
    assert answer.status_code == refusal.status
    assert set(filter(None, answer.headers.get("allow", "").split(", "))) == refusal.allow
    if refusal.family == "elevenlabs":
        named = {405: ("method_not_allowed", "Method Not Allowed"), 404: ("not_found", "Not Found")}[refusal.status]
        assert answer.json() == {"detail": dict(zip(("status", "message"), named, strict=True))}
    else:
        assert set(answer.json()["error"]) == {"message", "type", "param", "code"}


async def test_a_deep_path_under_a_route_costs_a_bounded_number_of_routing_lookups(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Finding the family of a 404 walks the path's ancestors, a routing lookup each: a path of 8,000 segments (what
    a 16 KiB head holds) made 8,000 lookups of the whole path, about 0.6 s of the event loop per request."""
    async with AsyncTestClient(app=in_process_app(IN_PROCESS)) as http:
        router = http.app.asgi_router
        lookups = 0
        route = router.handle_routing

        def counted(path: str, method: Any) -> Any:
            nonlocal lookups
            lookups += 1
            return route(path=path, method=method)

        monkeypatch.setattr(router, "handle_routing", counted)
        answer = await http.get("/v1/voices/alloy/settings/" + "a/" * 8000)
    assert answer.status_code == 404
    assert answer.json() == {"detail": {"status": "not_found", "message": "Not Found"}}  # still ElevenLabs' route's
    assert lookups <= 20


async def test_an_overloaded_engine_is_elevenlabs_system_busy_429_and_openais_503() -> None:
    async with AsyncTestClient(app=in_process_app(IN_PROCESS, capacity=0)) as full:
        eleven = await full.post("/v1/text-to-speech/alloy", json=SAY)
        openai_ = await full.post("/v1/audio/speech", json=SPEAK)
    assert (eleven.status_code, eleven.json()["detail"]["status"], eleven.headers["retry-after"]) == (
        429,
        "system_busy",
        "1",
    )
    assert (openai_.status_code, openai_.json()["error"]["code"], openai_.headers["retry-after"]) == (
        503,
        "engine_overloaded",
        "1",
    )


# ---------------------------------------------------------------------- refused by the HTTP protocol, before the app

HEAD_431 = ProtocolRefusalError(431, HEAD_TOO_LARGE, "request_headers_too_large")
OPENAI_431 = {
    "error": {
        "message": HEAD_TOO_LARGE,
        "type": "invalid_request_error",
        "param": None,
        "code": "request_headers_too_large",
    }
}
ELEVENLABS_431 = {"detail": {"status": "request_headers_too_large", "message": HEAD_TOO_LARGE}}


PROTOCOL_TARGETS: list[tuple[tuple[str, str] | None, dict[str, Any]]] = [
    (("POST", "/v1/text-to-speech/alloy"), ELEVENLABS_431),
    (("POST", "/v1/text-to-speech/alloy/stream/with-timestamps"), ELEVENLABS_431),
    (("GET", "/v1/text-to-speech/alloy/multi-stream-input"), ELEVENLABS_431),  # a socket's handshake
    (("POST", "/v1/text-to-dialogue/stream"), ELEVENLABS_431),
    (("GET", "/v1/voices"), ELEVENLABS_431),
    (("GET", "/v1/user/subscription"), ELEVENLABS_431),
    (("GET", "/v1/history/abc"), ELEVENLABS_431),  # ElevenLabs' own path, not served: its 404's shape too
    (("GET", "/v1/pronunciation-dictionaries/"), ELEVENLABS_431),
    (("POST", "/v1/audio/speech"), OPENAI_431),
    (("GET", "/v1/models"), OPENAI_431),  # OpenAI's list of models (ElevenLabs' is under /v1/models too: not here)
    (("GET", "/v1/audio/voices"), OPENAI_431),
    (("GET", "/healthz"), OPENAI_431),
    (("GET", "/nowhere"), OPENAI_431),  # the app routes it nowhere: its 404 is OpenAI's
    (("GET", "/v1/text-to-speech/alloy"), ELEVENLABS_431),  # not that method here: its 405 is ElevenLabs' too
    (("GET", "/v1/voices/alloy/nothing"), ELEVENLABS_431),  # under an ElevenLabs route: so is its 404
    (("GET", "/v1/audio/voices/v/nothing"), OPENAI_431),
    (None, OPENAI_431),  # before the request line was read
]


@pytest.mark.parametrize(
    ("target", "body"),
    PROTOCOL_TARGETS,
    ids=[" ".join(target) if target else "no-path" for target, _ in PROTOCOL_TARGETS],
)
def test_a_protocol_refusal_answers_in_the_body_of_its_paths_family(
    target: tuple[str, str] | None, body: dict[str, Any]
) -> None:
    """The family is the app's routing's: the refusal gets the body the route would give any error, from that
    family's one table."""
    bodies = refusal_bodies(in_process_app(IN_PROCESS))
    assert bodies(HEAD_431, target) == body


def test_a_protocol_refusals_body_is_the_family_table_s() -> None:
    """What the protocol sends is what the tables above answer (one place maps a refusal to each family's body)."""
    bodies = refusal_bodies(in_process_app(IN_PROCESS))
    for refusal in (too_many_from_address(), over_capacity(), HEAD_431):
        openai_ = as_openai_error(refusal)
        assert bodies(refusal, ("POST", "/v1/audio/speech")) == error_body(
            openai_.message, openai_.type, None, openai_.code
        )
        assert bodies(refusal, ("POST", "/v1/text-to-speech/x")) == as_elevenlabs_error(refusal, {}).body()


@pytest.mark.parametrize(
    ("data", "target"),
    [
        (b"POST /v1/text-to-speech/alloy HTTP/1.1\r\nHost: g\r\n", ("POST", "/v1/text-to-speech/alloy")),
        (b"GET /v1/voices?show_legacy=true HTTP/1.1\n", ("GET", "/v1/voices")),
        (b"GET /v1/voices/a%20b HTTP/1.1\r\n", ("GET", "/v1/voices/a b")),  # decoded, as uvicorn decodes it
        (b"GET http://gateway/v1/voices HTTP/1.1\r\n", ("GET", "/v1/voices")),  # absolute form
        (b"POST /v1/text-to-speech/al", None),  # the line unfinished
        (b"NOT HTTP AT ALL\r\n", None),
        (b"GET /v1/voices\r\n", None),  # HTTP/0.9's line: no version
        (b"", None),
    ],
)
def test_the_request_line_names_the_target_only_once_whole(data: bytes, target: tuple[str, str] | None) -> None:
    assert request_line_target(data) == target


def test_a_target_that_is_no_url_has_no_family() -> None:
    assert target_of(b"GET", b"http://[::1") is None
