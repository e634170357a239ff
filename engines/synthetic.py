"""A deterministic engine without model compute, for tests and benchmarks.

It speaks tones: each voice (and each custom speaker) has its own pitch, and the clip lasts ``seconds_per_char``
per input character. Pacing (chunk size, per-chunk delay, real-time factor) is configurable, and faults can be
injected either for every request (options) or per request by a directive in the text, so one configured engine can
exercise every failure path:

- ``#fail`` — raise before the first chunk;
- ``#fail-after=N`` — raise after N chunks;
- ``#hang-after=N`` — stop making progress after N chunks, ignoring cancellation (a stuck generation);
- ``#crash-after=N`` — kill the worker process after N chunks.

It makes voices from samples too (:meth:`SyntheticEngine.speaker_from_sample`): the speaker is ``sample:`` and a hash
of the recording and its transcript, so the same sample gives the same voice and a test hears which one spoke. The
directives work in a sample's transcript as well (``#fail``, ``#hang-after=0``, ``#crash-after=0``).
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import time
from typing import TYPE_CHECKING

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from engines.base import OPENAI_VOICES, EngineInfo, EngineUnavailableError, InvalidSynthesisRequestError, VoiceInfo

if TYPE_CHECKING:
    from collections.abc import Generator, Iterator, Mapping

    import numpy.typing as npt

    from engines.base import CancelToken, SynthesisRequest

__all__ = ["SyntheticEngine", "SyntheticOptions", "check_speaker", "voice_frequency"]

_DIRECTIVE = re.compile(r"#(fail-after|hang-after|crash-after|fail)(?:=(\d+))?")  # longest first
_AMPLITUDE = 0.3 * 32767


class SyntheticOptions(BaseModel):
    """Options of the synthetic engine (the ``options`` of a ``kind: synthetic`` engine). Unknown keys are rejected."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sample_rate: int = Field(default=24000, ge=8000, le=192000)
    """Output rate of the engine."""
    seconds_per_char: float = Field(default=0.05, gt=0)
    """Clip length per input character."""
    chunk_ms: int = Field(default=100, ge=1, le=10000)
    """Chunk length."""
    chunk_delay_ms: float = Field(default=0.0, ge=0)
    """Fixed pause before each chunk."""
    rtf: float = Field(default=0.0, ge=0)
    """Real-time factor: pause ``rtf`` times the chunk's duration before each chunk (0.5 = twice real time)."""
    request_delay_ms: float = Field(default=0.0, ge=0)
    """Fixed pause before the first chunk (a model's time to first audio)."""
    native_speed: bool = False
    """Render ``speed`` natively (shorter tones) instead of leaving it to the gateway's time-stretch."""
    load_delay_s: float = Field(default=0.0, ge=0)
    """Pause while loading."""
    unavailable: str = ""
    """When set, loading fails with this reason (an engine without weights)."""
    fail_after_chunks: int = -1
    """Raise after this many chunks in every request (-1: never)."""
    clones_voices: bool = True
    """Make voices from samples (off: the engine refuses them, as one that cannot clone)."""


def voice_frequency(voice: str, speaker: str | None = None) -> float:
    """The tone of a voice: OpenAI voices get 200, 240, ... Hz in the order of ``OPENAI_VOICES``.

    A custom speaker (any string; ``seed:N`` included) gets a tone from 110 to 1100 Hz derived from its hash.
    """
    if speaker is not None:
        return 110.0 + int(hashlib.sha256(speaker.encode()).hexdigest()[:8], 16) % 991
    return 200.0 + 40.0 * OPENAI_VOICES.index(voice)


def check_speaker(options: SyntheticOptions, speaker: str) -> None:
    """What the server asks when a custom voice is made for this engine (``engines/registry.py``): any printable text
    is a speaker (its tone comes from its hash).

    Raises:
        InvalidSynthesisRequestError: a speaker that is not printable text, naming ``speaker``.
    """
    del options  # every speaker is judged alike
    _check_printable(speaker, param="speaker")


def _check_printable(speaker: str, *, param: str) -> None:
    if not speaker.isprintable():
        raise InvalidSynthesisRequestError("a custom speaker must be printable text", param=param)


class SyntheticEngine:
    """Tones whose pitch encodes the voice and whose length encodes the text."""

    def __init__(self, options: SyntheticOptions | Mapping[str, object] | None = None) -> None:
        self.options = SyntheticOptions.model_validate(options or {})

    def load(self) -> EngineInfo:
        time.sleep(self.options.load_delay_s)
        if self.options.unavailable:
            raise EngineUnavailableError(self.options.unavailable)
        speed_range = (0.25, 4.0) if self.options.native_speed else (1.0, 1.0)
        voices = tuple(VoiceInfo(v, f"{voice_frequency(v):.0f} Hz tone") for v in OPENAI_VOICES)
        return EngineInfo(
            "synthetic", self.options.sample_rate, voices, speed_range=speed_range,
            clones_voices=self.options.clones_voices,
        )  # fmt: skip

    def speaker_from_sample(self, pcm: npt.NDArray[np.int16], sample_rate: int, transcript: str) -> str:
        """``sample:`` and 32 hex digits of the SHA-256 of the PCM, its rate and its transcript."""
        faults = dict(_parse_directives(transcript))
        if "fail" in faults:
            raise RuntimeError("injected failure while encoding a sample")
        if "hang-after" in faults:
            time.sleep(3600)  # a stuck encoder: only the pool's timeout ends it
        if "crash-after" in faults:
            os._exit(70)
        digest = hashlib.sha256(f"{sample_rate}:{transcript}:".encode())
        digest.update(np.asarray(pcm, dtype="<i2").tobytes())
        return "sample:" + digest.hexdigest()[:32]

    def synthesize(
        self, request: SynthesisRequest, cancel: CancelToken
    ) -> Generator[npt.NDArray[np.int16], None, None]:
        if request.speaker is None and request.voice not in OPENAI_VOICES:
            raise InvalidSynthesisRequestError(f"unknown voice {request.voice!r}", param="voice")
        if request.speaker is not None:
            _check_printable(request.speaker, param="voice")
        faults = dict(_parse_directives(request.text))
        if "fail" in faults:
            raise RuntimeError("injected failure before the first chunk")
        fail_after = faults.get("fail-after", self.options.fail_after_chunks)
        _pause(self.options.request_delay_ms / 1000, cancel)
        for index, chunk in enumerate(self._tone_chunks(request)):
            if index == fail_after:
                raise RuntimeError(f"injected failure after {index} chunks")
            if index == faults.get("hang-after"):
                time.sleep(3600)  # a stuck generation: deaf to cancellation, only the watchdog ends it
            if index == faults.get("crash-after"):
                os._exit(70)  # a dying worker process, as a segfault in a native library would be
            chunk_s = chunk.size / self.options.sample_rate
            _pause(self.options.chunk_delay_ms / 1000 + self.options.rtf * chunk_s, cancel)
            if cancel.is_set():
                return
            yield chunk

    def _tone_chunks(self, request: SynthesisRequest) -> Iterator[npt.NDArray[np.int16]]:
        rate = self.options.sample_rate
        speed = request.speed if self.options.native_speed else 1.0
        total = max(1, round(len(request.text) * self.options.seconds_per_char / speed * rate))
        step = max(1, rate * self.options.chunk_ms // 1000)
        omega = 2 * math.pi * voice_frequency(request.voice, request.speaker) / rate
        for start in range(0, total, step):
            t = np.arange(start, min(start + step, total), dtype=np.float64)
            yield (np.sin(omega * t) * _AMPLITUDE).astype(np.int16)


def _parse_directives(text: str) -> Iterator[tuple[str, int]]:
    for match in _DIRECTIVE.finditer(text):
        yield match.group(1), int(match.group(2) or 0)


def _pause(seconds: float, cancel: CancelToken) -> None:
    # Sleep in short steps so that a cancelled request frees the worker within a few milliseconds.
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0 and not cancel.is_set():
        time.sleep(min(left, 0.01))
