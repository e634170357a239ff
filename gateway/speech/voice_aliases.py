"""Voice ids as callers send them, mapped to the voices that speak them: ElevenLabs' premade voice ids, and the
aliases an operator configures (``voices.aliases``) and sets per tenant (``voice_aliases``, admin API).

Clients written for ElevenLabs default to its premade voices' ids (LiveKit's plugin to Bella's, the SDKs' examples to
George's; LiteLLM sends OpenAI's ``alloy`` as Rachel's), which no engine here knows. Each premade id of
:data:`PREMADE_VOICES` speaks one of OpenAI's voice names, the built-in voices of every engine, so that the same id
always sounds the same. An alias maps any id or name to a built-in voice or a custom voice (``voice_…``) of the tenant;
the tenant's aliases win over the configuration's, which win over the premade table. One step: an alias's target is
not looked up again, so no chain loops.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from gateway.schemas import voice_reference

if TYPE_CHECKING:
    from collections.abc import Mapping

    from gateway.schemas import SpeechRequest

__all__ = ["PREMADE_VOICES", "PremadeVoice", "aliased", "built_in_aliases"]

"""How a custom voice's id starts (``gateway/speech/plan.py``'s): an alias's target that starts with it names one."""


class PremadeVoice(NamedTuple):
    name: str
    """ElevenLabs' name for it."""
    voice: str
    """The built-in voice (one of OpenAI's names) that speaks it here."""


PREMADE_VOICES: dict[str, PremadeVoice] = {
    # Female voices speak OpenAI's lighter voices, male ones its deeper: a caller who chose by gender keeps it.
    "21m00Tcm4TlvDq8ikWAM": PremadeVoice("Rachel", "alloy"),  # LiteLLM sends OpenAI's alloy as Rachel: alloy again
    "EXAVITQu4vr4xnSDxMaL": PremadeVoice("Sarah", "nova"),
    "hpp4J3VqNfWAUOO0d1Us": PremadeVoice("Bella", "shimmer"),  # LiveKit's default
    "AZnzlk1XvdvUeBnXmlld": PremadeVoice("Domi", "coral"),
    "MF3mGyEYCl7XYWbV9V6O": PremadeVoice("Elli", "sage"),
    "XB0fDUnXU5powFXDhCwa": PremadeVoice("Charlotte", "marin"),
    "Xb7hH8MSUJpSbSDYk0k2": PremadeVoice("Alice", "coral"),
    "FGY2WhTYpPnrIDTdsKH5": PremadeVoice("Laura", "sage"),
    "cgSgspJ2msm6clMCkdW9": PremadeVoice("Jessica", "shimmer"),
    "9BWtsMINqrJLrRacOk9x": PremadeVoice("Aria", "nova"),
    "pFZP5JQG7iQjIQuC4Bku": PremadeVoice("Lily", "marin"),
    "XrExE9yKIg1WjnnlVkGX": PremadeVoice("Matilda", "alloy"),
    "JBFqnCBsd6RMkjVDRZzb": PremadeVoice("George", "fable"),  # the SDKs' README examples
    "pNInz6obpgDQGcFmaJgB": PremadeVoice("Adam", "onyx"),
    "TxGEqnHWrfWFTfGW9XjX": PremadeVoice("Josh", "echo"),
    "ErXwobaYiN019PkySvjV": PremadeVoice("Antoni", "ash"),
    "VR6AewLTigWG4xSOukaG": PremadeVoice("Arnold", "onyx"),
    "yoZ06aMxZJJ28mfd3POQ": PremadeVoice("Sam", "verse"),
    "onwK4e9ZLuTAKqWW03F9": PremadeVoice("Daniel", "fable"),
    "nPczCjzI2devNBz1zQrb": PremadeVoice("Brian", "cedar"),
    "TX3LPaxmHKxFdv7VOQHJ": PremadeVoice("Liam", "echo"),
    "CwhRBWXzGAHq8TQ4Fs17": PremadeVoice("Roger", "ash"),
    "cjVigY5qzO86Huf0OWal": PremadeVoice("Eric", "ballad"),
    "pqHfZKP75CvOlQylNhV4": PremadeVoice("Bill", "onyx"),
    "N2lVS1w4EtoT3dr4eOWO": PremadeVoice("Callum", "verse"),
    "bIHbv24MWmeRgasZH58o": PremadeVoice("Will", "ballad"),
    "SOYHLrjzK2X1ezoPC6cr": PremadeVoice("Harry", "cedar"),
    "29vD33N1CtxCmqQRPOHJ": PremadeVoice("Drew", "echo"),
    "2EiwWnXFnvU5JabPnv8n": PremadeVoice("Clyde", "onyx"),
    "5Q0t7uMcjvnagumLfvZi": PremadeVoice("Paul", "cedar"),
    "CYw3kZ02Hs0563khs1Fj": PremadeVoice("Dave", "ash"),
    "D38z5RcWu1voky8WS1ja": PremadeVoice("Fin", "fable"),
}
"""ElevenLabs' premade voice ids that clients default to or show in examples, each with the voice that speaks it."""


def built_in_aliases(configured: Mapping[str, str]) -> dict[str, str]:
    """The premade table with the configuration's aliases (``voices.aliases``) over it: what every tenant has."""
    return {premade: entry.voice for premade, entry in PREMADE_VOICES.items()} | dict(configured)


def aliased(request: SpeechRequest, aliases: Mapping[str, str], tenant_aliases: Mapping[str, str]) -> SpeechRequest:
    """``request`` in the voice its voice id is an alias of (the tenant's first), or unchanged when it is none."""
    voice_id = request.voice_id
    target = tenant_aliases.get(voice_id) or aliases.get(voice_id)
    if target is None:
        return request
    return request.model_copy(update={"voice": voice_reference(target)})
