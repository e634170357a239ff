"""Planning a request: may the tenant use the model, which engine speaks it, with which voice, at which speed, and
what text it says: the caller's text respelled by the tenant's pronunciation dictionaries (the one place every
transport's text passes through them: ``gateway/speech/pronunciation.py``); for a script of several parts (SSML, a
dialogue), each part's voice and speed, and each part respelled (``gateway/text``)."""

from __future__ import annotations

import asyncio
import hashlib
import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, TypeAlias

from engines.base import SynthesisRequest
from engines.chattts.normalize import OFF, normalize_builtin
from engines.chattts.text import prepare_text
from gateway.schemas import MAX_INPUT_CHARS, EngineNodeSpeechRequest, voice_reference
from gateway.speech.errors import InputTooLongError, InvalidSpeechRequestError, ModelNotAllowedError, UnknownVoiceError
from gateway.speech.pronunciation import NO_LEXICON, AppliedLexicon
from gateway.speech.voice_aliases import aliased
from gateway.text import Script, Silence
from gateway.text.lexicon import PhonemeOnlyRuleError, Respelled

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from auth import Principal, Tenant
    from engines.backend import EngineBackend
    from engines.base import EngineInfo
    from gateway.schemas import SpeechRequest
    from gateway.speech.pronunciation import PronunciationDictionaries
    from gateway.speech.routing import ModelRouter
    from gateway.speech.voices import VoiceStore

__all__ = [
    "CHARACTERS_PER_SILENT_SECOND",
    "MAX_SILENCE_S",
    "SPOKEN_CHARS_PER_INPUT_CHAR",
    "Job",
    "Planner",
    "SpeechPlan",
    "Voice",
    "charged_characters",
]

"""How a custom voice's id starts: a script's voice that starts with it names one by id, any other by name."""

Job: TypeAlias = "SynthesisRequest | Silence"
"""A part of a script as the engine's jobs see it: a span to synthesize, or a silence (in the engine's time: the
encoder's time-stretch brings it back to what the script asked for)."""

SPOKEN_CHARS_PER_INPUT_CHAR = 4
"""How much longer than the caller's text (4,096 characters at least) a request may become once every expansion
(pronunciation dictionaries, ``say-as``, ``sub``, numbers and symbols read as words) applied: what one request may make
the engine say. Within it, a request is charged what is spoken (:func:`charged_characters`)."""

_READ_INLINE_CHARS = 1024
"""The longest text read as words (:func:`_as_read`) on the event loop: at most about 5 ms (digits, the slowest to
read: 20 ms for 4,096 characters on a 2-core machine); a longer one is read in a thread."""

MAX_SILENCE_S = 120.0
"""The most seconds of silence (``<break>``, ElevenLabs' break tags) one request may ask for, all its breaks together;
more is refused (400)."""

CHARACTERS_PER_SILENT_SECOND = 4
"""What a second of silence is charged, in characters: at most 0.25 s of silence per charged character, however short
the markup that asks for it (``<break time="10s"/>`` is 19 characters)."""


@dataclass(frozen=True, slots=True)
class Voice:
    engine_voice: str
    speaker: str | None
    identity: str
    """What the voice sounds like, for the cache key: a built-in name or the hash of a custom speaker."""


@dataclass(frozen=True, slots=True)
class SpeechPlan:
    """A request with its engine, voice and the engine's view of it settled."""

    tenant: str
    request: SpeechRequest
    pool: EngineBackend
    info: EngineInfo | None
    voice: Voice
    synthesis: SynthesisRequest
    tempo: float
    """The time-stretch left for the encoder: requested speed over the speed the engine renders natively."""
    script: Script | None = None
    """What the request says, when it is more than its text in its voice (SSML, a dialogue); ``synthesis.text`` is
    then the script's text (each span respelled)."""
    voices: Mapping[str, Voice] = field(default_factory=dict)
    """The script's other voices, by the name it gives them."""
    jobs: tuple[Job, ...] = ()
    """The script's parts for this engine, in order: a job or a silence each (empty for a text in one voice)."""
    pronunciation: tuple[tuple[str, str], ...] = ()
    """The pronunciation dictionary versions applied, ``(id, version id)`` each (part of the audio cache key)."""
    respelled: Respelled = field(default_factory=lambda: Respelled(""))
    """The text the engine says (``synthesis.text``) and where it differs from :attr:`text`, for a text in one voice
    (a script of several parts is respelled span by span, and its timestamps name the respelled text)."""
    caller_text: str | None = None
    """What the caller wrote, when the engine says it respelled."""
    characters: int = 0
    """What the request is charged, in limits and usage (:func:`charged_characters`)."""

    @property
    def text(self) -> str:
        """What the request says, as its timestamps refer to it: the caller's text (the input, or a simple script's
        text) before its respelling, else the script's text."""
        return self.caller_text if self.caller_text is not None else self.synthesis.text

    def for_text(self, text: str) -> SynthesisRequest:
        """The same voice and settings speaking other text (a segment of a realtime session)."""
        return replace(self.synthesis, text=text)

    def for_engine(self, pool: EngineBackend) -> SpeechPlan | None:
        """The same request planned for another engine of its alias (its voices and native speeds differ), for the
        failover; ``None`` when that engine cannot speak it: a custom voice (it belongs to one engine), a voice the
        engine does not offer, or an engine that has not loaded yet."""
        info = pool.info
        if pool is self.pool:
            return self
        voices = [self.voice, *self.voices.values()]
        if info is None or any(v.speaker is not None or not info.offers_voice(v.engine_voice) for v in voices):
            return None
        synthesis, tempo = _engine_request(self.request, info, self.voice)
        synthesis = replace(synthesis, text=self.synthesis.text)
        jobs = _script_jobs(self.request.model, self.script, synthesis, info, self.voices, tempo) if self.jobs else ()
        return replace(self, pool=pool, info=info, synthesis=synthesis, tempo=tempo, jobs=jobs)


class Planner:
    """Settles the engine and voice of requests: the models a tenant may use, aliases, built-in and custom voices."""

    def __init__(
        self,
        router: ModelRouter,
        voices: VoiceStore,
        pronunciation: PronunciationDictionaries | None = None,
        *,
        voice_aliases: Mapping[str, str] | None = None,
    ) -> None:
        """``voice_aliases``: voice ids mapped to voices for every tenant (``gateway/speech/voice_aliases.py``)."""
        self.router = router
        self._voices = voices
        self._pronunciation = pronunciation
        self._voice_aliases = voice_aliases or {}

    async def plan(
        self,
        principal: Principal,
        request: SpeechRequest,
        script: Script | None = None,
        *,
        dictionaries: Sequence[tuple[str, str | None]] | None = None,
    ) -> SpeechPlan:
        """Check that the tenant may use the model, settle the engine and the voice, and respell the text; and every
        voice and speed of ``script``, when it says more than the input in the request's voice.

        Args:
            script: What the request says, read from its markup (``None``: its input, as written).
            dictionaries: The pronunciation dictionaries the request names, ``(id, version id or None for the
                latest)`` each; ``None``: the tenant's default dictionaries (those it no longer has are skipped).

        Raises:
            SpeechError: a model the tenant may not use, an unknown model or voice, a dictionary the tenant does not
                have, a phoneme-only rule that matched.
        """
        tenant = principal.tenant
        if tenant.control_tokens and not request.control_tokens:  # the tenant opted in for all its requests
            request = request.model_copy(update={"control_tokens": True})
        if not tenant.allows_model(request.model):
            raise ModelNotAllowedError(request.model)
        pool = self.router.resolve(request.model)
        info = pool.info
        voice = await self._resolve_voice(tenant, request, pool.name, info)
        synthesis, tempo = _engine_request(request, info, voice)
        applied = await self._lexicon(tenant, dictionaries)
        versions = applied.versions
        if script is None or script.simple:
            said = request.input if script is None else script.text
            respelled = _respelled(applied, said, _spoken_bound(request))
            synthesis = replace(synthesis, text=respelled.text)
            caller_text = said if respelled.replacements else None
            kept = None if script is None or said == request.input else script
            _check_spoken(respelled.text, _spoken_bound(request))  # say-as and sub expanded it too
            read = await _checked_read(info, request, respelled.text)
            return SpeechPlan(
                tenant.name, request, pool, info, voice, synthesis, tempo, kept,
                pronunciation=versions, respelled=respelled, caller_text=caller_text,
                characters=charged_characters(request.input, read),
            )  # fmt: skip
        bound = _spoken_bound(request)
        if applied.lexicon:  # span by span, and the whole within the same bound
            script = script.pronounced(lambda text: _respelled(applied, text, bound).text)
        _check_spoken(script.text, bound)
        read = await _checked_read(info, request, script.text)
        silence = _checked_silence(script)
        synthesis = replace(synthesis, text=script.text)
        voices = {name: await self._resolve_voice(tenant, _in_voice(request, name), pool.name, info)
                  for name in sorted(script.voices())}  # fmt: skip
        jobs = _script_jobs(request.model, script, synthesis, info, voices, tempo)
        return SpeechPlan(
            tenant.name, request, pool, info, voice, synthesis, tempo, script, voices, jobs, pronunciation=versions,
            characters=charged_characters(request.input, read, silence),
        )  # fmt: skip

    async def _lexicon(self, tenant: Tenant, named: Sequence[tuple[str, str | None]] | None) -> AppliedLexicon:
        if self._pronunciation is None:
            return NO_LEXICON
        generation = tenant.generation
        if named is not None:
            return await self._pronunciation.lexicon(tenant.name, named, generation=generation)
        defaults = [(dictionary_id, None) for dictionary_id in tenant.pronunciation_dictionaries]
        return await self._pronunciation.lexicon(tenant.name, defaults, missing_ok=True, generation=generation)

    async def _resolve_voice(
        self,
        tenant: Tenant,
        request: SpeechRequest,
        engine: str,
        info: EngineInfo | None,
    ) -> Voice:
        if isinstance(request, EngineNodeSpeechRequest) and request.speaker is not None:
            # An engine node: the front gateway resolved its tenant's custom voice. Used, never stored.
            return Voice(request.voice_id, request.speaker, hashlib.sha256(request.speaker.encode()).hexdigest())
        request = aliased(request, self._voice_aliases, dict(tenant.voice_aliases))
        if isinstance(request.voice, str):
            if info is not None and info.offers_voice(request.voice):
                return Voice(request.voice, None, request.voice)  # built-in: no store round trip
            custom = await self._voices.find_by_name(tenant.name, request.voice)
            if custom is None:
                return Voice(request.voice, None, request.voice)
        else:
            custom = await self._voices.get(tenant.name, request.voice.id)
            if custom is None:
                raise UnknownVoiceError(f"Custom voice '{request.voice.id}' was not found.", voice_id=request.voice.id)
        if custom.model != engine:
            message = f"Custom voice '{custom.id}' belongs to model '{custom.model}', not to '{engine}'."
            raise InvalidSpeechRequestError(message, kind="invalid_value", param="voice")
        return Voice(custom.id, custom.speaker, custom.speaker_sha256)


def _engine_request(request: SpeechRequest, info: EngineInfo | None, voice: Voice) -> tuple[SynthesisRequest, float]:
    """The engine's view of the request, and the time-stretch left for the encoder to apply."""
    speed = native = request.speed
    if info is not None:
        low, high = info.speed_range
        native = min(max(speed, low), high)
        _check_offered(request.model, info, voice)
    synthesis = SynthesisRequest(
        text=request.input,
        voice=voice.engine_voice,
        speed=native,
        instructions=request.instructions,
        speaker=voice.speaker,
        seed=request.seed,
        control_tokens=request.control_tokens,
        language=request.language_code,
        normalize_text=request.normalize_text,
    )
    return synthesis, speed / native


def _check_offered(model: str, info: EngineInfo, voice: Voice) -> None:
    """Refuse a built-in voice the engine does not offer (400)."""
    if voice.speaker is None and not info.offers_voice(voice.engine_voice):
        known = sorted({v.id for v in info.voices})
        raise UnknownVoiceError(
            f"Voice '{voice.engine_voice}' is not available for model '{model}'. Voices: {', '.join(known)}.",
            voice_id=voice.engine_voice,
            kind="voice_not_offered",
        )


def _in_voice(request: SpeechRequest, name: str) -> SpeechRequest:
    """``request`` in the voice a script's span names: a custom voice by id (``voice_…``), else by name or built-in."""
    return request.model_copy(update={"voice": voice_reference(name)})


def _script_jobs(  # noqa: PLR0917 - the plan's parts a script's jobs come from
    model: str,
    script: Script | None,
    whole: SynthesisRequest,
    info: EngineInfo | None,
    voices: Mapping[str, Voice],
    tempo: float,
) -> tuple[Job, ...]:
    """Each part of ``script`` for the engine: a span in its voice at the whole's native speed times its rate (within
    the engine's native range), a silence lengthened by ``tempo`` (the encoder shortens it back).

    Raises:
        UnknownVoiceError: a span's voice the engine does not offer.
    """
    jobs: list[Job] = []
    for part in script.parts if script is not None else ():
        if isinstance(part, Silence):
            jobs.append(Silence(part.seconds * tempo))
            continue
        voice = voices[part.voice] if part.voice is not None else None
        speed = whole.speed * part.rate
        if info is not None:
            if voice is not None:
                _check_offered(model, info, voice)
            low, high = info.speed_range
            speed = min(max(speed, low), high)
        job = replace(whole, text=part.text, speed=speed)
        if voice is not None:
            job = replace(job, voice=voice.engine_voice, speaker=voice.speaker)
        jobs.append(job)
    return tuple(jobs)


def charged_characters(caller: str, spoken: str, silence_s: float = 0.0) -> int:
    """What a request is charged: the characters the engine is asked to speak once every expansion applied
    (dictionaries, ``say-as``, ``sub``, a dialogue's turns, numbers read as words: :func:`_as_read`) and its
    silences (:data:`CHARACTERS_PER_SILENT_SECOND`), and never less than the caller's characters: plain text is charged
    its length, and markup that says less (tags) is charged as sent."""
    return max(len(caller), len(spoken) + math.ceil(silence_s * CHARACTERS_PER_SILENT_SECOND))


def _checked_silence(script: Script) -> float:
    """The seconds of silence ``script`` asks for, all its breaks together.

    Raises:
        InvalidSpeechRequestError: more than :data:`MAX_SILENCE_S`.
    """
    silence = sum(part.seconds for part in script.parts if isinstance(part, Silence))
    if silence > MAX_SILENCE_S:
        raise InvalidSpeechRequestError(
            f"The breaks add up to {silence:.1f} seconds of silence; at most {MAX_SILENCE_S:.0f} may be asked for in "
            "one request.",
            kind="invalid_value",
            param="input",
        )
    return silence


def _spoken_bound(request: SpeechRequest) -> int:
    """The longest text ``request`` may become once respelled (:data:`SPOKEN_CHARS_PER_INPUT_CHAR`)."""
    return SPOKEN_CHARS_PER_INPUT_CHAR * max(MAX_INPUT_CHARS, len(request.input))


def _respelled(applied: AppliedLexicon, text: str, bound: int) -> Respelled:
    """``text`` as the engine says it, by ``applied``'s rules.

    Raises:
        InvalidSpeechRequestError: a rule that gives only a phoneme string matched: no engine here takes IPA or
            Arpabet (espeak-ng reads its own phoneme mnemonics, not IPA), so such a rule needs an alias.
        InputTooLongError: the respelled text is over ``bound`` characters.
    """
    if not applied.lexicon:
        return Respelled(text)
    try:
        respelled = applied.lexicon.respell(text)
    except PhonemeOnlyRuleError as exc:
        raise InvalidSpeechRequestError(
            str(exc), kind="phoneme_not_supported", param="pronunciation_dictionary_locators"
        ) from None
    _check_spoken(respelled.text, bound)
    return respelled


def _check_spoken(text: str, bound: int) -> None:
    """Refuse a ``text`` to speak over ``bound`` characters (400)."""
    if len(text) > bound:
        raise InputTooLongError(
            f"The text becomes {len(text)} characters once its pronunciation dictionaries respell it and its markup "
            f"is expanded; at most {bound} may be spoken in this request.",
            limit=bound,
        )


async def _checked_read(info: EngineInfo | None, request: SpeechRequest, text: str) -> str:
    """``text`` as the engine reads it (:func:`_as_read`).

    Raises:
        InputTooLongError: read as words, it is over the request's bound (:data:`SPOKEN_CHARS_PER_INPUT_CHAR`).
    """
    read = await _as_read(info, request, text)
    bound = _spoken_bound(request)
    if len(read) > bound:  # the text itself is within it (_check_spoken)
        raise InputTooLongError(
            f"The text becomes {len(read)} characters once its numbers and symbols are read as words; at most {bound} "
            "may be spoken in this request (turn text normalization off to have them read as written).",
            limit=bound,
        )
    return read


async def _as_read(info: EngineInfo | None, request: SpeechRequest, text: str) -> str:
    """``text`` as the engine reads it: an engine that normalizes text (ChatTTS, whose ``text_normalizer`` detail is
    not ``off``) reads numbers, money, dates, units and symbols as words, up to 9 times as long as written
    ("123456789012": 105 characters), in its worker, where no limit sees it; so the plan reads it too, to charge and
    bound it. By the engine's built-in rules: where the engine runs NeMo's grammars instead (the ``normalize`` extra,
    about 82 ms a request, too slow for the event loop), the built-in reading's length stands for theirs."""
    if not request.normalize_text or info is None or info.details.get("text_normalizer", OFF) == OFF:
        return text
    if len(text) <= _READ_INLINE_CHARS:
        return _read_as_words(text)
    return await asyncio.to_thread(_read_as_words, text)


def _read_as_words(text: str) -> str:
    """What ChatTTS's prompts make of a text (``engines/chattts/prompts.py``): cleaned, then normalized."""
    return normalize_builtin(prepare_text(text))
