"""G.711 streaming encoders: OpenAI Realtime's ``audio/pcmu`` (μ-law) and ``audio/pcma`` (A-law) at 8 kHz.

Telephony stacks (SIP trunks, Twilio media streams) take these bytes as they are: one byte per sample, mono, no
header. The companding follows the ITU-T G.191 reference implementation of G.711 (``ulaw_compress`` and
``alaw_compress`` in the STL's ``g711.c``), vectorised with numpy into one lookup table per law. It is written here
because the only implementation in the standard library, ``audioop``, is gone from Python 3.13, and PyAV's
``pcm_mulaw``/``pcm_alaw`` encoders would cost a codec context and a frame per chunk for a table lookup.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Literal, TypeAlias

import numpy as np

from gateway.audio._tempo import drain_with_silence, s16_stage

if TYPE_CHECKING:
    import numpy.typing as npt

    from gateway.audio._tempo import S16Stage
    from gateway.audio.encoders import AudioEncoder

__all__ = ["G711_SAMPLE_RATE", "G711Law", "open_g711_encoder"]

G711Law: TypeAlias = Literal["pcmu", "pcma"]
"""``pcmu`` for μ-law (North America, Japan), ``pcma`` for A-law (elsewhere): the names of OpenAI's formats."""

G711_SAMPLE_RATE: Final = 8000
"""The one sample rate of G.711 audio, in Hz."""

# The upper bounds (exclusive) of a magnitude's bit lengths 1 to 7: searchsorted against them gives the bit length
# of every element at once, which is how both laws find a sample's segment.
_POWERS_OF_TWO = np.array([1, 2, 4, 8, 16, 32, 64], dtype=np.int32)
_ULAW_BIAS = 33  # 0x84 on the 16-bit scale, added before the segment search so that segments double in width
_ULAW_MAX = 0x1FFF  # the largest biased 14-bit magnitude
_ALAW_EVEN_BITS = 0x55  # A-law inverts every even bit, so that idle lines carry transitions
_SIGN_BIT = 0x80


def _one_complement_magnitude(samples: npt.NDArray[np.int32], shift: int) -> npt.NDArray[np.int32]:
    """The STL's magnitude: ``x >> shift`` for a positive sample, ``~x >> shift`` for a negative one.

    G.711 works on sign and magnitude; the reference takes a negative sample's one's complement, so that -1 encodes
    as "negative zero" and -32768 as the largest negative code, symmetrical with +32767.
    """
    return np.where(samples < 0, ~samples, samples) >> shift


def _ulaw(samples: npt.NDArray[np.int32]) -> npt.NDArray[np.uint8]:
    """μ-law codes of 16-bit samples: 14-bit magnitude plus 33, 3-bit segment, 4-bit step, all bits inverted."""
    biased = np.minimum(_one_complement_magnitude(samples, 2) + _ULAW_BIAS, _ULAW_MAX)
    segment = np.searchsorted(_POWERS_OF_TWO, biased >> 6, side="right") + 1  # 1 to 8
    step = (biased >> segment) & 0x0F
    code = ((8 - segment) << 4) | (0x0F - step)  # segment and step inverted
    return np.where(samples >= 0, code | _SIGN_BIT, code).astype(np.uint8)


def _alaw(samples: npt.NDArray[np.int32]) -> npt.NDArray[np.uint8]:
    """A-law codes of 16-bit samples: 12-bit magnitude, 3-bit segment, 4-bit step, even bits inverted."""
    magnitude = _one_complement_magnitude(samples, 4)  # 0 to 2047
    # Segment 0 holds magnitudes 0-15 linearly, as does segment 1 (16-31); each later one spans twice the last.
    segment = np.maximum(np.searchsorted(_POWERS_OF_TWO, magnitude >> 4, side="right"), 1)
    step = np.where(magnitude > 15, (magnitude >> (segment - 1)) - 16, magnitude)
    code = np.where(magnitude > 15, (segment << 4) + step, magnitude)
    return (np.where(samples >= 0, code | _SIGN_BIT, code) ^ _ALAW_EVEN_BITS).astype(np.uint8)


def _table(law: G711Law) -> npt.NDArray[np.uint8]:
    """The code of every 16-bit sample, indexed by the sample's bits read as unsigned."""
    samples = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.int16).astype(np.int32)
    return _ulaw(samples) if law == "pcmu" else _alaw(samples)


# 64 KiB each, built once at import (a few milliseconds): encoding is then one fancy-indexing pass per chunk.
_TABLES: Final = {"pcmu": _table("pcmu"), "pcma": _table("pcma")}


def open_g711_encoder(law: G711Law, input_rate: int, tempo: float = 1.0) -> AudioEncoder:
    """Open a streaming G.711 encoder: 16-bit mono PCM in, 8 kHz μ-law or A-law bytes out.

    Args:
        law: ``pcmu`` (μ-law) or ``pcma`` (A-law).
        input_rate: Sample rate of the PCM that will be fed, in Hz; resampled to 8 kHz.
        tempo: Speed factor from ``MIN_TEMPO`` (0.25) to ``MAX_TEMPO`` (4.0), as for :func:`open_encoder`.

    Returns:
        A fresh encoder for one stream; the bytes it returns, in order, are the whole headerless stream.

    Raises:
        ValueError: If ``law`` is neither law, ``input_rate`` is not positive or ``tempo`` is out of range.
    """
    if law not in _TABLES:
        msg = f"law must be 'pcmu' or 'pcma', got {law!r}"
        raise ValueError(msg)
    return _G711Encoder(s16_stage(input_rate, G711_SAMPLE_RATE, tempo), _TABLES[law])


class _G711Encoder:
    """Resamples to 8 kHz, then maps every sample to its byte; the companding itself holds nothing back."""

    def __init__(self, stage: S16Stage, table: npt.NDArray[np.uint8]) -> None:
        self._stage = stage
        self._table = table
        self.drained_s = 0.0

    def encode(self, pcm: bytes) -> bytes:
        return self._compand(self._stage.push_s16(pcm))

    def drain(self) -> bytes:
        data, self.drained_s = drain_with_silence(self._stage, self.encode, 0)
        return data

    def finish(self) -> bytes:
        return self._compand(self._stage.flush_s16())

    def _compand(self, pcm: bytes) -> bytes:
        if not pcm:
            return b""
        codes: npt.NDArray[np.uint8] = self._table[np.frombuffer(pcm, dtype="<u2")]
        return codes.tobytes()
