"""OpenAI's wire types for speech, field for field (see ``openai/speech-schema.json`` in the shared notes)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Generic, Literal, Protocol, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationInfo, field_validator

from engines.remote.context import CONTINUING_FIELD, MAX_SPEAKER_CHARS, SPEAKER_FIELD
from gateway.audio.formats import SPEECH_SAMPLE_RATES, AudioFormat, sample_rates

if TYPE_CHECKING:
    from collections.abc import Callable

    from storage import Page

__all__ = [
    "CUSTOM_VOICE_PREFIX",
    "MAX_INPUT_CHARS",
    "MAX_JOB_INPUT_CHARS",
    "MAX_RAISED_INPUT_CHARS",
    "MAX_SEED",
    "CustomVoice",
    "EngineNodeSpeechRequest",
    "ErrorDetail",
    "ErrorResponse",
    "ListPage",
    "ModelList",
    "ModelObject",
    "SpeechJobCreate",
    "SpeechJobDeleted",
    "SpeechJobList",
    "SpeechJobObject",
    "SpeechJobProgress",
    "SpeechRequest",
    "SpeechUsage",
    "SpokenSettings",
    "TenantUsage",
    "UsageBudget",
    "VoiceConsentDeleted",
    "VoiceConsentList",
    "VoiceConsentObject",
    "VoiceDeleted",
    "VoiceList",
    "VoiceObject",
    "voice_reference",
]

MAX_INPUT_CHARS = 4096
"""OpenAI's longest ``input``: the cap of ``/v1/audio/speech`` unless a tenant is allowed more."""
MAX_SEED = 2**32 - 1
"""The largest ``seed`` of a speech request (ElevenLabs' bound: an unsigned 32-bit integer)."""
MAX_RAISED_INPUT_CHARS = 100_000
"""The longest ``input`` ``/v1/audio/speech`` parses at all (``speech.max_input_chars`` stays below it); each
request is then held to its tenant's cap (``limits.speech_input_characters``, else 4096) by the speech service."""

ItemT = TypeVar("ItemT")
RecordT = TypeVar("RecordT")


class Identified(Protocol):
    """An item of a listing: what its page's bounds are made of."""

    @property
    def id(self) -> str: ...


IdentifiedT = TypeVar("IdentifiedT", bound=Identified)


class ListPage(BaseModel, Generic[ItemT]):
    """A page of a listing in OpenAI's list shape, oldest (or first by name) first; the next page is
    ``?after=<last_id>`` while ``has_more``. Every paged listing of the gateway is one of these, so that neither a
    response nor the work behind it grows with what is listed.

    The OpenAPI document has one component per item type, each named after this model (``ListPage_KeyObject_``).
    """

    object: Literal["list"] = "list"
    data: list[ItemT]
    first_id: str | None
    """The first item's id; ``null`` on an empty page."""
    last_id: str | None
    """The cursor of the next page (``after``); ``null`` when the page holds nothing to continue from."""
    has_more: bool

    @classmethod
    def of(cls: type[ListPage[IdentifiedT]], data: list[IdentifiedT], *, has_more: bool) -> ListPage[IdentifiedT]:
        """The page of ``data``, bounded by its first and last items' ids."""
        first, last = (data[0].id, data[-1].id) if data else (None, None)
        return cls(data=data, first_id=first, last_id=last, has_more=has_more)

    @classmethod
    def of_records(
        cls: type[ListPage[IdentifiedT]], page: Page[RecordT], shown: Callable[[RecordT], IdentifiedT]
    ) -> ListPage[IdentifiedT]:
        """A store's page of records, each as ``shown`` makes it the API's object, as a listing route answers it."""
        return cls.of([shown(record) for record in page.data], has_more=page.has_more)

    @classmethod
    def model_parametrized_name(cls, params: tuple[Any, ...]) -> str:
        """``ListPage[KeyObject]``; a page of several kinds names each (``ListPage[BuiltInVoice | VoiceObject]``)."""
        kinds = [kind for param in params for kind in (get_args(param) or (param,))]
        return f"{cls.__name__}[{' | '.join(getattr(kind, '__name__', repr(kind)) for kind in kinds)}]"


class CustomVoice(BaseModel):
    """A reference to a custom voice: ``{"id": "voice_1234"}``."""

    model_config = ConfigDict(extra="forbid")

    id: Annotated[str, StringConstraints(min_length=1, max_length=256)]


CUSTOM_VOICE_PREFIX = "voice_"
"""How a custom voice's id begins, which tells it from a voice's name where both come as one string."""


def voice_reference(name: str) -> str | CustomVoice:
    """A voice given as one string (a socket's URL, a script's span, an alias's target), as a request names it: a
    custom voice by id (``voice_…``), else a built-in voice's or an alias's name."""
    return CustomVoice(id=name) if name.startswith(CUSTOM_VOICE_PREFIX) else name


class SpokenSettings(Protocol):
    """How a socket session speaks each of its segments (ours, OpenAI Realtime's): :meth:`SpeechRequest.pcm_segment`'s
    model, voice, speed and seed."""

    @property
    def model(self) -> str: ...
    @property
    def voice(self) -> str | CustomVoice: ...
    @property
    def speed(self) -> float: ...
    @property
    def seed(self) -> int | None: ...


class SpeechRequest(BaseModel):
    """``POST /v1/audio/speech`` — OpenAI's ``CreateSpeechRequest``."""

    model_config = ConfigDict(extra="forbid")

    model: Annotated[str, StringConstraints(min_length=1, max_length=256)]
    """A model or alias from ``GET /v1/models`` (``tts-1``, ``tts-1-hd``, ``gpt-4o-mini-tts``, ``chattts``, ...)."""
    # OpenAI's maximum in the API document (and every tenant's default); the speech service holds each request to
    # its tenant's cap.
    input: Annotated[str, Field(max_length=MAX_RAISED_INPUT_CHARS, json_schema_extra={"maxLength": MAX_INPUT_CHARS})]
    """The text to speak, 1 to 4096 characters after trimming (more for a tenant allowed more:
    ``limits.speech_input_characters``)."""
    voice: Annotated[str, StringConstraints(min_length=1, max_length=256)] | CustomVoice
    """A built-in voice name, or ``{"id": ...}`` for a custom voice."""
    instructions: Annotated[str | None, Field(max_length=MAX_INPUT_CHARS)] = None
    """Style instructions, passed to engines that can use them."""
    response_format: AudioFormat = AudioFormat.MP3
    speed: Annotated[float, Field(ge=0.25, le=4.0, strict=True)] = 1.0
    stream_format: Literal["audio", "sse"] = "audio"
    control_tokens: Annotated[bool, Field(strict=True)] = False
    """This gateway's extension: read the engine's control tokens typed in ``input`` (ChatTTS: ``[laugh]``,
    ``[uv_break]``, ``[lbreak]``, ``[oral_0-9]``, ``[laugh_0-2]``, ``[break_0-7]``, ``[speed_0-9]``); without it they
    are read as their words. Engines without control tokens read the text as written either way."""
    word_timestamps: Annotated[bool, Field(strict=True)] = False
    """This gateway's extension, with ``stream_format: "sse"`` only: ``speech.audio.timestamps`` events between the
    deltas (when each word and character is heard). Without it the stream is OpenAI's, every event of OpenAI's
    schema."""
    seed: Annotated[int | None, Field(ge=0, le=MAX_SEED, strict=True, json_schema_extra={"minimum": 0})] = None
    """This gateway's extension (as vLLM-Omni's and ElevenLabs' ``seed``): the same request with the same seed gives
    the same audio on a sampling engine (ChatTTS) with the same weights, version and decoder (docs/configuration.md:
    Reproducible speech). Engines that do not sample ignore it."""
    language_code: Annotated[
        str | None, StringConstraints(max_length=35, pattern=r"^[A-Za-z]{2,3}([-_][A-Za-z0-9]{1,8})*$")
    ] = None
    """This gateway's extension (ElevenLabs' ``language_code``): the language to speak ``input`` in, an ISO 639-1 code
    (``de``, ``pt-BR``); absent: the voice's own. A language the model's engine cannot speak is refused (400):
    espeak-ng speaks about a hundred, ChatTTS ``en`` and ``zh``."""
    normalize_text: Annotated[bool, Field(strict=True)] = True
    """This gateway's extension (ElevenLabs' ``apply_text_normalization: "off"`` is ``false``): read digits, money
    and abbreviations as words before speaking (ChatTTS); ``false``: as written. espeak-ng reads digits as words
    either way."""
    sample_rate: Annotated[
        int | None, Field(strict=True, json_schema_extra={"enum": [*sorted(SPEECH_SAMPLE_RATES), None]})
    ] = None
    """This gateway's extension (as vLLM-Omni's): the rate to encode at, one of 8000, 16000, 22050, 24000, 44100,
    48000 Hz where the format has it (``opus``: 48000 only, as Ogg Opus decodes; ``pcmu``/``pcma``: 8000). Absent: the
    format's own (24000; ``opus`` 48000; ``pcmu``/``pcma`` 8000). Timestamps and ``speed`` do not change with it."""

    @field_validator("sample_rate")
    @classmethod
    def _rate_of_format(cls, value: int | None, info: ValidationInfo) -> int | None:
        fmt = info.data.get("response_format")
        if value is None or fmt is None:
            return value
        rates = sample_rates(fmt)
        if value not in rates:
            raise ValueError(f"{fmt} is encoded at {', '.join(map(str, sorted(rates)))} Hz, not {value}")
        return value

    @classmethod
    def pcm_segment(cls, text: str, settings: SpokenSettings, instructions: str | None) -> SpeechRequest:
        """``text`` as a socket session has the pipeline speak a segment: raw 24 kHz PCM, which the session encodes
        into its own stream, with ``settings`` and ``instructions`` (each dialect says which mean none)."""
        return cls(
            model=settings.model,
            input=text,
            voice=settings.voice,
            response_format=AudioFormat.PCM,
            speed=settings.speed,
            instructions=instructions,
            seed=settings.seed,
        )

    @field_validator("input")
    @classmethod
    def _input_has_text(cls, value: str) -> str:
        text = value.strip()
        if not text:
            raise ValueError("input must contain at least one non-whitespace character")
        return text

    @field_validator("word_timestamps")
    @classmethod
    def _timestamps_need_events(cls, value: bool, info: ValidationInfo) -> bool:
        if value and info.data.get("stream_format") != "sse":
            raise ValueError('word_timestamps come as events: it needs stream_format "sse"')
        return value

    @property
    def voice_id(self) -> str:
        return self.voice if isinstance(self.voice, str) else self.voice.id


class EngineNodeSpeechRequest(SpeechRequest):
    """``POST /v1/audio/speech`` on an engine node: OpenAI's request and the front gateway's extension of it
    (``engines/remote/context.py``). Only an engine node takes it; a front gateway refuses the extra field (400)."""

    speaker: Annotated[str, StringConstraints(min_length=1, max_length=MAX_SPEAKER_CHARS)] | None = Field(
        default=None, validation_alias=SPEAKER_FIELD
    )
    """The speaker of the tenant's custom voice, resolved by the front: used for this request, never stored."""
    continuing: bool = Field(default=False, validation_alias=CONTINUING_FIELD)
    """A later segment of a long input whose audio is already streaming from the front: it waits its turn, but the
    queue's bounds and timeout do not refuse it (a stream must not break off because the node is busy)."""


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorResponse(BaseModel):
    """OpenAI's error body: every 4xx and 5xx of the gateway has this shape."""

    error: ErrorDetail


class SpeechUsage(BaseModel):
    """Usage of one speech request: input characters and output audio frames (one per 20 ms)."""

    input_tokens: int
    output_tokens: int
    total_tokens: int


class VoiceObject(BaseModel):
    """OpenAI's ``audio.voice`` (a custom voice), with this gateway's extensions after ``type``."""

    id: str
    object: Literal["audio.voice"] = "audio.voice"
    name: str
    created_at: int
    type: Literal["audio_sample", "prompt", "speaker", "seed"]
    """``audio_sample`` (made from a recording, as OpenAI), or this gateway's JSON form: ``speaker`` or ``seed``."""
    model: str
    """The engine the voice speaks with (its speaker only makes sense for that engine and its weights)."""
    speaker_sha256: str
    """What the voice sounds like, as the audio cache knows it: the same speaker, the same hash."""
    consent: str | None = None
    """The consent recording an ``audio_sample`` voice was made with."""
    custom: Literal[True] = True


class BuiltInVoice(BaseModel):
    """A voice an engine has built in, with the models (engines or aliases) that speak it."""

    object: Literal["voice"] = "voice"
    id: str
    name: str
    description: str
    models: list[str]
    custom: Literal[False] = False


VoiceList = ListPage[BuiltInVoice | VoiceObject]
"""The built-in voices (whole, on the first page) and a page of the tenant's custom voices, oldest first: ``last_id``
is the last custom voice of the page."""


class UsageBudget(BaseModel):
    """A tenant's standing against its monthly budgets (``limits.characters_per_month``,
    ``limits.audio_seconds_per_month``) in this calendar month (UTC). A limit is ``null`` when the tenant has none; a
    count is ``null`` when it cannot be read now (the limits' storage unreachable)."""

    month: str
    """``YYYY-MM``."""
    resets_at: int
    """Unix time the budgets start again (the next month's first second, UTC)."""
    characters_limit: int | None
    characters_used: int | None
    """Input characters admitted this month (counted when a request is admitted)."""
    audio_seconds_limit: float | None
    audio_seconds_used: float | None
    """Audio seconds spoken this month (counted when a request ends: one in flight may finish past the limit)."""


class TenantUsage(BaseModel):
    """What the calling tenant has used: requests served, their input characters and audio, cache hits, and the
    requests its limits refused, by reason (``GET /v1/usage``). The admin API lists the same counts of every tenant
    as ``tenant.usage`` objects (``TenantUsageObject``, ``gateway/routes/admin.py``)."""

    object: Literal["usage"] = "usage"
    tenant: str
    requests: int
    input_characters: int
    audio_seconds: float
    cache_hits: int
    rejections: dict[str, int]
    budget: UsageBudget | None = None
    """The tenant's standing against its monthly budgets; ``null`` for a tenant without one."""


class VoiceDeleted(BaseModel):
    """OpenAI's ``audio.voice.deleted``."""

    id: str
    object: Literal["audio.voice.deleted"] = "audio.voice.deleted"
    deleted: bool


class VoiceConsentObject(BaseModel):
    """OpenAI's ``audio.voice_consent``: the label and language of a consent recording (the audio is never served)."""

    id: str
    object: Literal["audio.voice_consent"] = "audio.voice_consent"
    name: str
    language: str
    """The BCP 47 tag of the consent phrase's language (``en-US``)."""
    created_at: int


VoiceConsentList = ListPage[VoiceConsentObject]
"""A page of consent recordings, oldest first."""


class VoiceConsentDeleted(BaseModel):
    """OpenAI's answer to deleting a consent recording."""

    id: str
    object: Literal["audio.voice_consent"] = "audio.voice_consent"
    deleted: bool


class ModelEngine(BaseModel):
    """The engine that would serve a model now, as it reported itself when it loaded."""

    name: str
    """The engine's name in the configuration (an alias names the engine it routes to now)."""
    max_batch: int | None
    """Requests one of its workers runs together: ChatTTS's ``max_batch``, as measured at load where it is ``auto``;
    ``null`` for an engine that runs elsewhere (a remote engine: its servers batch as they are configured)."""


class ModelObject(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = 0
    owned_by: str = "tts-gateway"
    engine: ModelEngine | None = None
    """A gateway extension (OpenAI's model objects have no such field; its SDKs keep it as an extra): ``null`` while
    the engine has not loaded."""


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelObject]


MAX_JOB_INPUT_CHARS = 5_000_000
"""The longest ``input`` any speech job may have (``jobs.max_input_chars`` and tenants' caps stay below it)."""

JobMetadata = dict[
    Annotated[str, StringConstraints(min_length=1, max_length=64)], Annotated[str, StringConstraints(max_length=512)]
]


class SpeechJobCreate(SpeechRequest):
    """``POST /v1/audio/speech/jobs``: the speech body, with an ``input`` up to the tenant's job cap (500,000
    characters unless configured otherwise), and OpenAI-style ``metadata``. Formats: mp3, aac, wav, pcm."""

    input: Annotated[str, Field(max_length=MAX_JOB_INPUT_CHARS)]
    """The text to speak; at most the tenant's job cap (``limits.job_input_characters``, else
    ``jobs.max_input_chars``)."""
    metadata: Annotated[JobMetadata | None, Field(max_length=16)] = None
    """Up to 16 key-value pairs of your own, kept with the job (keys up to 64 characters, values up to 512)."""

    @field_validator("sample_rate")
    @classmethod
    def _no_rate(cls, value: int | None) -> int | None:
        if value is not None:  # a job's file header is written at its format's own rate (gateway/jobs/content.py)
            raise ValueError("a speech job is stored at its format's own rate: leave sample_rate out")
        return value


class SpeechJobProgress(BaseModel):
    characters_done: int
    characters_total: int
    audio_seconds: float


class SpeechJobObject(BaseModel):
    """A speech job: its status, how far it got, and when its audio expires."""

    id: str
    object: Literal["audio.speech.job"] = "audio.speech.job"
    status: Literal["queued", "running", "completed", "failed", "cancelled", "expired"]
    progress: SpeechJobProgress
    model: str
    response_format: str
    created_at: int
    completed_at: int | None
    """When it completed, failed or was cancelled."""
    expires_at: int | None
    """When its audio is deleted (set once it ended)."""
    error: str | None
    metadata: JobMetadata | None = None


SpeechJobList = ListPage[SpeechJobObject]
"""A page of speech jobs, oldest first."""


class SpeechJobDeleted(BaseModel):
    id: str
    object: Literal["audio.speech.job.deleted"] = "audio.speech.job.deleted"
    deleted: bool = True
