"""ctypes binding to the espeak-ng library and data shipped by the ``espeakng-loader`` wheel.

espeak-ng keeps all of its state in process-wide globals (the current voice, parameters, the synthesis callback), so
this module opens it once per process and lets one synthesis run at a time. Only the handful of calls the espeak
engine needs are bound; the layouts follow ``espeak-ng/speak_lib.h`` (1.52).
"""

from __future__ import annotations

import ctypes
import importlib
import os
import threading
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final, TypeAlias

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["EspeakError", "EspeakLibrary", "PcmSink", "SpeechParameters", "WordEvent", "open_espeak"]

#: A word espeak is about to speak: ``(character offset in the text, sample offset from the start of the synthesis)``.
WordEvent: TypeAlias = tuple[int, int]

#: Called with each buffer of samples espeak produces and the words that start in it; returns True to abort the
#: synthesis. The buffer may be empty when only words are reported.
PcmSink: TypeAlias = Callable[[npt.NDArray[np.int16], tuple[WordEvent, ...]], bool]

_AUDIO_OUTPUT_SYNCHRONOUS: Final = 2
_INITIALIZE_DONT_EXIT: Final = 0x8000  # without it a missing data directory makes espeak call exit(1)
_CHARS_UTF8: Final = 1
_POS_CHARACTER: Final = 1
_EE_OK: Final = 0
_RATE: Final = 1
_PITCH: Final = 3
_PROBE_VOICE: Final = "en-us"

_EVENT_LIST_TERMINATED: Final = 0
_EVENT_WORD: Final = 1


class _Event(ctypes.Structure):
    """``espeak_EVENT`` (speak_lib.h): ``text_position`` counts characters from 1 (UTF-8 input counts code points, not
    bytes), ``sample`` the samples from the start of the synthesis to the event (``audio_position`` is the same in
    milliseconds). A callback's events are those whose sample lies in its buffer, the list ending with
    ``espeakEVENT_LIST_TERMINATED``."""

    _fields_ = (
        ("type", ctypes.c_int),
        ("unique_identifier", ctypes.c_uint),
        ("text_position", ctypes.c_int),
        ("length", ctypes.c_int),
        ("audio_position", ctypes.c_int),
        ("sample", ctypes.c_int),
        ("user_data", ctypes.c_void_p),
        ("id", ctypes.c_char * 8),  # a union of int, const char * and char[8]: 8 bytes
    )


# int callback(short *wav, int numsamples, espeak_EVENT *events)
_SynthCallback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.POINTER(_Event))

_instance: EspeakLibrary | None = None
_instance_lock = threading.Lock()


class EspeakError(RuntimeError):
    """espeak-ng could not be loaded, or refused a call."""


@dataclass(frozen=True, slots=True)
class SpeechParameters:
    """What one synthesis is spoken with."""

    voice: str
    """An espeak voice name, optionally with a ``+variant`` suffix (``en-us+f2``)."""
    rate_wpm: int
    """Speaking rate in words per minute (``espeakRATE``)."""
    pitch: int
    """Base pitch, 0-100 with 50 the voice's own (``espeakPITCH``)."""


def open_espeak(buffer_ms: int) -> EspeakLibrary:
    """Return the process's espeak-ng, initialising it on first use.

    Args:
        buffer_ms: Length of espeak's output buffer, which bounds each callback's samples. Only the first call's
            value takes effect: espeak is initialised once per process.

    Raises:
        EspeakError: The library or its data is missing or unusable.
    """
    global _instance  # noqa: PLW0603 - espeak's state is per process, so is its handle
    with _instance_lock:
        if _instance is None:
            _instance = EspeakLibrary(*_locate_espeak(), buffer_ms=buffer_ms)
        return _instance


def _locate_espeak() -> tuple[Path, Path]:
    try:
        # Imported by name: the wheel ships no type information, and it is only needed here.
        loader = importlib.import_module("espeakng_loader")
    except ImportError as exc:
        raise EspeakError("the espeakng-loader package is not installed") from exc
    library = Path(str(loader.get_library_path()))
    if not library.is_file():
        raise EspeakError(f"libespeak-ng not found at {library}")
    try:
        data = Path(str(loader.get_data_path()))
    except RuntimeError as exc:  # the loader's way of saying the data directory is missing
        raise EspeakError(str(exc)) from exc
    return library, data


class EspeakLibrary:
    """The process-wide espeak-ng instance, in synchronous mode with audio delivered to a Python callback.

    Args:
        library_path: The ``libespeak-ng`` shared object.
        data_path: The ``espeak-ng-data`` directory.
        buffer_ms: Length of espeak's output buffer.

    Raises:
        EspeakError: The library cannot be loaded or initialised with that data.
    """

    def __init__(self, library_path: Path, data_path: Path, *, buffer_ms: int) -> None:
        self.data_path = data_path
        self._lib = _load_cdll(library_path)
        self._lock = threading.Lock()
        self._sink: PcmSink | None = None
        self._sink_error: BaseException | None = None
        self.sample_rate = self._initialize(buffer_ms)
        self.version = self._version()
        # Kept on self: ctypes does not own the callback, and espeak would call freed memory once it is collected.
        self._callback = _SynthCallback(self._on_audio)
        self._lib.espeak_SetSynthCallback(self._callback)
        if not self.has_voice(_PROBE_VOICE):
            raise EspeakError(f"espeak-ng cannot load voice {_PROBE_VOICE!r} from its data at {data_path}")

    def has_voice(self, voice: str) -> bool:
        """Whether espeak can select ``voice``, including its ``+variant``.

        espeak silently ignores an unknown variant, so variants are looked up in the data directory.
        """
        language, _, variant = voice.partition("+")
        if variant and not (self.data_path / "voices" / "!v" / variant).is_file():
            return False
        with self._claim():
            return int(self._lib.espeak_SetVoiceByName(language.encode())) == _EE_OK

    def speak(self, text: str, parameters: SpeechParameters, sink: PcmSink) -> None:
        """Synthesize ``text`` as plain text (no SSML), handing each buffer to ``sink`` until it returns True; the
        words it reports have their character offsets in ``text``.

        Blocks until espeak is done or aborted; runs in whichever thread calls it.

        Raises:
            EspeakError: espeak is busy with another synthesis, or refused the voice or the text.
        """
        kept = [index for index, ch in enumerate(text) if ch != "\0" and not "\ud800" <= ch <= "\udfff"]
        spoken = "".join(text[index] for index in kept) if len(kept) < len(text) else text
        data = spoken.encode("utf-8") + b"\0"
        if spoken is not text:  # what espeak counts is the text without NULs and lone surrogates
            sink = _in_original(sink, kept, len(text))
        with self._claim():
            self._apply(parameters)
            _check(self._synth(data, sink), "espeak_Synth")

    @contextmanager
    def _claim(self) -> Iterator[None]:
        # Never wait: a second caller means a synthesis overlaps another, which espeak's globals cannot serve.
        if not self._lock.acquire(blocking=False):
            raise EspeakError("espeak-ng is busy with another synthesis in this process")
        try:
            yield
        finally:
            self._lock.release()

    def _synth(self, data: bytes, sink: PcmSink) -> int:
        self._sink, self._sink_error = sink, None
        try:
            status = int(self._lib.espeak_Synth(data, len(data), 0, _POS_CHARACTER, 0, _CHARS_UTF8, None, None))
        finally:
            self._sink = None
        error, self._sink_error = self._sink_error, None
        if error is not None:
            raise error
        return status

    def _apply(self, parameters: SpeechParameters) -> None:
        _check(int(self._lib.espeak_SetVoiceByName(parameters.voice.encode())), f"voice {parameters.voice!r}")
        # After the voice: selecting a voice may reset the rate and pitch to its own.
        _check(int(self._lib.espeak_SetParameter(_RATE, parameters.rate_wpm, 0)), "espeakRATE")
        _check(int(self._lib.espeak_SetParameter(_PITCH, parameters.pitch, 0)), "espeakPITCH")

    def _on_audio(self, wav: ctypes._Pointer[ctypes.c_short], count: int, events: ctypes._Pointer[_Event]) -> int:
        sink = self._sink
        if sink is None:
            return 1
        words = _words(events)
        if (count <= 0 or not wav) and not words:  # the final call of each synthesis carries no samples
            return 0
        try:
            pcm = np.array(np.ctypeslib.as_array(wav, shape=(count,)), dtype=np.int16) if count > 0 and wav else _NONE
            return int(sink(pcm, words))
        except BaseException as exc:  # cannot cross the C frames: re-raised in speak()
            self._sink_error = exc
            return 1

    def _initialize(self, buffer_ms: int) -> int:
        path = os.fsencode(self.data_path)
        rate = int(self._lib.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, buffer_ms, path, _INITIALIZE_DONT_EXIT))
        if rate <= 0:
            raise EspeakError(f"espeak_Initialize failed ({rate}) with data at {self.data_path}")
        return rate

    def _version(self) -> str:
        version = self._lib.espeak_Info(None)
        return version.decode() if isinstance(version, bytes) else "unknown"


_NONE: Final = np.empty(0, dtype=np.int16)


def _words(events: ctypes._Pointer[_Event]) -> tuple[WordEvent, ...]:
    """The word events of a callback's list: ``(character offset from 0, sample)`` each."""
    words: list[WordEvent] = []
    if not events:
        return ()
    index = 0
    while (event := events[index]).type != _EVENT_LIST_TERMINATED:
        if event.type == _EVENT_WORD:
            words.append((max(0, event.text_position - 1), max(0, event.sample)))
        index += 1
    return tuple(words)


def _in_original(sink: PcmSink, kept: list[int], length: int) -> PcmSink:
    """``sink``, told character offsets in the original text of the offsets espeak counts in the text it was given
    (``kept``: the original offset of each character given)."""

    def translated(pcm: npt.NDArray[np.int16], words: tuple[WordEvent, ...]) -> bool:
        moved = tuple((kept[char] if char < len(kept) else length, sample) for char, sample in words)
        return sink(pcm, moved)

    return translated


def _load_cdll(path: Path) -> ctypes.CDLL:
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as exc:
        raise EspeakError(f"cannot load {path}: {exc}") from exc
    lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    lib.espeak_Initialize.restype = ctypes.c_int
    lib.espeak_Info.argtypes = [ctypes.c_void_p]
    lib.espeak_Info.restype = ctypes.c_char_p
    lib.espeak_SetSynthCallback.argtypes = [_SynthCallback]
    lib.espeak_SetSynthCallback.restype = None
    lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
    lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
    lib.espeak_Synth.argtypes = [
        ctypes.c_char_p,  # text
        ctypes.c_size_t,  # size in bytes, including the terminating NUL
        ctypes.c_uint,  # position
        ctypes.c_int,  # position type
        ctypes.c_uint,  # end position (0: to the end)
        ctypes.c_uint,  # flags
        ctypes.c_void_p,  # unique identifier (unused)
        ctypes.c_void_p,  # user data (unused)
    ]
    return lib


def _check(status: int, what: str) -> None:
    if status != _EE_OK:
        raise EspeakError(f"espeak-ng refused {what} (error {status})")
