"""Where the words of a synthesis fall in its audio: word marks, from the engine where it can tell, else estimated.

Every backend's :class:`~engines.backend.PcmStream` carries, beside its PCM, the :class:`WordMark` of each word of the
text it speaks: its characters in the request's text and its samples in the job's audio. An engine that knows where
its words start (espeak-ng reports a word event as it synthesizes: :class:`~engines.base.MarkingEngine`) yields
:class:`WordStarts` between its chunks, and those starts are used as they are (``EngineInfo.timestamps``
``"exact"``). For the words it does not place, and for every word of an engine that cannot tell (``"estimated"``),
the start is estimated: the voiced audio (its first to its last loud 10 ms frame, known exactly from the samples the
engine made) is shared among the words by their expected syllables and the pauses their punctuation asks for, and each
estimated boundary is then moved to the quietest point near it. A word ends where its audio falls quiet before the
next word starts, or where the next word starts.

:class:`JobTiming` follows one job: it is fed the chunks and the engine's starts, hands out the marks that are settled
as the audio goes (a word is settled once the next word's start is known and its audio has come) and the rest at the
end. The worker process runs it next to the engine (``engines/worker.py``), the remote engine on the PCM it receives.

Written here: no maintained library aligns text to audio without an acoustic model (forced aligners need one per
language), and the estimate only has to be cheap, monotonic and within the audio.
"""

from __future__ import annotations

import bisect
import itertools
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal, TypeAlias

import numpy as np

from engines.base import MarkingEngine

if TYPE_CHECKING:
    from collections.abc import Generator

    import numpy.typing as npt

    from engines.base import CancelToken, Engine, SynthesisRequest

__all__ = [
    "Envelope",
    "JobTiming",
    "MarkedSynthesis",
    "TimestampsKind",
    "WordMark",
    "WordStarts",
    "syllables",
    "word_spans",
]

TimestampsKind: TypeAlias = Literal["exact", "estimated"]
"""How an engine's word marks are made (``EngineInfo.timestamps``): reported by the engine as it synthesizes, or
estimated from the text and the audio it produced."""

_CJK: Final = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_LETTER: Final = rf"(?:[^\W_{_CJK}][\u0300-\u036f]*)"  # a letter or digit with its combining accents
_WORD: Final = re.compile(rf"[{_CJK}]|{_LETTER}+(?:['\u2019\-]{_LETTER}+|[.,]\d+)*")
_VOWELS: Final = re.compile(r"[aeiouyàáâãäåæèéêëìíîïòóôõöøùúûüýÿœ]+", re.IGNORECASE)
_SENTENCE_END: Final = re.compile(r"[.!?\u2026\u3002\uff01\uff1f]|\n")
_CLAUSE_BREAK: Final = re.compile(r"[,;:\u2014\u2013\uff0c\u3001\uff1b\uff1a]")
_SENTENCE_PAUSE: Final = 2.0
"""A pause after a sentence, in syllables."""
_CLAUSE_PAUSE: Final = 1.0
_SNAP_S: Final = 0.15
"""How far an estimated boundary may move towards a quieter point."""
_PAUSE_SNAP_S: Final = 0.4
"""How far it may move to a pause where punctuation asks for one."""
_DIP: Final = 0.5
"""A point counts as quieter when its loudness is under this share of the estimate's."""
_QUIET_SHARE: Final = 0.05
"""A frame under this share of the job's loud frames (their 90th percentile) is quiet."""
_QUIET_FLOOR: Final = 100.0
"""...and so is any frame under this RMS (of 32767): -50 dBFS."""


def word_spans(text: str) -> list[tuple[int, int]]:
    """The words of ``text`` as ``(start, end)`` character offsets, in order.

    A word is a run of letters and digits (with their combining accents), joined by an apostrophe or a hyphen
    between two of them ("don't", "e-mail"), or by a full stop or comma before digits ("3.5", "1,000"); each CJK
    ideograph, kana or hangul syllable is a word of its own. Spaces and punctuation lie between words.
    """
    return [match.span() for match in _WORD.finditer(text)]


def syllables(word: str) -> float:
    """How long ``word`` is expected to take to say, in syllables: its vowel groups (at least one), about one and a
    third per digit (numbers are read out as words), one per CJK character, and a third of the length for a script
    without Latin vowels."""
    digits = sum(ch.isdigit() for ch in word)
    letters = "".join(ch for ch in word if ch.isalpha())
    if len(word) == 1 and re.match(rf"[{_CJK}]", word):
        return 1.0
    vowels = len(_VOWELS.findall(letters))
    spoken = float(vowels) if vowels else len(letters) / 3
    return max(1.0, spoken + 1.3 * digits)


def _pause(between: str) -> float:
    """The pause the characters between two words ask for, in syllables."""
    if _SENTENCE_END.search(between):
        return _SENTENCE_PAUSE
    return _CLAUSE_PAUSE if _CLAUSE_BREAK.search(between) else 0.0


@dataclass(frozen=True, slots=True)
class WordStarts:
    """What an engine that places its words (:class:`~engines.base.MarkingEngine`) yields between its chunks:
    ``(character offset in the request's text, sample offset from the start of the job's audio)`` for each word
    whose audio starts in the chunks that follow. Offsets may fall anywhere in a word (or just before it); the first
    start reported for a word counts."""

    starts: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class WordMark:
    """One word of a job's text and its audio: characters ``[char_start, char_end)`` of the request's text, samples
    ``[sample_start, sample_end)`` of the job's audio at the engine's rate."""

    char_start: int
    char_end: int
    sample_start: int
    sample_end: int


class Envelope:
    """The loudness of audio as it arrives: the RMS of each 10 ms frame."""

    def __init__(self, sample_rate: int) -> None:
        self.frame = max(1, sample_rate // 100)
        self.rms: list[float] = []
        self.samples = 0
        self._rest: npt.NDArray[np.int16] = np.empty(0, dtype=np.int16)

    def add(self, pcm: npt.NDArray[np.int16]) -> None:
        self.samples += pcm.size
        data = np.concatenate([self._rest, pcm]) if self._rest.size else pcm
        whole = data.size - data.size % self.frame
        if whole:
            frames = data[:whole].astype(np.float32).reshape(-1, self.frame)
            self.rms.extend(np.sqrt(np.mean(frames * frames, axis=1)).tolist())
        self._rest = data[whole:].copy()

    def finish(self) -> None:
        """The audio ended: its last, shorter frame counts too."""
        if self._rest.size:
            rest = self._rest.astype(np.float32)
            self.rms.append(float(np.sqrt(np.mean(rest * rest))))
            self._rest = np.empty(0, dtype=np.int16)

    def quiet_below(self) -> float:
        """The loudness under which a frame counts as quiet: a twentieth of the loud frames', or -50 dBFS."""
        if not self.rms:
            return _QUIET_FLOOR
        return max(_QUIET_FLOOR, _QUIET_SHARE * float(np.percentile(self.rms, 90)))

    def voiced(self, threshold: float) -> tuple[int, int] | None:
        """The samples from the first loud frame's start to the last loud frame's end; ``None`` when all is quiet."""
        loud = [index for index, rms in enumerate(self.rms) if rms >= threshold]
        if not loud:
            return None
        return loud[0] * self.frame, min(self.samples, (loud[-1] + 1) * self.frame)


class JobTiming:
    """The word marks of one job as its audio comes: feed it the engine's :class:`WordStarts` and chunks, take the
    marks settled so far with :meth:`settled`, and the rest with :meth:`finish` once the audio has ended.

    Marks come out in the order of the words, each once; their samples never go back, and every mark lies within
    the audio fed.
    """

    def __init__(self, text: str, sample_rate: int) -> None:
        self._spans = word_spans(text)
        self._ends = [end for _, end in self._spans]
        self._weights = [syllables(text[start:end]) for start, end in self._spans]
        between = zip(self._spans, self._spans[1:], strict=False)
        self._pauses = [_pause(text[left[1] : right[0]]) for left, right in between]
        self._starts: dict[int, int] = {}
        self._last_known = -1
        self._envelope = Envelope(sample_rate)
        self._settled = 0
        self._last_end = 0

    @property
    def words(self) -> int:
        return len(self._spans)

    def add_starts(self, starts: WordStarts) -> None:
        """The engine placed these words; a start for a word at or before one already placed is ignored."""
        for char, sample in starts.starts:
            word = bisect.bisect_right(self._ends, char)  # the word holding ``char``, or the next one
            if word >= len(self._spans) or word <= self._last_known:
                continue
            floor = self._starts[self._last_known] if self._last_known >= 0 else 0
            self._starts[word] = max(sample, floor)
            self._last_known = word

    def add_audio(self, pcm: npt.NDArray[np.int16]) -> None:
        self._envelope.add(pcm)

    def settled(self) -> tuple[WordMark, ...]:
        """The marks settled since the last call: the words before the last placed word whose audio has come."""
        fed = self._envelope.samples
        known = [word for word, sample in self._starts.items() if word > self._settled and sample <= fed]
        if not known:
            return ()
        last = max(known)
        return self._settle(last, self._starts[last])

    def finish(self) -> tuple[WordMark, ...]:
        """The audio has ended: the marks of every word not handed out yet."""
        envelope = self._envelope
        envelope.finish()
        voiced = envelope.voiced(envelope.quiet_below())
        end = voiced[1] if voiced is not None else envelope.samples
        if self._last_known >= self._settled:  # a placed word at the end of the audio keeps its place
            end = max(end, min(envelope.samples, self._starts[self._last_known] + envelope.frame))
        return self._settle(len(self._spans), min(end, envelope.samples))

    # ----------------------------------------------------------------- estimation
    def _settle(self, upto: int, boundary: int) -> tuple[WordMark, ...]:
        """Marks for the words from the first unsettled one to ``upto`` (excluded), whose audio ends by ``boundary``
        (the start of word ``upto``, or the end of the voiced audio)."""
        first = self._settled
        if first >= upto:
            return ()
        boundary = max(boundary, self._last_end)  # words settled before keep their place: nothing goes back
        threshold = self._envelope.quiet_below()
        starts = self._estimate_starts(first, upto, boundary, threshold)
        marks = []
        for word in range(first, upto):
            # An engine may place a word past the audio it then produced (its last word silent, or cut): no mark
            # outlasts the audio.
            start = min(starts[word - first], boundary)
            following = min(starts[word - first + 1], boundary) if word + 1 < upto else boundary
            end = self._word_end(start, following, threshold)
            char_start, char_end = self._spans[word]
            marks.append(WordMark(char_start, char_end, start, end))
        self._settled, self._last_end = upto, marks[-1].sample_end
        return tuple(marks)

    def _estimate_starts(self, first: int, upto: int, boundary: int, threshold: float) -> list[int]:
        """The starts of words ``first`` to ``upto - 1``: placed ones as placed, the others shared out between the
        placed ones (and the voiced audio's ends) by weight, then moved to the quietest point near them."""
        placed = [(word, self._starts[word]) for word in range(first + 1, upto) if word in self._starts]
        left = self._starts.get(first)
        if left is None:
            voiced = self._envelope.voiced(threshold) if first == 0 else None
            left = voiced[0] if voiced is not None else self._last_end
            # Not after the next word the engine placed (it may place a word in what sounds like silence).
            left = min(left, boundary, *(sample for _, sample in placed[:1]))
        anchors = [(first, left), *placed, (upto, boundary)]
        starts: list[int] = []
        for (a, sample_a), (b, sample_b) in itertools.pairwise(anchors):
            starts.append(sample_a)
            starts += self._share(a, b, sample_a, max(sample_a, sample_b), threshold)
        return starts

    def _share(self, a: int, b: int, start: int, stop: int, threshold: float) -> list[int]:
        """Estimated starts of words ``a + 1`` to ``b - 1``, given word ``a`` starts at ``start`` and what follows
        word ``b - 1`` (word ``b``'s start, or the end of the voice) at ``stop``: one at a time, each shared out by
        weight from the one before it as moved, then moved to the quietest point near it."""
        steps = [self._weights[word] + (self._pauses[word] if word + 1 < len(self._spans) else 0.0)
                 for word in range(a, b)]  # fmt: skip
        if b == len(self._spans):  # nothing follows the last word: no pause after it
            steps[-1] = self._weights[b - 1]
        starts: list[int] = []
        cursor, at = a, start
        for word in range(a + 1, b):
            left = sum(steps[cursor - a :])
            estimate = at + round((stop - at) * sum(steps[cursor - a : word - a]) / left)
            following = at + round((stop - at) * sum(steps[cursor - a : word - a + 1]) / left) if word + 1 < b else stop
            moved = self._snap(estimate, at, following, threshold, pause=self._pauses[word - 1] > 0)
            starts.append(moved)
            cursor, at = word, moved
        return starts

    def _snap(self, estimate: int, low: int, high: int, threshold: float, *, pause: bool) -> int:
        """``estimate`` moved to the quietest frame within reach between ``low`` and ``high``: to the end of a pause
        (where the next word starts) when it is quiet, to a dip in loudness otherwise; kept when there is neither.
        Where punctuation asks for a pause (``pause``), one is looked for further away."""
        envelope, frame = self._envelope, self._envelope.frame
        rms = envelope.rms
        centre = estimate // frame
        reach = round((_PAUSE_SNAP_S if pause else _SNAP_S) * 100)
        end = min(high // frame, len(rms))  # frames before ``high``
        first, last = max(low // frame + 1, centre - reach), min(end - 1, centre + reach)
        if first > last or centre >= len(rms):
            return estimate
        if pause:
            quiet = [f for f in range(first, last + 1) if rms[f] < threshold]
            quietest = min(quiet, key=lambda f: abs(f - centre)) if quiet else None
        else:
            quietest = min(range(first, last + 1), key=lambda f: (rms[f], abs(f - centre)))
        if quietest is None:
            return estimate
        if rms[quietest] < threshold:  # a pause: the word starts where it ends (if before ``high``)
            while quietest + 1 < end and rms[quietest + 1] < threshold:
                quietest += 1
            return min(max(low, (quietest + 1) * frame), high)
        if rms[quietest] < _DIP * rms[centre]:
            return min(max(low, quietest * frame), high)
        return estimate

    def _word_end(self, start: int, following: int, threshold: float) -> int:
        """Where a word starting at ``start`` ends when the next starts at ``following``: after its last loud frame
        before ``following``."""
        envelope, frame = self._envelope, self._envelope.frame
        rms = envelope.rms
        last = min(following // frame, len(rms)) - 1
        while last > start // frame and rms[last] < threshold:
            last -= 1
        return max(start, min(following, (last + 1) * frame, envelope.samples))


class MarkedSynthesis:
    """One request spoken by an engine, as PCM chunks each with the word marks settled by the time it came
    (:meth:`chunks`), and the marks of the other words once the audio has ended (:meth:`finish`): what the worker
    process sends the server, and what the in-process test backend hands on."""

    def __init__(self, engine: Engine, request: SynthesisRequest, cancel: CancelToken, sample_rate: int) -> None:
        self._engine = engine
        self._request = request
        self._cancel = cancel
        self._timing = JobTiming(request.text, sample_rate)

    def chunks(self) -> Generator[tuple[npt.NDArray[np.int16], tuple[WordMark, ...]], None, None]:
        """The engine's chunks (empty ones where only marks settled); closing it closes the engine's generator.

        Raises:
            InvalidSynthesisRequestError: the engine refused the request; anything else: the engine failed.
        """
        engine, request, cancel = self._engine, self._request, self._cancel
        items: Generator[npt.NDArray[np.int16] | WordStarts, None, None]
        if isinstance(engine, MarkingEngine):
            items = engine.synthesize_marked(request, cancel)
        else:
            items = engine.synthesize(request, cancel)
        try:
            for item in items:
                if isinstance(item, WordStarts):
                    self._timing.add_starts(item)
                    continue
                self._timing.add_audio(item)
                yield item, self._timing.settled()
        finally:
            items.close()

    def finish(self) -> tuple[WordMark, ...]:
        """The marks not handed out with a chunk, once the chunks have ended."""
        return self._timing.finish()
