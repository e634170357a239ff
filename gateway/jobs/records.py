"""What a speech job is while it lives in the store: its request, its segments, and its progress so far.

A job's text is cut into segments once, when it is created (``gateway/speech/segments.py``: the rules every long input
is spoken by), and the segments are stored with it: every replica that speaks a part of it speaks the same segments,
whatever its own ``speech.max_segment_chars``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from gateway.audio.formats import AudioFormat

__all__ = [
    "ACTIVE",
    "SEGMENT_FORMATS",
    "TERMINAL",
    "JobRecord",
    "JobStatus",
    "now_s",
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


def now_s() -> float:
    return time.time()


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
    audio_ms: int = 0
    stored_bytes: int = 0
    completed_at: int | None = None
    expires_at: int | None = None
    error: str | None = None

    @property
    def response_format(self) -> AudioFormat:
        return AudioFormat(self.request["response_format"])

    def shown_status(self, now: float) -> JobStatus:
        """The status a caller sees: ``expired`` once the results of an ended job are gone."""
        if self.status in TERMINAL and self.expires_at is not None and now >= self.expires_at:
            return "expired"
        return self.status
