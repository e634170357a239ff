"""The one contract every speech engine implements.

An engine lives inside a worker process (see ``engines.worker``): it is loaded once, warmed up, and then asked to
turn :class:`SynthesisRequest` objects into a stream of PCM chunks. Nothing here knows about HTTP, codecs or
asyncio; the gateway only ever talks to engines through the pool.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypeAlias, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import Callable, Generator, Sequence

    import numpy as np
    import numpy.typing as npt

    from engines.timing import TimestampsKind, WordStarts

__all__ = [
    "MAX_SPEAKER_CHARS",
    "OPENAI_VOICES",
    "BatchItem",
    "BatchingEngine",
    "CancelFlag",
    "CancelToken",
    "CloningEngine",
    "Engine",
    "EngineInfo",
    "EngineUnavailableError",
    "InvalidSynthesisRequestError",
    "JobSource",
    "MarkingEngine",
    "SynthesisRequest",
    "VoiceInfo",
    "cannot_clone_error",
]

MAX_SPEAKER_CHARS = 16384
"""The longest speaker string a custom voice may have: what the API accepts and what the hop to an engine node carries
(``engines/remote/context.py``). An engine that makes speakers from samples keeps them within it."""

#: The built-in voice names of OpenAI's speech API; every engine maps each of them to a distinct voice.
OPENAI_VOICES: tuple[str, ...] = (
    "alloy",
    "ash",
    "ballad",
    "cedar",
    "coral",
    "echo",
    "fable",
    "marin",
    "nova",
    "onyx",
    "sage",
    "shimmer",
    "verse",
)


@dataclass(frozen=True, slots=True)
class SynthesisRequest:
    """What an engine is asked to speak. Validated by the gateway before it reaches an engine."""

    text: str
    """The text to speak, already trimmed and non-empty."""
    voice: str
    """A voice id from the engine's :attr:`EngineInfo.voices`, or a custom voice id when ``speaker`` is set."""
    speed: float = 1.0
    """Speaking rate, already clamped to the engine's :attr:`EngineInfo.speed_range`."""
    instructions: str | None = None
    """Free-form style instructions; engines that cannot use them ignore them."""
    speaker: str | None = None
    """An engine-specific speaker description for custom voices (ChatTTS: a ``spk_emb`` string)."""
    seed: int | None = None
    """Makes sampling engines repeatable when set."""
    control_tokens: bool = False
    """The caller opted in to the engine's control tokens typed in :attr:`text` (ChatTTS: ``[laugh]``,
    ``[uv_break]``, ``[oral_2]``, ``[speed_5]`` …); otherwise they are text like any other."""
    language: str | None = None
    """The language to speak :attr:`text` in, an ISO 639-1 code (``de``, ``pt-br``); ``None``: the voice's own. An
    engine raises :class:`InvalidSynthesisRequestError` (``param`` ``language_code``) for a language it cannot speak."""
    normalize_text: bool = True
    """Read digits, money, dates and abbreviations as words before speaking; ``False``: read the text as written (an
    engine whose reading of digits cannot be turned off, espeak-ng, reads them either way)."""


@dataclass(frozen=True, slots=True)
class VoiceInfo:
    """A voice an engine offers."""

    id: str
    description: str = ""
    labels: tuple[tuple[str, str], ...] = ()
    """What is known of how it sounds, ``(label, value)`` each as ElevenLabs labels its voices (``gender``:
    ``male``/``female``/``neutral``, ``accent``, ``language``: ISO 639-1); a label not known is absent."""


@dataclass(frozen=True, slots=True)
class EngineInfo:
    """What a loaded engine reports about itself; sent from the worker to the server once loaded."""

    name: str
    sample_rate: int
    voices: tuple[VoiceInfo, ...]
    speed_range: tuple[float, float] = (1.0, 1.0)
    """The speeds the engine renders natively; the gateway time-stretches whatever lies outside."""
    max_batch: int = 1
    """How many requests one worker may run at once (dynamic batching)."""
    details: dict[str, str] = field(default_factory=dict)
    """Free-form facts for ``/readyz`` (weights identity, device, ...)."""
    clones_voices: bool = False
    """The engine makes speakers from recordings (:class:`CloningEngine`); the gateway refuses a sample for an engine
    that does not before decoding it."""
    remote: bool = False
    """The engine runs elsewhere (an upstream API, engine nodes): :attr:`max_batch` is not its batch size, which only
    its own servers know."""
    timestamps: TimestampsKind = "estimated"
    """How the word marks of its streams are made (``engines/timing.py``): ``"exact"``, the engine places its words as
    it synthesizes (:class:`MarkingEngine`); ``"estimated"``, from the text and the audio it produced."""

    def offers_voice(self, voice_id: str) -> bool:
        """Whether ``voice_id`` is one of :attr:`voices` (a scan: engines offer a handful, and this runs per
        request)."""
        return any(voice.id == voice_id for voice in self.voices)


class CancelToken(Protocol):
    """Set by the worker when the client went away; long-running engines poll it between steps."""

    def is_set(self) -> bool: ...


class CancelFlag:
    """The :class:`CancelToken` the worker hands to engines: set from another thread, polled by the engine."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def set(self) -> None:
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()


class EngineUnavailableError(RuntimeError):
    """The engine cannot be loaded here (no weights, missing library); the reason is shown in ``/readyz``."""


class InvalidSynthesisRequestError(ValueError):
    """The request is well-formed for the API but this engine cannot honour it (e.g. a malformed speaker).

    Args:
        message: What is wrong, safe to show to the client.
        param: The request field at fault, as OpenAI names it.
    """

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


@runtime_checkable
class Engine(Protocol):
    """A speech engine, driven by one worker process.

    ``load`` and ``synthesize`` run in the worker's main thread, one call at a time unless ``max_batch > 1``.
    """

    def load(self) -> EngineInfo:
        """Load models and report what the engine offers. Raise :class:`EngineUnavailableError` when it cannot."""
        ...

    def synthesize(
        self, request: SynthesisRequest, cancel: CancelToken
    ) -> Generator[npt.NDArray[np.int16], None, None]:
        """Yield mono int16 PCM chunks at ``EngineInfo.sample_rate`` as soon as each is produced.

        A generator, so that the worker can ``close()`` it to stop early. Stop (return) once ``cancel.is_set()``.
        Raise :class:`InvalidSynthesisRequestError` for requests the engine cannot honour; any other exception is
        treated as an engine failure.
        """
        ...


@runtime_checkable
class MarkingEngine(Engine, Protocol):
    """An engine that tells where the words of its text start in its audio (``EngineInfo.timestamps`` ``"exact"``)."""

    def synthesize_marked(
        self, request: SynthesisRequest, cancel: CancelToken
    ) -> Generator[npt.NDArray[np.int16] | WordStarts, None, None]:
        """:meth:`Engine.synthesize`, with a :class:`~engines.timing.WordStarts` before the chunks in which the words
        it names start (samples counted from the start of this synthesis, characters in ``request.text``)."""
        ...


@runtime_checkable
class CloningEngine(Engine, Protocol):
    """An engine that turns a recording of a voice into one of its speakers (``EngineInfo.clones_voices``)."""

    def speaker_from_sample(self, pcm: npt.NDArray[np.int16], sample_rate: int, transcript: str) -> str:
        """The speaker string (:attr:`SynthesisRequest.speaker`) that speaks with the voice of ``pcm``.

        Runs in the worker's main thread between synthesis steps: it must be short (one encoder pass).

        Args:
            pcm: The recording, mono int16 (the gateway sends 24000 Hz).
            sample_rate: Its sample rate.
            transcript: What is said in it, exactly.

        Returns:
            At most :data:`MAX_SPEAKER_CHARS` characters.

        Raises:
            InvalidSynthesisRequestError: a sample or transcript the engine cannot use (``param`` ``audio_sample``
                or ``transcript``).
        """
        ...


def cannot_clone_error(engine: str) -> InvalidSynthesisRequestError:
    """What every backend answers when a sample is sent to an engine that cannot make voices from one."""
    return InvalidSynthesisRequestError(
        f"Model '{engine}' cannot make a voice from an audio sample.", param="audio_sample"
    )


#: What :meth:`BatchingEngine.synthesize_batch` yields: ``(index, item)`` where ``index`` is the request's position in
#: the batch and ``item`` a PCM chunk, ``None`` once that request has ended (finished or cancelled), or the
#: :class:`InvalidSynthesisRequestError` that rejected it (which also ends it).
BatchItem: TypeAlias = "tuple[int, npt.NDArray[np.int16] | InvalidSynthesisRequestError | None]"

#: What a batching worker hands :meth:`BatchingEngine.synthesize_batch` so that requests can join a running batch:
#: called with how many the engine can take in now, it returns at most that many newly arrived ``(request, cancel)``
#: pairs, at once (it never waits), and hands each one over only once. The engine calls it between every two steps of
#: its batch, with 0 when it can take none: the worker answers what else waited for it then (samples to encode).
JobSource: TypeAlias = "Callable[[int], Sequence[tuple[SynthesisRequest, CancelToken]]]"


@runtime_checkable
class BatchingEngine(Engine, Protocol):
    """An engine that can run several requests as one batched computation (``EngineInfo.max_batch > 1``).

    An idle worker collects the jobs that arrive within ``batch_window_ms`` of its first job, up to ``max_batch``,
    and hands them over together; the jobs that arrive while that batch runs are offered to it through a
    :data:`JobSource` (continuous batching), and those the engine does not take wait for the next batch.
    """

    @property
    def batch_window_ms(self) -> float:
        """How long an idle worker waits for more jobs before it starts a batch."""
        ...

    def synthesize_batch(
        self,
        requests: Sequence[SynthesisRequest],
        cancels: Sequence[CancelToken],
        arrivals: JobSource | None = None,
    ) -> Generator[BatchItem, None, None]:
        """Yield every request's chunks, interleaved, each tagged with its index; end each one with ``None``.

        Each request gets exactly its own audio and ends at its own end; a cancelled request ends (``None``) within
        about a second without disturbing the others. An exception other than a per-request
        :class:`InvalidSynthesisRequestError` fails every request of the batch that has not ended.

        The engine may poll ``arrivals`` between steps for requests that join the running batch; those are numbered
        after ``requests``, in the order they were handed over. The generator returns once every request it took
        has ended, and then takes no more.
        """
        ...
