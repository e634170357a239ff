"""Voice samples on their way to an engine: what every backend checks before an engine sees one, and the call itself.

The worker process (``engines.worker``) and the in-process test backend run :func:`speaker_from_sample`; the pool and
the remote engine only carry the bytes. The engine bounds what it can use more tightly (ChatTTS: the duration whose
speaker prompt fits in :data:`~engines.base.MAX_SPEAKER_CHARS`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from engines.base import MAX_SPEAKER_CHARS, CloningEngine, InvalidSynthesisRequestError, cannot_clone_error

if TYPE_CHECKING:
    import numpy.typing as npt

    from engines.base import Engine, EngineInfo

__all__ = ["MAX_SAMPLE_BYTES", "MAX_TRANSCRIPT_CHARS", "check_sample", "pcm_array", "speaker_from_sample"]

MAX_SAMPLE_BYTES = 6 * 1024 * 1024
"""The largest recording any backend carries (2 min 11 s of 24 kHz mono int16); an engine node's route takes a body
this large (in base64) and no larger."""
MAX_TRANSCRIPT_CHARS = 4096
"""The longest transcript any backend carries (the longest speech input of an engine node, ``gateway/settings/``)."""
_SAMPLE_RATES = (8000, 192000)


def check_sample(pcm: bytes, sample_rate: int, transcript: str) -> None:
    """Refuse what no engine can use: no audio, half a sample, an odd rate, too much of either, no transcript.

    Raises:
        InvalidSynthesisRequestError: naming ``audio_sample`` or ``transcript``.
    """
    if not pcm or len(pcm) % 2:
        raise InvalidSynthesisRequestError("The audio sample is empty or not whole 16-bit samples.", "audio_sample")
    if len(pcm) > MAX_SAMPLE_BYTES:
        raise InvalidSynthesisRequestError(
            f"The audio sample is larger than {MAX_SAMPLE_BYTES} bytes of 16-bit PCM.", "audio_sample"
        )
    if not _SAMPLE_RATES[0] <= sample_rate <= _SAMPLE_RATES[1]:
        raise InvalidSynthesisRequestError(
            f"The audio sample's rate must be {_SAMPLE_RATES[0]} to {_SAMPLE_RATES[1]} Hz.", "audio_sample"
        )
    if not transcript.strip():
        raise InvalidSynthesisRequestError("The transcript of the audio sample is empty.", "transcript")
    if len(transcript) > MAX_TRANSCRIPT_CHARS:
        raise InvalidSynthesisRequestError(
            f"The transcript is longer than {MAX_TRANSCRIPT_CHARS} characters.", "transcript"
        )


def pcm_array(pcm: bytes) -> npt.NDArray[np.int16]:
    """Little-endian int16 bytes as a native, writable int16 array (torch refuses read-only buffers)."""
    return np.frombuffer(pcm, dtype="<i2").astype(np.int16)


def speaker_from_sample(engine: Engine, info: EngineInfo, pcm: bytes, sample_rate: int, transcript: str) -> str:
    """Check the sample, run the engine's :meth:`~engines.base.CloningEngine.speaker_from_sample`, check its answer.

    Raises:
        InvalidSynthesisRequestError: the engine cannot clone, or refused the sample or transcript.
        RuntimeError: the engine answered a speaker outside the contract (empty, or over ``MAX_SPEAKER_CHARS``).
        Exception: whatever else the engine raised (a failure).
    """
    if not (info.clones_voices and isinstance(engine, CloningEngine)):
        raise cannot_clone_error(info.name)
    check_sample(pcm, sample_rate, transcript)
    speaker = engine.speaker_from_sample(pcm_array(pcm), sample_rate, transcript)
    if not speaker or len(speaker) > MAX_SPEAKER_CHARS:
        # The engine must bound what it accepts so this cannot happen: a speaker nobody could store or send.
        raise RuntimeError(f"engine {info.name} made a speaker of {len(speaker)} characters")
    return speaker
