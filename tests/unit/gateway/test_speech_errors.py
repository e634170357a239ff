"""The speech domain's errors through each API family's table: what a client of each sees, pinned to the bodies,
statuses and headers they were answered with before the domain raised errors of its own (issue #48)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from engines.errors import EngineOverloadedError, SynthesisFailedError
from gateway.elevenlabs.errors import as_elevenlabs_error, socket_error
from gateway.elevenlabs.socket_wire import error_message
from gateway.http.errors import as_openai_error, error_body
from gateway.http.socket_errors import socket_error as openai_socket_error
from gateway.speech.errors import (
    ConflictError,
    FailoverExhaustedError,
    InputTooLongError,
    InvalidSpeechRequestError,
    JobQuotaError,
    ModelNotAllowedError,
    OverLimitError,
    SpeechError,
    UnknownDictionaryError,
    UnknownJobError,
    UnknownModelError,
    UnknownVoiceError,
)

NOT_OFFERED = UnknownVoiceError("Voice 'x' is not available.", voice_id="x", kind="voice_not_offered")
CUSTOM_GONE = UnknownVoiceError("Custom voice 'voice_1' was not found.", voice_id="voice_1")
COMPILES = OverLimitError("Rate limit reached for compiling.", kind="rate_limit_exceeded", retry_after_s=19)
FOLLOWERS = OverLimitError("Your tenant follows 4 jobs' events.", kind="concurrency_limit_exceeded", retry_after_s=1)
JOBS_HELD = JobQuotaError("Your tenant holds 3 jobs.", reason="too_many_jobs", held=3)
VERSION_GONE = "The version 'v2' of pronunciation dictionary 'pd_1' was not found."
STORED = JobQuotaError("This job needs about 9 bytes.", reason="storage_quota", held=8)

# (error, OpenAI's (status, body, headers), ElevenLabs' REST (status, detail.status, message), its socket payload)
CASES: list[tuple[SpeechError, tuple[int, str, str | None, str | None, dict[str, str]], tuple[int, str, str]]] = [
    (
        UnknownModelError("m"),
        (404, "invalid_request_error", "model", "model_not_found", {}),
        (404, "model_not_found", "The model `m` does not exist or you do not have access to it."),
    ),
    (
        ModelNotAllowedError("m"),
        (403, "invalid_request_error", "model", "model_not_allowed", {}),
        (403, "model_not_allowed", "Your tenant may not use the model `m`."),
    ),
    (
        NOT_OFFERED,
        (400, "invalid_request_error", "voice", "invalid_value", {}),
        (404, "voice_not_found", "A voice with the voice_id 'x' was not found."),
    ),
    (
        CUSTOM_GONE,
        (404, "invalid_request_error", "voice", "voice_not_found", {}),
        (404, "voice_not_found", "A voice with the voice_id 'voice_1' was not found."),
    ),
    (
        InputTooLongError(
            "Invalid value for 'input': String should have at most 9 characters", limit=9, kind="invalid_value"
        ),
        (400, "invalid_request_error", "input", "invalid_value", {}),
        (400, "invalid_value", "Invalid value for 'input': String should have at most 9 characters"),
    ),
    (
        InvalidSpeechRequestError("Your tenant has 5 dictionaries.", kind="pronunciation_dictionary_limit_reached"),
        (400, "invalid_request_error", None, "pronunciation_dictionary_limit_reached", {}),
        (400, "pronunciation_dictionary_limit_reached", "Your tenant has 5 dictionaries."),
    ),
    (
        UnknownDictionaryError("pd_1", "v2"),
        (404, "invalid_request_error", "pronunciation_dictionary_id", "pronunciation_dictionary_not_found", {}),
        (
            404,
            "pronunciation_dictionary_not_found",
            "The version 'v2' of pronunciation dictionary 'pd_1' was not found.",
        ),
    ),
    (
        UnknownJobError("job_1"),
        (404, "invalid_request_error", "job_id", "not_found", {}),
        (404, "not_found", "Speech job 'job_1' was not found."),
    ),
    (
        ConflictError("Changed by other requests; try again."),
        (409, "invalid_request_error", None, "conflict", {}),
        (409, "conflict", "Changed by other requests; try again."),
    ),
    (
        COMPILES,
        (429, "requests", None, "rate_limit_exceeded", {"Retry-After": "19"}),
        (429, "rate_limit_exceeded", "Rate limit reached for compiling."),
    ),
    (
        FOLLOWERS,
        (429, "requests", None, "concurrency_limit_exceeded", {"Retry-After": "1"}),
        (429, "too_many_concurrent_requests", "Your tenant follows 4 jobs' events."),
    ),
    (
        JOBS_HELD,
        (429, "insufficient_quota", None, "job_too_many_jobs", {}),
        (429, "job_too_many_jobs", "Your tenant holds 3 jobs."),
    ),
    (
        STORED,
        (429, "insufficient_quota", None, "job_storage_quota", {}),
        (429, "job_storage_quota", "This job needs about 9 bytes."),
    ),
]


@pytest.mark.parametrize(("error", "openai", "elevenlabs"), CASES, ids=[case[0].kind for case in CASES])
def test_each_family_answers_a_domain_error_as_it_did(
    error: SpeechError,
    openai: tuple[int, str, str | None, str | None, dict[str, str]],
    elevenlabs: tuple[int, str, str],
) -> None:
    status_code, kind, param, code, headers = openai
    answer = as_openai_error(error)
    assert (answer.status_code, answer.headers) == (status_code, headers)
    assert error_body(answer.message, answer.type, answer.param, answer.code) == error_body(
        error.message, kind, param, code
    )
    assert answer.source is error
    rest = as_elevenlabs_error(error, {"xi-api-key": "k"})
    assert (rest.status_code, rest.body(), rest.headers) == (
        elevenlabs[0],
        {"detail": {"status": elevenlabs[1], "message": elevenlabs[2]}},
        headers,
    )
    # ElevenLabs' sockets name an error as OpenAI's routes do (their first release's words), in their own payload.
    assert json.loads(error_message(socket_error(error))) == {
        "message": error.message,
        "error": code,
        "code": status_code,
    }
    assert openai_socket_error(error).code == code


def test_failover_that_gave_up_answers_its_engines_error_with_the_retries() -> None:
    exhausted = FailoverExhaustedError(EngineOverloadedError("e", 3), retries=2)
    answer = as_openai_error(exhausted)
    assert (answer.status_code, answer.code) == (503, "engine_overloaded")
    assert answer.headers == {"Retry-After": "3", "x-retries": "2"}
    rest = as_elevenlabs_error(exhausted, {"xi-api-key": "k"})
    # ElevenLabs sends its ``system_busy`` as a 429 (OpenAI's routes: 503 ``engine_overloaded``).
    assert (rest.status_code, rest.code, rest.headers) == (429, "system_busy", {"Retry-After": "3", "x-retries": "2"})
    on_socket = json.loads(error_message(socket_error(exhausted)))
    assert on_socket == {"message": str(exhausted.error), "error": "engine_overloaded", "code": 503}
    failed = as_openai_error(FailoverExhaustedError(SynthesisFailedError("boom"), retries=0))
    assert (failed.message, failed.headers["x-retries"]) == ("The engine failed: boom", "0")


def test_a_socket_refusal_is_answered_in_the_rest_routes_words() -> None:
    """The ElevenLabs handshake refuses with the error its socket carries: its REST words, not its socket's."""
    carried = socket_error(NOT_OFFERED)
    rest: Any = as_elevenlabs_error(carried, {})
    assert (rest.status_code, rest.code) == (404, "voice_not_found")
