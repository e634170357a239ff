"""What a speech job is while it lives in the store: its request, its segments, and its progress so far.

A job's text is cut into segments once, when it is created (``gateway/speech/segments.py``: the rules every long input
is spoken by), and the segments are stored with it: every replica that speaks a part of it speaks the same segments,
whatever its own ``speech.max_segment_chars``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from gateway.audio.formats import AudioFormat, output_sample_rate

__all__ = [
    "ACTIVE",
    "SEGMENT_FORMATS",
    "TERMINAL",
    "JobRecord",
    "JobStatus",
    "now_s",
    "reservation_bytes",
]

JobStatus: TypeAlias = Literal["queued", "running", "completed", "failed", "cancelled", "expired"]
ACTIVE: frozenset[JobStatus] = frozenset({"queued", "running"})
TERMINAL: frozenset[JobStatus] = frozenset({"completed", "failed", "cancelled"})

SEGMENT_FORMATS: dict[AudioFormat, AudioFormat] = {
    AudioFormat.MP3: AudioFormat.MP3,
    AudioFormat.AAC: AudioFormat.AAC,
    AudioFormat.WAV: AudioFormat.PCM,
    AudioFormat.PCM: AudioFormat.PCM,
}
"""The formats a job can be spoken in, and what each segment is stored as. Each segment is encoded on its own, so
only formats whose streams join by concatenation qualify: MP3 and ADTS AAC are sequences of self-contained frames,
and WAV is PCM under one header that the gateway writes when the audio is read. Ogg Opus (one logical stream of
numbered pages with running granule positions) and FLAC (one STREAMINFO header for the whole file) do not: a job in
them is refused (400)."""


_SPOKEN_CHARACTERS_PER_S = 15.0
"""How many characters of text one second of speech holds at ``speed`` 1 (about 170 words a minute, a usual reading
pace): what a job's reservation of storage is estimated by."""
_COMPRESSED_BYTES_PER_S = 64_000 // 8
"""MP3 and AAC are encoded at 64 kbit/s (``gateway/audio/encoders.py``)."""


def now_s() -> float:
    return time.time()


def reservation_bytes(characters: int, fmt: AudioFormat, speed: float) -> int:
    """The stored audio a new job is expected to need (and reserves from its tenant's quota): its text spoken at
    :data:`_SPOKEN_CHARACTERS_PER_S` times ``speed``, in its stored format."""
    seconds = characters / (_SPOKEN_CHARACTERS_PER_S * speed)
    pcm = SEGMENT_FORMATS[fmt] is AudioFormat.PCM
    bytes_per_s = 2 * output_sample_rate(AudioFormat.PCM) if pcm else _COMPRESSED_BYTES_PER_S
    return math.ceil(seconds * bytes_per_s)


@dataclass(slots=True)
class JobRecord:
    """One job as stored: what it speaks (immutable once created) and how far it got."""

    id: str
    tenant: str
    request: dict[str, Any]
    """The speech body without its ``input`` (model, voice, response_format, speed, instructions)."""
    characters_total: int
    segments_total: int
    created_at: int
    metadata: dict[str, str] | None = None
    status: JobStatus = "queued"
    segments_done: int = 0
    characters_done: int = 0
    characters_charged: int = 0
    """What the segments spoken so far were charged: what they made the engine say (``SpeechPlan.characters``), which
    a pronunciation dictionary, ``say-as`` or a break makes more than their text."""
    audio_ms: int = 0
    stored_bytes: int = 0
    completed_at: int | None = None
    expires_at: int | None = None
    error: str | None = None
    reserved_bytes: int = 0
    """The stored audio the job reserved from its tenant's quota when it was created (:func:`reservation_bytes`)."""
    generation: str = ""
    """The :attr:`~auth.tenants.Tenant.generation` of the tenant that created it: a tenant deleted and created again
    under the same name is another generation, which never sees the job (:meth:`belongs_to`). Empty for a job created
    before jobs recorded it."""

    def belongs_to(self, generation: str) -> bool:
        """Whether the job is the tenant's of ``generation`` (its name is the store's scope): a job of another
        generation is a deleted tenant's, left by a race with its deletion, and is not there for this one."""
        return not self.generation or self.generation == generation

    @property
    def response_format(self) -> AudioFormat:
        return AudioFormat(self.request["response_format"])

    def shown_status(self, now: float) -> JobStatus:
        """The status a caller sees: ``expired`` once the results of an ended job are gone."""
        if self.status in TERMINAL and self.expires_at is not None and now >= self.expires_at:
            return "expired"
        return self.status

    def held_bytes(self, now: float) -> int:
        """What the job holds of its tenant's storage quota: while it runs, its reservation (or what it stored, once
        that is more); once completed, what it stored, until its audio expires; else nothing. The Redis store's
        creation script (``_CREATE_LUA``) counts the same way."""
        if self.status in ACTIVE:
            return max(self.reserved_bytes, self.stored_bytes)
        return self.stored_bytes if self.shown_status(now) == "completed" else 0

    @property
    def charged_characters(self) -> int:
        """What the job is charged in its tenant's usage: what its segments made the engine say, and never less than
        the characters it counts as done (all of its input, once completed)."""
        return max(self.characters_charged, self.characters_done)
