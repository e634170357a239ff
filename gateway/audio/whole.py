"""A stream's file made whole: what its header could not say while it streamed, said once all of it is there.

A streamed FLAC cannot know its length up front: the encoder writes a write-only sink (``_muxed.py``), so its
STREAMINFO says 0 samples ("unknown"), which PyAV reads to the end but libsndfile (soundfile 0.13, libsndfile 1.2.2)
refuses to read. Audio that goes out complete (a cache hit, vLLM-Omni's sentence sent as one file) can say it.
"""

from __future__ import annotations

import io

import av

from gateway.audio.formats import AudioFormat

__all__ = ["whole_file"]

_FLAC_MAGIC = b"fLaC"
# "fLaC", a metadata block header whose type (the low 7 bits of its first byte) is 0, STREAMINFO, 34 bytes long.
_STREAMINFO_HEADER = b"\x00\x00\x00\x22"
_STREAMINFO_LAST = b"\x80\x00\x00\x22"  # the same, flagged as the last metadata block
# STREAMINFO: block sizes (4 bytes) and frame sizes (6), then 64 bits of sample rate (20), channels (3),
# bits per sample (5) and total samples (36), then the MD5 of the audio (left zero: "not computed").
_RATE_TO_TOTAL = slice(18, 26)
_TOTAL_BITS = 36


def whole_file(fmt: AudioFormat, data: bytes) -> bytes:
    """``data``, a complete file in ``fmt`` as a streaming encoder made it, with the header saying its length where
    the format has a field that a stream left unknown (FLAC's total samples); any other file as it is.

    WAV keeps its streamed sizes (0xFFFFFFFF, "to the end"), which every decoder reads whole.
    """
    if fmt is not AudioFormat.FLAC or not _streamed_flac(data):
        return data
    total = _flac_samples(data)
    if total is None or total >= 1 << _TOTAL_BITS:
        return data  # still a valid FLAC of unknown length, as it streamed
    fields = int.from_bytes(data[_RATE_TO_TOTAL], "big") & ~((1 << _TOTAL_BITS) - 1) | total
    return data[: _RATE_TO_TOTAL.start] + fields.to_bytes(8, "big") + data[_RATE_TO_TOTAL.stop :]


def _streamed_flac(data: bytes) -> bool:
    """Whether ``data`` opens with FLAC's STREAMINFO and it says 0 samples (unknown)."""
    header = data[4:8]
    if not data.startswith(_FLAC_MAGIC) or header not in {_STREAMINFO_HEADER, _STREAMINFO_LAST}:
        return False
    return int.from_bytes(data[_RATE_TO_TOTAL], "big") & ((1 << _TOTAL_BITS) - 1) == 0


def _flac_samples(data: bytes) -> int | None:
    """The samples of the FLAC file ``data``, summed from its frames as ffmpeg's parser splits them (no decoding:
    about 15 ms for 10 minutes of audio); ``None`` when PyAV cannot read it."""
    try:
        with av.open(io.BytesIO(data), mode="r", format="flac") as container:
            stream = container.streams.audio[0]
            ticks = 0
            for packet in container.demux(stream):
                ticks += packet.duration or 0  # the flush packet at the end has none
            if stream.time_base is None:
                return None
            return round(ticks * stream.time_base * stream.rate)
    except (av.FFmpegError, IndexError):
        return None
