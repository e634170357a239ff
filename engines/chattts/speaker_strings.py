"""ChatTTS speaker strings, read without torch: the server checks a custom voice's speaker with them when the voice is
made (:func:`check_speaker`, ``engines/registry.py``), and the engine's ``SpeakerBank`` reads every custom speaker with
them when it speaks, so both judge a speaker alike.

A speaker string is one of (``engines/chattts/voices.py`` says what each speaks like):

- a ``spk_emb``: base16384 of raw LZMA2 (preset 9, extreme) of ``dim`` float16 values, as ChatTTS's
  ``Speaker._encode`` writes it; ``dim`` is the GPT's hidden size (768 for ChatTTS's published weights);
- ``seed:N``, N an integer: the embedding sampled from the seed;
- ``smp:<prompt>|<transcript>``: ``prompt`` as ChatTTS's ``Speaker.encode_prompt`` writes it, base16384 of the codes'
  shape (two little-endian uint16: ``num_vq``, frames) and raw LZMA2 of the codes (little-endian uint16).

LZMA2 turns a few bytes into gigabytes, so nothing is decompressed beyond :data:`_MAX_INFLATED_BYTES`: a speaker
string of 16384 characters costs at most a mebibyte of memory and a millisecond to refuse.
"""

from __future__ import annotations

import dataclasses
import json
import lzma
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

import numpy as np
import pybase16384 as b14  # type: ignore[import-untyped]  # ChatTTS's dependency, as is its format

from engines.base import MAX_SPEAKER_CHARS, InvalidSynthesisRequestError
from engines.chattts.assets import CONFIG_FILE, MARKER_FILE
from engines.chattts.loader import hub_snapshot

if TYPE_CHECKING:
    import numpy.typing as npt

    from engines.chattts.options import ChatTTSOptions

__all__ = [
    "PUBLISHED_SHAPE",
    "SAMPLE_PREFIX",
    "SAMPLE_SEPARATOR",
    "SEED_PREFIX",
    "SampleCodes",
    "Speaker",
    "SpeakerShape",
    "check_speaker",
    "read_embedding",
    "read_speaker",
    "sample_frames",
    "speaker_shape",
]

SEED_PREFIX = "seed:"
SAMPLE_PREFIX = "smp:"
SAMPLE_SEPARATOR = "|"
"""Ends a sample speaker's prompt: base16384 never writes it."""
_LZMA_FILTERS = [{"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME}]
_MAX_INFLATED_BYTES = 1 << 20
"""Far beyond any speaker's bytes (a full-size embedding is 1.5 KB, a 60 s sample's codes 23 KB)."""
_FRAMES_PER_S = 24000 / 512
"""DVAE codes per second of audio: a mel frame every 256 samples at 24 kHz, two frames a code (as a GPT token)."""


def sample_frames(seconds: float) -> int:
    """The most DVAE frames a sample of ``seconds`` encodes to (the mel's centred padding adds one)."""
    return math.ceil(seconds * _FRAMES_PER_S) + 1


@dataclass(frozen=True, slots=True)
class SpeakerShape:
    """What the speakers of one set of weights are made of."""

    dim: int | None
    """Values of a speaker embedding (the GPT's hidden size); ``None``: not known here (no weights where the options
    say), when any count is let through and the engine judges it once it has weights."""
    num_vq: int
    """Rows of a sample's audio codes."""
    num_audio_tokens: int
    """Audio codes of the vocabulary; the last is the end of speech, never a sample's code."""
    max_frames: int
    """The most frames of a sample's codes (the options' ``max_sample_s``)."""


PUBLISHED_SHAPE = SpeakerShape(dim=768, num_vq=4, num_audio_tokens=626, max_frames=sample_frames(30.0))
"""ChatTTS 0.2.5's ``Config()`` (``gpt.hidden_size``, ``gpt.num_vq``, ``gpt.num_audio_tokens``): the dimensions of its
published weights, written here because reading them from ChatTTS imports torch (a unit test compares them)."""


@dataclass(frozen=True, slots=True)
class SampleCodes:
    """A sample speaker's audio codes and its transcript."""

    codes: npt.NDArray[np.int64]
    """``(num_vq, frames)``."""
    transcript: str


Speaker: TypeAlias = "int | npt.NDArray[np.float16] | SampleCodes"
"""What a speaker string says: a seed, an embedding, or a sample's codes."""


class _MalformedError(ValueError):
    """Bytes that are not what ChatTTS writes."""


def speaker_shape(options: ChatTTSOptions) -> SpeakerShape:
    """The speakers the weights that ``options`` name take, from their configuration alone (no torch, no weight file
    read): a generated directory's ``chattts_config.json`` (``engines/chattts/assets.py``), else the published weights'
    (what ``engines/chattts/loader.py`` loads either directory as)."""
    published = dataclasses.replace(PUBLISHED_SHAPE, max_frames=sample_frames(options.max_sample_s))
    directory = _weights_directory(options)
    if directory is None:  # the hub's are the published weights, downloaded on the first start; a directory: unknown
        return published if options.source == "hub" else dataclasses.replace(published, dim=None)
    if not (directory / MARKER_FILE).is_file():
        return published
    try:
        gpt = json.loads((directory / CONFIG_FILE).read_text())["gpt"]
        dims = int(gpt["hidden_size"]), int(gpt["num_vq"]), int(gpt["num_audio_tokens"])
    except (OSError, ValueError, KeyError, TypeError):  # the engine says what is wrong with them when it loads
        return dataclasses.replace(published, dim=None)
    return SpeakerShape(*dims, max_frames=published.max_frames)


def _weights_directory(options: ChatTTSOptions) -> Path | None:
    if options.source == "dir":
        directory = Path(str(options.path)).expanduser() if options.path else None
        return directory if directory is not None and directory.is_dir() else None
    return hub_snapshot(Path(options.cache_dir).expanduser())


def check_speaker(options: ChatTTSOptions, speaker: str) -> None:
    """Refuse a custom voice's speaker that the weights ``options`` name could not speak with.

    Raises:
        InvalidSynthesisRequestError: what is wrong with it, ``param`` ``speaker``.
    """
    read_speaker(speaker, speaker_shape(options), param="speaker")


def read_speaker(speaker: str, shape: SpeakerShape, *, param: str) -> Speaker:
    """What ``speaker`` says (see the module's docstring), checked against ``shape``.

    Raises:
        InvalidSynthesisRequestError: a malformed speaker, or one these weights cannot use, naming ``param``.
    """
    if speaker.startswith(SAMPLE_PREFIX):
        return _read_sample(speaker, shape, param)
    if speaker.startswith(SEED_PREFIX):
        try:
            return int(speaker.removeprefix(SEED_PREFIX)) % 2**63
        except ValueError:
            raise InvalidSynthesisRequestError("a 'seed:N' speaker needs an integer N", param=param) from None
    return read_embedding(speaker, shape.dim, param=param)


def read_embedding(spk_emb: str, dim: int | None, *, param: str) -> npt.NDArray[np.float16]:
    """A ``spk_emb`` as its ``dim`` float16 values (any count where ``dim`` is ``None``), finite and not all zero.

    Raises:
        InvalidSynthesisRequestError: naming ``param``.
    """
    if not spk_emb or len(spk_emb) > MAX_SPEAKER_CHARS:
        raise InvalidSynthesisRequestError("the ChatTTS speaker embedding is empty or too long", param=param)
    try:
        values = np.frombuffer(_inflate(_base16384(spk_emb)), dtype="<f2").astype(np.float16)
    except (_MalformedError, ValueError) as exc:
        message = f"the ChatTTS speaker embedding is not a valid spk_emb string ({exc})"
        raise InvalidSynthesisRequestError(message, param=param) from None
    if dim is not None and values.shape != (dim,):
        message = f"the ChatTTS speaker embedding has {values.size} values; these weights need {dim}"
        raise InvalidSynthesisRequestError(message, param=param)
    if not np.isfinite(values).all() or not np.abs(values.astype(np.float32)).sum() > 0:
        raise InvalidSynthesisRequestError("the ChatTTS speaker embedding is not finite and non-zero", param=param)
    return values


def _read_sample(speaker: str, shape: SpeakerShape, param: str) -> SampleCodes:
    prompt, separator, transcript = speaker.removeprefix(SAMPLE_PREFIX).partition(SAMPLE_SEPARATOR)
    if not separator or not prompt or not transcript.strip() or len(speaker) > MAX_SPEAKER_CHARS:
        raise InvalidSynthesisRequestError(
            "a ChatTTS sample speaker is 'smp:<spk_smp>|<transcript>', both non-empty", param=param
        )
    try:
        codes = _sample_codes(prompt)
    except (_MalformedError, ValueError) as exc:
        message = f"the ChatTTS sample speaker's prompt is not a valid spk_smp string ({exc})"
        raise InvalidSynthesisRequestError(message, param=param) from None
    if codes.shape[0] != shape.num_vq or not 0 < codes.shape[1] <= shape.max_frames:
        message = f"the ChatTTS sample speaker's prompt must be {shape.num_vq} by 1 to {shape.max_frames} codes"
        raise InvalidSynthesisRequestError(message, param=param)
    if int(codes.max()) >= shape.num_audio_tokens - 1:  # uint16 codes: never below 0
        raise InvalidSynthesisRequestError("the ChatTTS sample speaker's codes are out of range", param=param)
    return SampleCodes(codes, transcript)


def _sample_codes(prompt: str) -> npt.NDArray[np.int64]:
    """A prompt's codes as the 2-D array its header says."""
    data = _base16384(prompt)
    if len(data) < 4:
        raise _MalformedError("no shape")
    rows, frames = (int(n) for n in np.frombuffer(data[:4], dtype="<u2"))
    values = np.frombuffer(_inflate(data[4:]), dtype="<u2")
    return values.astype(np.int64).reshape(rows, frames)  # a count that is not rows * frames: ValueError


def _base16384(text: str) -> bytes:
    decoded: bytes = b14.decode_from_string(text)
    return decoded


def _inflate(data: bytes) -> bytes:
    """Raw LZMA2 as ChatTTS writes it, at most :data:`_MAX_INFLATED_BYTES`: what would be more is refused unread."""
    decompressor = lzma.LZMADecompressor(format=lzma.FORMAT_RAW, filters=_LZMA_FILTERS)
    try:
        inflated = decompressor.decompress(data, max_length=_MAX_INFLATED_BYTES + 1)
    except lzma.LZMAError as exc:
        raise _MalformedError(f"LZMA: {exc}") from None
    if len(inflated) > _MAX_INFLATED_BYTES:
        raise _MalformedError(f"it decompresses to more than {_MAX_INFLATED_BYTES} bytes")
    if not decompressor.eof:
        raise _MalformedError("LZMA data cut short")
    return inflated
