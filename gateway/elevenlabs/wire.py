"""ElevenLabs' wire types, field for field as its ``elevenlabs`` SDK (2.78) sends and parses them.

Requests ignore fields they do not know, as ElevenLabs' own server does (its SDKs add fields often); the ones they
know are validated within ElevenLabs' documented limits, and this gateway's where it has its own (a text of at most
4,096 characters, as ``POST /v1/audio/speech``). Their fields declare no strictness, unlike OpenAI's
(``gateway/schemas.py``): ElevenLabs' server is FastAPI, whose pydantic reads a body in its lax mode (``"seed": "7"``
is 7, ``"seed": true`` is 1), and a client that works against it must work here.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, field_validator

from gateway.audio import AudioFormat
from gateway.schemas import MAX_INPUT_CHARS, SpeechRequest, voice_reference
from gateway.text import Markup, MarkupError, Script, Speech
from gateway.text.breaks import read_breaks
from gateway.text.script import MAX_PARTS, Part

__all__ = [
    "DEFAULT_MODEL_ID",
    "AudioWithTimestamps",
    "CharacterAlignment",
    "DialogueInput",
    "DialogueSettings",
    "ElevenLabsErrorDetail",
    "ElevenLabsErrorResponse",
    "ElevenLabsModel",
    "ElevenLabsValidationError",
    "ElevenLabsVoice",
    "PronunciationDictionaryLocator",
    "SocketSpeechOptions",
    "TextToDialogueRequest",
    "TextToSpeechRequest",
    "ValidationProblem",
    "VoicePage",
    "VoiceSettings",
    "Voices",
    "named_dictionaries",
    "text_markup",
]

DEFAULT_MODEL_ID = "eleven_multilingual_v2"
"""ElevenLabs' default ``model_id``; a built-in alias here, like every ElevenLabs model id."""
DEFAULT_DIALOGUE_MODEL_ID = "eleven_v3"
"""ElevenLabs' default ``model_id`` of a dialogue."""
MAX_DIALOGUE_VOICES = 10
"""ElevenLabs' most distinct voices in one dialogue."""
"""A ``voice_id`` that starts with it names one of the tenant's custom voices; any other names a built-in voice (or
a custom voice by its name)."""
SPEED_RANGE = (0.7, 1.2)
"""ElevenLabs' bounds of ``voice_settings.speed``."""

_Unit = Annotated[float, Field(ge=0.0, le=1.0)]
_Id = Annotated[str, StringConstraints(min_length=1, max_length=256)]
_Context = Annotated[str, Field(max_length=MAX_INPUT_CHARS)]
_RequestIds = Annotated[list[_Id], Field(max_length=3)]
_LanguageCode = Annotated[str, StringConstraints(max_length=35, pattern=r"^[A-Za-z]{2,3}([-_][A-Za-z0-9]{1,8})*$")]
_Normalization = Literal["auto", "on", "off"]


def _has_words(value: str) -> str:
    if not value.strip():
        raise ValueError("text must contain at least one non-whitespace character")
    return value


_Text = Annotated[str, Field(max_length=MAX_INPUT_CHARS), AfterValidator(_has_words)]
"""What a request or a dialogue's turn says: at most 4,096 characters, some of them not white space."""


class SocketSpeechOptions(BaseModel):
    """What a socket's URL says of every piece it speaks (ElevenLabs' query options), as the REST bodies say it."""

    model_config = ConfigDict(frozen=True)

    seed: Annotated[int, Field(ge=0, le=4_294_967_295)] | None = None
    language_code: _LanguageCode | None = None
    apply_text_normalization: _Normalization | None = None


def text_markup(enable_ssml_parsing: bool | None) -> Markup:
    """The markup ElevenLabs' routes and WebSocket honour: break tags always, the SSML subset when asked for."""
    return Markup.ELEVENLABS_SSML if enable_ssml_parsing else Markup.BREAKS


class VoiceSettings(BaseModel):
    """``voice_settings``: ``speed`` is honoured (the audio is time-stretched, pitch kept); the others are accepted
    within their bounds and ignored (no engine here has those knobs)."""

    model_config = ConfigDict(extra="ignore")

    stability: _Unit | None = None
    similarity_boost: _Unit | None = None
    style: _Unit | None = None
    use_speaker_boost: bool | None = None
    speed: Annotated[float, Field(ge=SPEED_RANGE[0], le=SPEED_RANGE[1])] | None = None
    clone_strength: _Unit | None = None


DEFAULT_VOICE_SETTINGS = VoiceSettings(
    stability=0.5, similarity_boost=0.75, style=0.0, use_speaker_boost=True, speed=1.0
)
"""What a voice's ``settings`` say: ElevenLabs' defaults (only ``speed`` changes anything here)."""


class PronunciationDictionaryLocator(BaseModel):
    model_config = ConfigDict(extra="ignore")

    pronunciation_dictionary_id: _Id
    version_id: _Id | None = None


_Locators = Annotated[list[PronunciationDictionaryLocator], Field(max_length=3)]


def named_dictionaries(locators: list[PronunciationDictionaryLocator] | None) -> list[tuple[str, str | None]] | None:
    """The pronunciation dictionaries ``locators`` name, ``(id, version id or None: the latest)`` each; ``None``: none
    named (the tenant's defaults apply)."""
    if not locators:
        return None
    return [(locator.pronunciation_dictionary_id, locator.version_id) for locator in locators]


class TextToSpeechRequest(BaseModel):
    """The body of ``POST /v1/text-to-speech/{voice_id}`` and ``…/stream``.

    Spoken: ``text``, ``model_id``, ``voice_settings.speed``, ``seed`` (the same seed, the same audio on ChatTTS),
    ``language_code`` (the engine's voice of that language; one it cannot speak is a 400),
    ``apply_text_normalization`` (``off``: digits and symbols read as written, where the engine can: ChatTTS) and
    ``pronunciation_dictionary_locators`` (the tenant's own dictionaries, applied in order; absent: the tenant's
    default dictionaries). Accepted within ElevenLabs' bounds and ignored: the other voice settings,
    ``previous_text``/``next_text``, the request ids, ``use_pvc_as_ivc`` and ``apply_language_text_normalization``.
    ``audio_effects`` must be absent or ``null``: no effect can be applied here.
    """

    model_config = ConfigDict(extra="ignore")

    text: _Text
    """What to say: 1 to 4,096 characters after trimming."""
    model_id: _Id | None = None
    """A model or alias of ``GET /v1/models``; absent or ``null``: ``eleven_multilingual_v2``."""
    language_code: _LanguageCode | None = None
    voice_settings: VoiceSettings | None = None
    pronunciation_dictionary_locators: _Locators | None = None
    seed: Annotated[int, Field(ge=0, le=4_294_967_295)] | None = None
    previous_text: _Context | None = None
    next_text: _Context | None = None
    previous_request_ids: _RequestIds | None = None
    next_request_ids: _RequestIds | None = None
    use_pvc_as_ivc: bool | None = None
    apply_text_normalization: _Normalization | None = None
    apply_language_text_normalization: bool | None = None
    audio_effects: None = None
    """Refused unless ``null``: no engine of this gateway applies effects."""

    def dictionaries(self) -> list[tuple[str, str | None]] | None:
        """The pronunciation dictionaries named (:func:`named_dictionaries`)."""
        return named_dictionaries(self.pronunciation_dictionary_locators)

    def speech_request(self, voice_id: str) -> SpeechRequest:
        """The request the speech pipeline serves: the text, as 24 kHz PCM, in ``voice_id``'s voice."""
        speed = self.voice_settings.speed if self.voice_settings is not None else None
        return SpeechRequest(
            model=self.model_id or DEFAULT_MODEL_ID,
            input=self.text,
            voice=voice_reference(voice_id),
            response_format=AudioFormat.PCM,
            speed=1.0 if speed is None else speed,
            seed=self.seed,
            language_code=self.language_code,
            normalize_text=self.apply_text_normalization != "off",
        )


class DialogueInput(BaseModel):
    """A turn of a dialogue: its text (break tags honoured, as in a text-to-speech request) in its voice."""

    model_config = ConfigDict(extra="ignore")

    text: _Text
    voice_id: _Id


class DialogueSettings(BaseModel):
    """``settings`` of a dialogue: accepted within their bounds and ignored (no engine here has those knobs)."""

    model_config = ConfigDict(extra="ignore")

    stability: _Unit | None = None
    similarity: _Unit | None = None
    clone_strength: _Unit | None = None
    use_speaker_boost: bool | None = None


class TextToDialogueRequest(BaseModel):
    """The body of ``POST /v1/text-to-dialogue`` and ``…/stream``: each turn in its voice, one audio in order.

    Spoken: ``inputs``, ``model_id``, ``seed``, ``language_code`` and ``apply_text_normalization`` (as in a
    text-to-speech request), every turn through the ``pronunciation_dictionary_locators`` named. Accepted within
    ElevenLabs' bounds and ignored: ``settings``, ``previous_text``/``future_text``, the request ids and
    ``use_pvc_as_ivc``; ``audio_effects`` must be absent or ``null``.
    """

    model_config = ConfigDict(extra="ignore")

    inputs: Annotated[list[DialogueInput], Field(min_length=1, max_length=256)]
    model_id: _Id | None = None
    language_code: _LanguageCode | None = None
    settings: DialogueSettings | None = None
    pronunciation_dictionary_locators: _Locators | None = None
    seed: Annotated[int, Field(ge=0, le=4_294_967_295)] | None = None
    previous_text: _Context | None = None
    future_text: _Context | None = None
    previous_request_ids: _RequestIds | None = None
    next_request_ids: _RequestIds | None = None
    use_pvc_as_ivc: bool | None = None
    apply_text_normalization: _Normalization | None = None
    audio_effects: None = None

    @field_validator("inputs")
    @classmethod
    def _within_limits(cls, inputs: list[DialogueInput]) -> list[DialogueInput]:
        if sum(len(turn.text) for turn in inputs) > MAX_INPUT_CHARS:
            raise ValueError(f"the inputs' texts must total at most {MAX_INPUT_CHARS} characters")
        if len({turn.voice_id for turn in inputs}) > MAX_DIALOGUE_VOICES:
            raise ValueError(f"a dialogue may have at most {MAX_DIALOGUE_VOICES} distinct voices")
        return inputs

    def dictionaries(self) -> list[tuple[str, str | None]] | None:
        """The pronunciation dictionaries named (:func:`named_dictionaries`)."""
        return named_dictionaries(self.pronunciation_dictionary_locators)

    def speech_request(self) -> SpeechRequest:
        """The request the speech pipeline serves: the turns' texts (what counts as characters), as 24 kHz PCM, in the
        first turn's voice (each turn names its own in :meth:`script`)."""
        return SpeechRequest(
            model=self.model_id or DEFAULT_DIALOGUE_MODEL_ID,
            input="\n".join(turn.text for turn in self.inputs),
            voice=voice_reference(self.inputs[0].voice_id),
            response_format=AudioFormat.PCM,
            seed=self.seed,
            language_code=self.language_code,
            normalize_text=self.apply_text_normalization != "off",
        )

    def script(self) -> Script:
        """Every turn in its voice, in order, with its break tags as silences (``gateway/text``): a turn of breaks
        alone is that much silence.

        Raises:
            MarkupError: more turns and breaks than a script may hold, or nothing to say and no break that lasts.
        """
        first = self.inputs[0].voice_id
        parts: list[Part] = []
        for turn in self.inputs:
            voice = None if turn.voice_id == first else turn.voice_id
            parts.extend(
                Speech(part.text.strip(), voice) if isinstance(part, Speech) else part
                for part in read_breaks(turn.text).parts
            )
        if len(parts) > MAX_PARTS:
            raise MarkupError(f"more than {MAX_PARTS} turns and breaks", 1, 1)
        return Script(tuple(parts)).checked("the dialogue")


class ElevenLabsVoice(BaseModel):
    """ElevenLabs' voice object (the SDK's ``Voice``), with the fields this gateway can tell."""

    voice_id: str
    """A built-in voice's name, or a custom voice's ``voice_…`` id."""
    name: str
    category: Literal["premade", "cloned"]
    """``premade`` for the engines' built-in voices, ``cloned`` for the tenant's custom voices."""
    labels: dict[str, str]
    """``engines``: the engines (by name, comma-separated) that speak the voice; and what is known of how it sounds,
    as ElevenLabs labels its voices: ``gender`` (``male``, ``female``, ``neutral``), ``accent``, ``language`` (ISO
    639-1). espeak-ng's voices have all three; ChatTTS's (speakers sampled from the name) and custom voices none."""
    description: str | None
    preview_url: None = None
    samples: None = None
    available_for_tiers: list[str] = Field(default_factory=list)
    settings: VoiceSettings = DEFAULT_VOICE_SETTINGS
    high_quality_base_model_ids: list[str] = Field(default_factory=list)
    is_owner: bool
    is_legacy: bool = False
    created_at_unix: int | None = None


class Voices(BaseModel):
    """``GET /v1/voices``: every voice, on one page."""

    voices: list[ElevenLabsVoice]


class VoicePage(BaseModel):
    """``GET /v2/voices``: a page of voices; the next is ``?next_page_token=…`` while ``has_more``."""

    voices: list[ElevenLabsVoice]
    has_more: bool
    total_count: int
    """Voices matching the filters, on every page."""
    next_page_token: str | None


class ElevenLabsModel(BaseModel):
    """An entry of ElevenLabs' model list (the SDK's ``Model``): an engine or alias of this gateway."""

    model_id: str
    name: str
    description: str
    can_do_text_to_speech: bool = True
    can_do_voice_conversion: bool = False
    can_be_finetuned: bool = False
    can_use_style: bool = False
    can_use_speaker_boost: bool = False
    serves_pro_voices: bool = False
    requires_alpha_access: bool = False
    token_cost_factor: float = 1.0
    max_characters_request_free_user: int = MAX_INPUT_CHARS
    max_characters_request_subscribed_user: int = MAX_INPUT_CHARS
    maximum_text_length_per_request: int = MAX_INPUT_CHARS


class ElevenLabsErrorDetail(BaseModel):
    status: str
    """What went wrong, as a code: ``needs_authorization``, ``invalid_api_key``, ``voice_not_found``,
    ``model_not_found``, ``rate_limit_exceeded``, ``too_many_concurrent_requests``, ``system_busy``, …"""
    message: str


class ElevenLabsErrorResponse(BaseModel):
    """ElevenLabs' error body: every error of its routes but a validation error has this shape."""

    detail: ElevenLabsErrorDetail


class ValidationProblem(BaseModel):
    loc: list[str | int]
    """Where: ``["body", "voice_settings", "speed"]``, ``["query", "output_format"]``."""
    msg: str
    type: str


class ElevenLabsValidationError(BaseModel):
    """A request that failed validation (422), as ElevenLabs' server (FastAPI) reports it."""

    detail: list[ValidationProblem]


class CharacterAlignment(BaseModel):
    """When each character of the text is heard: ``characters`` joined are the text (as given: nothing here
    normalises it), their times in seconds from the start of the response's audio, never going back."""

    characters: list[str]
    character_start_times_seconds: list[float]
    character_end_times_seconds: list[float]


class AudioWithTimestamps(BaseModel):
    """``…/with-timestamps``' body, and each line of ``…/stream/with-timestamps`` (its audio and the characters whose
    times fall in it, or ``null``). ``normalized_alignment`` is ``alignment``: the gateway speaks the text as given."""

    audio_base64: str
    """The audio in ``output_format``, base64."""
    alignment: CharacterAlignment | None = None
    normalized_alignment: CharacterAlignment | None = None
