"""Which espeak-ng voice speaks for each OpenAI voice name.

Each OpenAI voice gets a distinct combination of an English accent, a voice variant from ``espeak-ng-data/voices/!v``
and a base pitch, so that they sound clearly apart. The variants follow OpenAI's voices loosely: onyx, echo, ash,
ballad and verse are male, nova, shimmer, coral, sage and marin female, and alloy, fable and cedar in between
(Klatt-synthesised voices pitched halfway). The median pitches in the descriptions were measured on espeak-ng 1.52.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ESPEAK_VOICES", "EspeakVoice"]


@dataclass(frozen=True, slots=True)
class EspeakVoice:
    """An OpenAI voice name and the espeak-ng settings that speak it."""

    id: str
    language: str
    """An espeak voice name (``en-us``; ``en`` is British English)."""
    variant: str
    """A file in ``espeak-ng-data/voices/!v`` (``f2``, ``m3``, ``klatt4``)."""
    pitch: int
    """``espeakPITCH``: 0-100, 50 being the variant's own base pitch."""
    description: str
    gender: str
    """``male``, ``female`` or ``neutral`` (the Klatt voices pitched halfway), as ElevenLabs labels a voice."""
    accent: str
    """The English accent, as ElevenLabs labels one (``american``, ``british``)."""

    @property
    def espeak_name(self) -> str:
        """The name to select the voice by: ``language+variant``."""
        return f"{self.language}+{self.variant}"


ESPEAK_VOICES: tuple[EspeakVoice, ...] = (
    EspeakVoice(
        "alloy", "en-us", "klatt4", 85, "American English, neutral, Klatt synthesis (~150 Hz)", "neutral", "american"
    ),
    EspeakVoice("ash", "en-us", "m3", 55, "American English, male (~110 Hz)", "male", "american"),
    EspeakVoice("ballad", "en-gb-scotland", "m2", 35, "Scottish English, low male (~85 Hz)", "male", "scottish"),
    EspeakVoice(
        "cedar",
        "en-gb-x-gbclan",
        "klatt3",
        80,
        "Lancashire English, neutral, Klatt synthesis (~140 Hz)",
        "neutral",
        "british",
    ),
    EspeakVoice("coral", "en-us", "f3", 65, "American English, high female (~240 Hz)", "female", "american"),
    EspeakVoice("echo", "en-gb-x-rp", "m1", 62, "British English (RP), male (~105 Hz)", "male", "british"),
    EspeakVoice(
        "fable",
        "en-gb-x-rp",
        "klatt",
        88,
        "British English (RP), neutral, Klatt synthesis (~150 Hz)",
        "neutral",
        "british",
    ),
    EspeakVoice("marin", "en-us-nyc", "f4", 45, "New York English, low female (~165 Hz)", "female", "american"),
    EspeakVoice("nova", "en-us", "f2", 55, "American English, female (~200 Hz)", "female", "american"),
    EspeakVoice("onyx", "en-us", "m4", 20, "American English, deep male (~80 Hz)", "male", "american"),
    EspeakVoice("sage", "en", "f1", 52, "British English, female (~180 Hz)", "female", "british"),
    EspeakVoice(
        "shimmer", "en-gb-x-rp", "f5", 55, "British English (RP), breathy female (~215 Hz)", "female", "british"
    ),
    EspeakVoice("verse", "en-029", "m6", 65, "Caribbean English, male (~120 Hz)", "male", "caribbean"),
)
"""One entry per name in :data:`engines.base.OPENAI_VOICES`, in the same order."""
