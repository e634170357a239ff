"""Uploads that took the decoder down (issue #39), made byte for byte, ordinary multichannel recordings that must
still be accepted, and what sends them to a live gateway; for the end-to-end tests and ``bench/hostile_uploads.py``.

Every hostile file is small and well formed: what hurts is what its header declares. FFmpeg honours a FLAC or
Matroska sample rate of 1-24 Hz, so resampling one frame of it to 24 kHz multiplies it by up to 24,000 (an 8 KB FLAC
at 6 Hz became 9 GB); building a resampler for a WAV declaring hundreds of MHz costs seconds of CPU and GBs; and
PyAV 18.1 crashes (SIGSEGV) converting a planar frame of 8 or more channels to an array, which an ordinary 7.1
recording is enough for. The files are written here rather than kept in the repository so that each one says how it
was made: the FLACs by hand (STREAMINFO, then frames of one CONSTANT subframe per channel, with their CRC-8 and
CRC-16: no encoder writes 65,535-sample blocks of a 6 Hz stream, nor frames that contradict STREAMINFO), the WAVs as
a 44-byte canonical header and their samples, the Matroska file with PyAV. The same bytes on every run.

:data:`HOSTILE_UPLOADS` maps a stable name to the function that makes the file; :func:`multichannel_recording`
makes the ordinary 5.1/7.1/8-channel recordings a fixed gateway downmixes and accepts. :func:`upload_gateway_config`,
:class:`UploadClient` and :class:`ServerFootprint` are what the tests and the benchmark share to send them to a live
gateway and to see what that cost the server.
"""

from __future__ import annotations

import functools
import io
import struct
import uuid
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import av
import httpx
import numpy as np
import psutil
from av.audio.resampler import AudioResampler
from av.audio.stream import AudioStream

from auth.keys import hash_api_key
from harness.recordings import recording, speech

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

    import numpy.typing as npt

__all__ = [
    "CLONING_MODEL",
    "HOSTILE_UPLOADS",
    "MULTICHANNEL_LAYOUTS",
    "SECONDS_PER_CHAR",
    "UPLOAD_ROUTES",
    "FlacSilence",
    "ServerFootprint",
    "UploadClient",
    "UploadRoute",
    "flac_silence",
    "matroska_pcm",
    "multichannel_recording",
    "upload_gateway_config",
    "wav_pcm",
]

#: Channel count -> FFmpeg layout of the ordinary multichannel recordings (5.1 and 7.1 as a FLAC encoder writes them).
MULTICHANNEL_LAYOUTS = {1: "mono", 2: "stereo", 4: "quad", 6: "5.1", 8: "7.1"}
UploadRoute = Literal["voice_consents", "voices"]
#: Each upload route (``/v1/audio/<route>``) and its form's file field, which a refusal names as its ``param``.
UPLOAD_ROUTES: dict[UploadRoute, str] = {"voice_consents": "recording", "voices": "audio_sample"}
#: The model whose voices :class:`UploadClient` makes: the synthetic engine of :func:`upload_gateway_config`.
CLONING_MODEL = "synthetic"
#: Seconds of audio per input character that engine speaks: how long a clip of it must last.
SECONDS_PER_CHAR = 0.02
SPEECH_TEXT = "I am the owner of this voice, and I consent to its use for synthetic speech."

_FLAC_BLOCK = 65535  # the largest block a FLAC frame may declare (its 16-bit "block size - 1" field)
_FLAC_BITS = 16
_FLAC_BLOCK_SIZE_16BIT = 0b0111  # frame header: the block size follows the frame number, as 16 bits (minus one)
_FLAC_RATE_FROM_STREAMINFO = 0b0000
_FLAC_RATE_16BIT_HZ = 0b1101  # frame header: the rate follows the block size, as 16 bits in Hz
_FLAC_BITS_16 = 0b100
_FLAC_SUBFRAME_CONSTANT = 0x00  # zero padding bit, type 000000 (CONSTANT), no wasted bits
_WAV_FORMAT_PCM = 1


# ------------------------------------------------------------------------------------------------ FLAC, by hand
def _crc8(data: bytes) -> int:
    """FLAC's frame-header CRC-8 (polynomial x^8 + x^2 + x + 1, initial 0)."""
    crc = 0
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = ((crc << 1) ^ 0x07) & 0xFF if crc & 0x80 else (crc << 1) & 0xFF
    return crc


def _crc16(data: bytes) -> int:
    """FLAC's frame CRC-16 (polynomial x^16 + x^15 + x^2 + 1, initial 0), over the whole frame before it."""
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x8005) & 0xFFFF if crc & 0x8000 else (crc << 1) & 0xFFFF
    return crc


def _utf8_number(value: int) -> bytes:
    """A frame number as FLAC codes it: UTF-8's scheme, extended to 36 bits."""
    if value < 0x80:
        return bytes([value])
    continuation = []
    while True:
        continuation.append(0x80 | (value & 0x3F))
        value >>= 6
        length = len(continuation) + 1
        if value < 1 << (7 - length):  # the payload bits the lead byte of a ``length``-byte sequence has
            lead = (0xFF << (8 - length)) & 0xFF
            return bytes([lead | value, *reversed(continuation)])


@dataclass(frozen=True, slots=True)
class FlacSilence:
    """What a hand-written FLAC file of silence declares: in STREAMINFO, and in each frame's header."""

    rate: int
    """STREAMINFO's sample rate, what a probe of the file reads."""
    channels: int = 1
    """STREAMINFO's channels (1-8)."""
    block: int = _FLAC_BLOCK
    """Samples per frame (and channel)."""
    frame_rate: int | None = None
    """The rate each frame header declares (below 65,536 Hz); ``None``: "as STREAMINFO says"."""
    frame_channels: int | None = None
    """The channels each frame holds (1-8); ``None``: STREAMINFO's."""
    from_frame: int = 0
    """The first frame declaring ``frame_rate`` and ``frame_channels``; those before it agree with STREAMINFO (what
    a probe reading the first frames sees)."""

    def streaminfo(self, frame_bytes: int) -> bytes:
        """The STREAMINFO block, marked last: a fixed block size, 16 bits, the total of samples and the MD5 left
        unknown (zeros, as a streaming encoder writes them): nothing declares how long the file lasts."""
        packed = self.rate << 44 | (self.channels - 1) << 41 | (_FLAC_BITS - 1) << 36
        body = struct.pack(">HH", self.block, self.block) + frame_bytes.to_bytes(3, "big") * 2
        body += packed.to_bytes(8, "big") + bytes(16)
        return bytes([0x80]) + len(body).to_bytes(3, "big") + body

    def frame(self, number: int) -> bytes:
        """Frame ``number``: ``block`` samples of silence, one CONSTANT subframe of 0 per channel."""
        switched = number >= self.from_frame
        channels = (switched and self.frame_channels) or self.channels
        frame_rate = self.frame_rate if switched else None
        rate_code = _FLAC_RATE_FROM_STREAMINFO if frame_rate is None else _FLAC_RATE_16BIT_HZ
        header = bytes([0xFF, 0xF8, _FLAC_BLOCK_SIZE_16BIT << 4 | rate_code, (channels - 1) << 4 | _FLAC_BITS_16 << 1])
        header += _utf8_number(number) + struct.pack(">H", self.block - 1)
        if frame_rate is not None:
            header += struct.pack(">H", frame_rate)
        subframe = bytes([_FLAC_SUBFRAME_CONSTANT]) + (0).to_bytes(_FLAC_BITS // 8, "big")
        frame = header + bytes([_crc8(header)]) + subframe * channels
        return frame + struct.pack(">H", _crc16(frame))


def _frames_within(shape: FlacSilence, size: int) -> Iterator[bytes]:
    """Frames, numbered from 0, while the file (its header included) stays within ``size`` bytes."""
    used = len(b"fLaC") + len(shape.streaminfo(0))
    number = 0
    while used + len(frame := shape.frame(number)) <= size:
        yield frame
        used += len(frame)
        number += 1


def flac_silence(shape: FlacSilence, size: int = 8318) -> bytes:
    """As many frames of ``shape`` as fit in ``size`` bytes, behind its STREAMINFO: a valid FLAC file whose every
    frame resamples to ``block * 24000 / rate`` samples at 24 kHz."""
    frames = list(_frames_within(shape, size))
    largest = max((len(frame) for frame in frames), default=0)
    return b"fLaC" + shape.streaminfo(largest) + b"".join(frames)


def _flac_within_allocation_cap(rate: int) -> bytes:
    """Silence at 1-4 Hz in blocks no larger than what 3 Hz resamples to in one go (524 million samples, 2 GB as
    floats): a larger one exceeds FFmpeg's 2 GiB allocation cap and fails at once, harmlessly, where this one makes
    the resampler allocate and fill it (then yields nothing: "0.00 s, too short")."""
    return flac_silence(FlacSilence(rate, block=min(_FLAC_BLOCK, _FLAC_BLOCK * rate // 3)))


# ------------------------------------------------------------------------------------------------ WAV and Matroska
def wav_pcm(data: bytes, *, rate: int, channels: int, bits: int) -> bytes:
    """``data`` (interleaved PCM samples) behind a 44-byte canonical WAV header: plain PCM (format tag 1), whatever
    ``rate`` and ``channels`` say, which is what FFmpeg's WAV demuxer believes."""
    align = channels * bits // 8
    fmt = struct.pack("<HHIIHH", _WAV_FORMAT_PCM, channels, rate, rate * align, align, bits)
    chunks = b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", 4 + len(chunks)) + b"WAVE" + chunks


def matroska_pcm(rate: int, samples: int = 65536, frame_samples: int = 4096) -> bytes:
    """Mono signed 16-bit silence in Matroska (``A_PCM/INT/LIT``) declared at ``rate`` Hz: FFmpeg's Matroska PCM
    decoder honours any rate, so every 4096-sample packet at 1 Hz becomes 98 million samples at 24 kHz."""
    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format="matroska", options={"fflags": "+bitexact"}) as container:
        stream = container.add_stream("pcm_s16le", rate=rate)
        assert isinstance(stream, AudioStream)
        stream.layout = "mono"
        stream.codec_context.open()
        for start in range(0, samples, frame_samples):
            frame = av.AudioFrame.from_ndarray(np.zeros((1, frame_samples), np.int16), format="s16", layout="mono")
            frame.sample_rate, frame.pts, frame.time_base = rate, start, Fraction(1, rate)
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    return buffer.getvalue()


def _wav_8ch_u8_1hz() -> bytes:
    """8 channels of unsigned 8-bit silence (0x80) declared at 1 Hz, 8192 sample frames: 65,580 bytes."""
    return wav_pcm(b"\x80" * 8 * 8192, rate=1, channels=8, bits=8)


def _wav_16ch_24khz() -> bytes:
    """16 channels of s16 silence at an ordinary 24 kHz, 1 s: more channels than any recording a gateway takes
    (PyAV crashes on 8 or more; a fixed gateway refuses more than 8)."""
    return wav_pcm(bytes(16 * 2 * 24000), rate=24000, channels=16, bits=16)


def _wav_380mhz() -> bytes:
    """Mono s16 silence declaring 380,000,001 Hz, 4 KB of it. Downsampling by 15,833 takes a low-pass filter of
    half a million taps, and a rate sharing no factor above 3 with 24 kHz takes FFmpeg's resampler to its 1024 filter
    phases: 535 million coefficients (2 GB) computed before the first sample comes out."""
    return wav_pcm(bytes(4096), rate=380_000_001, channels=1, bits=16)


def _wav_520mhz_77_bytes() -> bytes:
    """A fuzzer's find: 33 unsigned 8-bit samples declared at 520,000,040 Hz, 77 bytes in all. Its greatest common
    divisor with 24 kHz (40) gives 600 filter phases of 715,000 taps: just under FFmpeg's 2 GiB allocation cap, which
    a rate of 1024 phases would exceed (and fail at once)."""
    return wav_pcm(b"\x80" * 33, rate=520_000_040, channels=1, bits=8)


#: Name -> the function making a hostile upload, which a fixed gateway refuses with a 400 at no cost to the server.
#: Those of issue #39's table took the old decoder to GBs of memory, seconds of CPU, or a crash.
HOSTILE_UPLOADS: dict[str, Callable[[], bytes]] = {
    "flac_6hz_block65535": functools.partial(flac_silence, FlacSilence(6)),
    "flac_24hz": functools.partial(flac_silence, FlacSilence(24)),
    "flac_1hz": functools.partial(_flac_within_allocation_cap, 1),
    "flac_2hz": functools.partial(_flac_within_allocation_cap, 2),
    "flac_3hz": functools.partial(_flac_within_allocation_cap, 3),
    "flac_4hz": functools.partial(_flac_within_allocation_cap, 4),
    "matroska_pcm_1hz": functools.partial(matroska_pcm, 1),
    "wav_8ch_u8_1hz": _wav_8ch_u8_1hz,
    "wav_16ch_24khz": _wav_16ch_24khz,
    "wav_380mhz": _wav_380mhz,
    "wav_520mhz_77_bytes": _wav_520mhz_77_bytes,
    # What a probe of STREAMINFO or of the first frames does not see: FFmpeg's FLAC decoder follows each frame's
    # header. The first took the old decoder to 9 GB as the 6 Hz one did; the old decoder refused the other two only
    # because PyAV's resampler refuses a stream that changes format mid-way: a probe must not let them by.
    "flac_streaminfo_44khz_frames_6hz": functools.partial(flac_silence, FlacSilence(44100, frame_rate=6)),
    "flac_44khz_then_6hz": functools.partial(flac_silence, FlacSilence(44100, frame_rate=6, from_frame=1)),
    "flac_mono_then_8ch": functools.partial(
        flac_silence, FlacSilence(44100, block=4096, frame_channels=8, from_frame=8)
    ),
}


# ------------------------------------------------------------------------------------------------ ordinary recordings
@functools.cache
def _spoken(rate: int, seconds: float) -> npt.NDArray[np.int16]:
    """espeak's speech, repeated to ``seconds`` and resampled to ``rate`` (mono)."""
    pcm, source_rate = speech(SPEECH_TEXT)
    frame = av.AudioFrame.from_ndarray(pcm.reshape(1, -1), format="s16", layout="mono")
    frame.sample_rate = source_rate
    resampler = AudioResampler(format="s16", layout="mono", rate=rate)
    resampled = [*resampler.resample(frame), *resampler.resample(None)]  # mono: safe to turn into arrays
    mono = np.concatenate([out.to_ndarray().reshape(-1) for out in resampled])
    wanted = int(seconds * rate)
    return np.tile(mono, -(-wanted // len(mono)))[:wanted]


def multichannel_recording(container: Literal["wav", "flac"], channels: int, rate: int, seconds: float = 3.0) -> bytes:
    """An ordinary recording of ``channels`` channels (6: 5.1, 8: 7.1; see :data:`MULTICHANNEL_LAYOUTS`), espeak's
    speech in every one, signed 16-bit at ``rate``, as WAV (PCM) or FLAC: what a gateway must downmix and accept."""
    layout = MULTICHANNEL_LAYOUTS[channels]
    # Packed s16 (one row, the channels interleaved) made with numpy: no frame of 8 channels is turned into an array.
    interleaved = np.repeat(_spoken(rate, seconds), channels).reshape(1, -1)
    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format=container) as output:
        stream = output.add_stream("pcm_s16le" if container == "wav" else "flac", rate=rate)
        assert isinstance(stream, AudioStream)
        stream.layout = layout
        stream.format = "s16"
        stream.codec_context.open()
        frame = av.AudioFrame.from_ndarray(interleaved, format="s16", layout=layout)
        frame.sample_rate, frame.pts, frame.time_base = rate, 0, Fraction(1, rate)
        output.mux(stream.encode(frame))
        output.mux(stream.encode(None))
    return buffer.getvalue()


# ------------------------------------------------------------------------------------------------ sending them
def upload_gateway_config(keys: Mapping[str, str], *, espeak: bool = False) -> dict[str, Any]:
    """A gateway for upload attacks: a tenant per ``keys`` entry (name -> API key), the synthetic engine (it makes
    voices from samples, and speaks), no Redis (consents and voices in memory), and caps no run reaches (a refusal
    for a full tenant would come before the decoding under test); with ``espeak``, the espeak engine too (the
    embedded default's, for a bystander whose speech takes real work)."""
    tenants = [{"name": name, "api_key_sha256": [hash_api_key(key)]} for name, key in keys.items()]
    synthetic = {"kind": "synthetic", "workers": 2, "options": {"seconds_per_char": SECONDS_PER_CHAR}}
    return {
        "auth": {"tenants": tenants},
        "voices": {"max_per_tenant": 100_000, "max_consents_per_tenant": 100_000},
        "engines": {CLONING_MODEL: synthetic, **({"espeak": {"kind": "espeak", "workers": 1}} if espeak else {})},
        "aliases": {},
    }


class UploadClient:
    """One tenant's client of both upload routes, with the consent its voice uploads name: a voice upload reaches the
    decoder only with a consent the tenant has. Safe to share between threads, as httpx's client is."""

    def __init__(self, base_url: str, key: str, *, timeout_s: float = 120.0) -> None:
        headers = {"authorization": f"Bearer {key}"}
        self.http = httpx.Client(base_url=base_url, headers=headers, timeout=timeout_s)
        consent = self.upload("voice_consents", recording("wav"))
        consent.raise_for_status()
        self.consent: str = consent.json()["id"]

    def upload(self, route: UploadRoute, data: bytes, filename: str = "upload.bin") -> httpx.Response:
        """POST ``data`` as the file of ``route``'s form, with the form's other fields valid."""
        if route == "voice_consents":
            fields = {"name": "hostile", "language": "en"}
        else:
            fields = {
                "name": f"v{uuid.uuid4().hex}",
                "consent": self.consent,
                "transcript": "Hello.",
                "model": CLONING_MODEL,
            }
        files = {UPLOAD_ROUTES[route]: (filename, data, "application/octet-stream")}
        return self.http.post(f"/v1/audio/{route}", data=fields, files=files)

    def forget(self, route: UploadRoute, response: httpx.Response) -> None:
        """Delete what an accepted upload made, so that a long run neither fills the tenant nor grows the store."""
        if response.status_code == httpx.codes.CREATED:
            self.http.delete(f"/v1/audio/{route}/{response.json()['id']}").raise_for_status()

    def close(self) -> None:
        self.http.close()


@dataclass(frozen=True, slots=True)
class ServerFootprint:
    """A process's identity and memory at one moment: whether it is the same process, and what it holds and held."""

    pid: int
    started: float
    """Its start time: a process restarted under the same pid has another."""
    rss: int
    """Resident bytes now."""
    peak_rss: int
    """The most resident bytes it ever had (Linux's VmHWM): what a decoding that was freed since still shows."""

    @classmethod
    def of(cls, pid: int) -> ServerFootprint:
        """The footprint of process ``pid`` now.

        Raises:
            psutil.Error: no such process, or one that has ended (a zombie has no memory left to show).
        """
        process = psutil.Process(pid)
        started, rss = process.create_time(), process.memory_info().rss
        status = Path(f"/proc/{pid}/status").read_text()
        peaks = [int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")]
        if not peaks:
            raise psutil.ZombieProcess(pid)
        return cls(pid, started, rss, peaks[0] * 1024)

    def same_process(self, other: ServerFootprint) -> bool:
        return (self.pid, self.started) == (other.pid, other.started)
