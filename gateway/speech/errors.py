"""The speech domain's errors: what went wrong, in the domain's words, with the fields a caller needs to answer it.

The speech pipeline, its dictionaries and its jobs raise these and nothing of any API family; each API family has one
table that gives them its shape (OpenAI's in ``gateway/http/errors.py``, ElevenLabs' in
``gateway/elevenlabs/errors.py``, each socket dialect's beside its session). This module imports no dialect (an import
contract says so).

::

    SpeechError                       kind (machine-readable), message, param
    ├── InvalidSpeechRequestError     a request refused as it is
    │   └── InputTooLongError         limit: the most characters allowed
    ├── UnknownModelError             model
    ├── ModelNotAllowedError          model
    ├── UnknownVoiceError             voice_id (kind: voice_not_found, or voice_not_offered by the model)
    ├── UnknownDictionaryError        dictionary_id, version_id
    ├── UnknownJobError               job_id
    ├── ConflictError                 changed by other requests meanwhile
    ├── OverLimitError                retry_after_s (a rate or concurrency limit of the domain's own)
    │   └── JobQuotaError             held: a tenant's jobs, or their stored bytes
    └── FailoverExhaustedError        error: the most telling engine error; retries: the retries taken

    ResponseTruncatedError            a response whose first bytes went out ends short (not a refusal)
"""

from __future__ import annotations

from typing import Literal

__all__ = [
    "ConflictError",
    "FailoverExhaustedError",
    "InputTooLongError",
    "InvalidSpeechRequestError",
    "JobQuotaError",
    "ModelNotAllowedError",
    "OverLimitError",
    "ResponseTruncatedError",
    "SpeechError",
    "UnknownDictionaryError",
    "UnknownJobError",
    "UnknownModelError",
    "UnknownVoiceError",
]

InvalidKind = Literal[
    "invalid_value",
    "unsupported_value",
    "string_above_max_length",
    "phoneme_not_supported",
    "invalid_pronunciation_rules",
    "pronunciation_dictionary_limit_reached",
]
"""Why a request is refused as it is: a value out of range, a value this path does not take, a text too long, a
dictionary rule no engine can say, rules that do not parse, a tenant's dictionaries at their cap."""


class SpeechError(Exception):
    """Something the speech domain refuses or cannot do; ``kind`` names it for machines, ``message`` for people,
    ``param`` the request's field it is about (if one is)."""

    def __init__(self, message: str, *, kind: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind
        self.param = param


class InvalidSpeechRequestError(SpeechError):
    """A request the domain refuses as it is (its values, not who sent it)."""

    def __init__(self, message: str, *, kind: InvalidKind, param: str | None = None) -> None:
        super().__init__(message, kind=kind, param=param)


class InputTooLongError(InvalidSpeechRequestError):
    """A text over ``limit`` characters (the input itself, or what it becomes once respelled and expanded)."""

    def __init__(
        self,
        message: str,
        *,
        limit: int,
        kind: Literal["invalid_value", "string_above_max_length"] = "string_above_max_length",
        param: str = "input",
    ) -> None:
        super().__init__(message, kind=kind, param=param)
        self.limit = limit


class UnknownModelError(SpeechError):
    """No engine nor alias has this name."""

    def __init__(self, model: str) -> None:
        super().__init__(
            f"The model `{model}` does not exist or you do not have access to it.",
            kind="model_not_found",
            param="model",
        )
        self.model = model


class ModelNotAllowedError(SpeechError):
    """The tenant may not use this model."""

    def __init__(self, model: str) -> None:
        super().__init__(f"Your tenant may not use the model `{model}`.", kind="model_not_allowed", param="model")
        self.model = model


class UnknownVoiceError(SpeechError):
    """A custom voice the caller does not have (``voice_not_found``), or a built-in voice its model does not offer
    (``voice_not_offered``)."""

    def __init__(
        self,
        message: str,
        *,
        voice_id: str,
        param: str = "voice",
        kind: Literal["voice_not_found", "voice_not_offered"] = "voice_not_found",
    ) -> None:
        super().__init__(message, kind=kind, param=param)
        self.voice_id = voice_id


class UnknownDictionaryError(SpeechError):
    """A pronunciation dictionary (or a version of it) the tenant does not have."""

    def __init__(self, dictionary_id: str, version_id: str | None = None) -> None:
        what = f"version '{version_id}' of " if version_id else ""
        super().__init__(
            f"The {what}pronunciation dictionary '{dictionary_id}' was not found.",
            kind="pronunciation_dictionary_not_found",
            param="pronunciation_dictionary_id",
        )
        self.dictionary_id = dictionary_id
        self.version_id = version_id


class UnknownJobError(SpeechError):
    """A speech job the tenant does not have (another tenant's is not found either)."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"Speech job '{job_id}' was not found.", kind="job_not_found", param="job_id")
        self.job_id = job_id


class ConflictError(SpeechError):
    """A change lost to other requests changing the same thing; retrying may succeed."""

    def __init__(self, message: str) -> None:
        super().__init__(message, kind="conflict")


class OverLimitError(SpeechError):
    """Over a limit of the domain's own (compiling dictionaries, following jobs); ``retry_after_s``: when to retry, if
    waiting helps."""

    def __init__(
        self,
        message: str,
        *,
        kind: Literal["rate_limit_exceeded", "concurrency_limit_exceeded", "job_too_many_jobs", "job_storage_quota"],
        retry_after_s: int | None = None,
    ) -> None:
        super().__init__(message, kind=kind)
        self.retry_after_s = retry_after_s


class JobQuotaError(OverLimitError):
    """A new job over its tenant's cap: the jobs it holds, or their stored audio (``held`` of either)."""

    def __init__(self, message: str, *, reason: Literal["too_many_jobs", "storage_quota"], held: int) -> None:
        super().__init__(message, kind="job_too_many_jobs" if reason == "too_many_jobs" else "job_storage_quota")
        self.reason = reason
        self.held = held


class FailoverExhaustedError(SpeechError):
    """No engine of a request's model produced audio: ``error`` is the most telling engine error (its cause too),
    ``retries`` the retries the request took (a client is told them, as on a success)."""

    def __init__(self, error: Exception, retries: int) -> None:
        super().__init__(str(error), kind="failover_exhausted")
        self.error = error
        self.retries = retries


class ResponseTruncatedError(Exception):
    """A response whose first bytes went out ends short (its engine failed or was cut off): it has been logged and
    counted where it happened, and the HTTP layer ends the response without its last chunk, so that the client sees
    it incomplete, with no traceback (``gateway/http/tracking.py``)."""
