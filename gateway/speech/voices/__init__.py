"""Tenant-scoped custom voices: a name and a speaker (an engine's speaker embedding, a seed to derive one, or what the
engine made of an audio sample).

A tenant only ever sees its own voices: looking up another tenant's id answers "not found", so ids do not leak.
"""

from __future__ import annotations

from gateway.speech.voices.base import (
    SEED_SPEAKER_PREFIX,
    CustomVoiceRecord,
    VoiceNameTakenError,
    VoiceStore,
    VoiceType,
    new_voice,
)
from gateway.speech.voices.memory import MemoryVoiceStore
from gateway.speech.voices.redis import RedisVoiceStore

__all__ = [
    "SEED_SPEAKER_PREFIX",
    "CustomVoiceRecord",
    "MemoryVoiceStore",
    "RedisVoiceStore",
    "VoiceNameTakenError",
    "VoiceStore",
    "VoiceType",
    "new_voice",
]
