"""Long inputs as segments, one engine job each: where text may be cut, and the PCM of the segments as one stream.

One set of cutting rules serves the HTTP speech path (:func:`split_text`, whole inputs) and the realtime sessions
(``gateway/sessions/segmenter.py``, text arriving in fragments): a segment ends at a sentence end, else at a clause
break, else at a word break, else at the limit (one long word, or CJK text without punctuation).

A request whose input is longer than ``speech.max_segment_chars`` is spoken as a :class:`SegmentedStream`: the job
of a segment is asked for only once the job before it has ended and given its slot back, so the engine's scheduler
can hand that slot to another tenant's waiting request first; no request holds a slot for longer than one segment.
A script (SSML, a dialogue: ``gateway/text``) is spoken the same way, a segment for each of its spans (each in its
own voice and speed) and PCM zeros for each of its silences (:func:`script_segments`); a script of silences alone
(``<break time="1s"/>`` and nothing else) asks the engine for no job, since there is nothing for it to say.
"""

from __future__ import annotations

import re
from contextlib import AsyncExitStack
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol, TypeAlias

from engines.errors import EngineNotReadyError
from gateway.text import Silence

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator, Sequence
    from contextlib import AbstractAsyncContextManager
    from types import TracebackType

    from engines.backend import EngineBackend, PcmStream
    from engines.base import EngineInfo, SynthesisRequest
    from engines.timing import WordMark

__all__ = [
    "OpenJob",
    "Segment",
    "SegmentedStream",
    "clause_ends",
    "long_cut",
    "script_segments",
    "sentence_ends",
    "speakable",
    "split_text",
]

Segment: TypeAlias = "SynthesisRequest | Silence"
"""A segment of a stream: an engine job, or a silence the gateway makes (in the engine's time)."""
_SILENCE_CHUNK_S = 0.25
"""A silence goes out in pieces of this length, as an engine's audio would."""

# A sentence ends at . ! ? or … (with any closing quotes or brackets) followed by whitespace: only then is it
# known not to be "3.5" or "example.com". CJK full stops end a sentence without a space after them.
_CLOSERS = r"[\"'\u201d\u2019)\]\u300d\u300f]*"  # closing quotes and brackets, Western and CJK
_SENTENCE_END = re.compile(rf"(?:[.!?\u2026]+{_CLOSERS}\s+)|(?:[\u3002\uff01\uff1f]+{_CLOSERS}\s*)|\n+")
_ABBREVIATIONS = frozenset(
    {"mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "vs", "etc", "e.g", "i.e", "no", "fig", "approx"},
)
# Commas, semicolons, colons and dashes; the CJK ones (fullwidth, and the enumeration comma) need no space after.
_CLAUSE_BREAK = re.compile(r"[,;:\u2014\u2013]\s+|[\uff0c\u3001\uff1b\uff1a]\s*")


class OpenJob(Protocol):
    """How a segment's engine job is opened (the speech service's, with the tenant's share of the engine);
    ``continuing``: a later segment of a stream already under way (``EngineBackend.open_stream``)."""

    def __call__(
        self, request: SynthesisRequest, /, *, continuing: bool = False
    ) -> AbstractAsyncContextManager[PcmStream]: ...


def sentence_ends(text: str, max_chars: int) -> Iterator[int]:
    """Where the sentences of ``text`` that end within its first ``max_chars`` characters end, in order: after
    their closing quotes and the whitespace that follows them. A full stop after an abbreviation ("Dr.") or an
    initial ends no sentence."""
    window = text[:max_chars]
    for match in _SENTENCE_END.finditer(window):
        if not _ends_abbreviation(window[: match.start() + 1]):
            yield match.end()


def clause_ends(text: str, max_chars: int) -> Iterator[int]:
    """Where the clauses of ``text`` that end within its first ``max_chars`` characters end (after a comma,
    semicolon, colon or dash and the whitespace after it), in order."""
    for match in _CLAUSE_BREAK.finditer(text[:max_chars]):
        yield match.end()


def long_cut(text: str, max_chars: int) -> int:
    """Where to cut ``text``, longer than ``max_chars`` and without a sentence end within them: after its last clause
    break within the limit, else after its last space, else at the limit."""
    clauses = list(clause_ends(text, max_chars))
    if clauses:
        return clauses[-1]
    space = text[:max_chars].rfind(" ")
    return space + 1 if space > 0 else max_chars


def split_text(text: str, max_chars: int) -> list[str]:
    """``text`` as the segments it is spoken in: each at most ``max_chars`` long, holding as many whole sentences as
    fit, trimmed; between two segments the input had only whitespace, so nothing is lost but the pause at a cut.

    A piece with nothing to say (punctuation, emoji) joins the segment before it, or the one after it when it comes
    first, where the two fit within ``max_chars``; one that does not fit (a long run of emoji or dashes) is a segment
    of its own, which the engine says as it says such a text sent alone. A text that fits is ``[text]`` as it is,
    without looking further.
    """
    if len(text) <= max_chars:
        return [text]
    spans: list[tuple[int, int]] = []
    start = 0
    while len(text) - start > max_chars:
        rest = text[start:]
        cut = max(sentence_ends(rest, max_chars), default=0) or long_cut(rest, max_chars)
        spans.append((start, start + cut))
        start += cut
    spans.append((start, len(text)))
    joined = _join_unspeakable(text, spans, max_chars)
    return [segment for begin, end in joined if (segment := text[begin:end].strip())]


def script_segments(jobs: Sequence[Segment], text: str, max_chars: int) -> tuple[list[Segment], list[int]]:
    """A script's jobs as the segments they are spoken in (a span longer than ``max_chars`` cut as :func:`split_text`
    cuts a text), each with where its text starts in ``text``, the script's text (a silence: where the text before it
    ends)."""
    segments: list[Segment] = []
    offsets: list[int] = []
    searched = 0
    for job in jobs:
        if isinstance(job, Silence):
            segments.append(job)
            offsets.append(searched)
            continue
        for piece in split_text(job.text, max_chars):
            found = text.find(piece, searched)
            offsets.append(max(found, 0))
            searched = found + len(piece) if found >= 0 else searched
            segments.append(replace(job, text=piece))
    return segments, offsets


def speakable(segment: str) -> bool:
    """Whether ``segment`` has anything to say: a letter or a digit."""
    return any(ch.isalnum() for ch in segment)


def _join_unspeakable(text: str, spans: list[tuple[int, int]], max_chars: int) -> list[tuple[int, int]]:
    """``spans`` with each one that has nothing to say joined to its neighbour, where the two fit: alone, it would be
    an engine job saying nothing; joined past ``max_chars``, 60,000 emoji made one segment of 120,902 characters."""
    joined: list[tuple[int, int]] = []
    for begin, end in spans:
        if (
            joined
            and len(text[joined[-1][0] : end].strip()) <= max_chars
            and not (speakable(text[begin:end]) and speakable(text[slice(*joined[-1])]))
        ):
            joined[-1] = (joined[-1][0], end)
        else:
            joined.append((begin, end))
    return joined


def _ends_abbreviation(text: str) -> bool:
    """Whether ``text`` (ending at a full stop) ends with an abbreviation or an initial rather than a sentence."""
    if not text.endswith("."):
        return False
    word = text[:-1].rsplit(None, 1)[-1].lower() if text[:-1].strip() else ""
    return word in _ABBREVIATIONS or (len(word) == 1 and word.isalpha())


class SegmentedStream:
    """The PCM of several segments of one request as one :class:`~engines.backend.PcmStream`: a job each, spoken
    one after the other, each job opened only once the one before it has ended; a :class:`~gateway.text.Silence`
    segment is exact PCM zeros at the engine's rate, no job.

    Enter it to open the first job (the engine's errors on entering a stream are raised then: not ready,
    overloaded); leaving it cancels the job in progress, and no later segment is opened. A later segment that
    cannot start or fails raises from the iteration, as a job failing after its first audio does. Silences alone open
    no job: they are zeros at the rate of ``engine``, the engine the jobs would be asked of.

    Its word marks are each job's, moved to the whole: characters by the segment's place in the request's text,
    samples by the audio of the segments before it (exact: the samples each job made).
    """

    sample_rate: int
    info: EngineInfo
    _first: PcmStream | None

    def __init__(
        self,
        segments: list[Segment],
        open_job: OpenJob,
        char_offsets: list[int] | None = None,
        engine: EngineBackend | None = None,
    ):
        self._segments = segments
        self._open_job = open_job
        self._char_offsets = char_offsets or [0] * len(segments)
        self._engine = engine
        self._job = AsyncExitStack()
        """Holds the job in progress: closed when it ends, before the next is asked for."""
        self._closed = False
        self.marks: list[WordMark] = []

    @classmethod
    def of(cls, request: SynthesisRequest, texts: list[str], open_job: OpenJob) -> SegmentedStream:
        """``request`` spoken as the segments ``texts`` (same voice, speaker, speed, seed and instructions), each a
        piece of ``request.text`` in order (as :func:`split_text` cuts it)."""
        offsets, searched = [], 0
        for text in texts:
            found = request.text.find(text, searched)
            offsets.append(max(found, 0))
            searched = found + len(text) if found >= 0 else searched
        return cls([replace(request, text=text) for text in texts], open_job, offsets)

    async def __aenter__(self) -> SegmentedStream:
        first = next((segment for segment in self._segments if not isinstance(segment, Silence)), None)
        if first is None:  # silences alone: no job (an engine may not be able to say nothing), the engine's rate
            self._first, self.info = None, self._silent_engine()
            self.sample_rate = self.info.sample_rate
            return self
        self._first = await self._job.enter_async_context(self._open_job(first))
        self.sample_rate, self.info = self._first.sample_rate, self._first.info
        return self

    def _silent_engine(self) -> EngineInfo:
        """What the engine of a stream of silences alone says of itself: its rate is theirs.

        Raises:
            EngineNotReadyError: it has not loaded (the failover tries the next engine, as for any request).
        """
        if self._engine is None:
            raise TypeError("a stream of silences alone needs the engine it is spoken for")
        if self._engine.info is None:
            raise EngineNotReadyError(self._engine.name, "it has not loaded")
        return self._engine.info

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._closed = True  # an iteration resumed after this must not open another job
        await self._job.aclose()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        pcm: PcmStream | None = self._first
        samples = 0
        # A silence before the engine's first audio waits for it, and goes with it: until then the stream has sent
        # nothing, so a job failing before its first audio is still retried (gateway/speech/failover.py). Silences
        # alone wait for nothing.
        lead: bytearray | None = bytearray() if pcm is not None else None
        for index, segment in enumerate(self._segments):
            if isinstance(segment, Silence):
                for chunk in self._silence(segment.seconds):
                    samples += len(chunk) // 2
                    if lead is None:
                        yield chunk
                    else:
                        lead += chunk
                continue
            if pcm is None:
                if self._closed:  # the stream was left: no later job is opened
                    return
                pcm = await self._job.enter_async_context(self._open_job(segment, continuing=True))
            told, chars, before = 0, self._char_offsets[index], samples
            async for chunk in pcm:
                told = self._take_marks(pcm, told, chars, before)
                samples += len(chunk) // 2
                if lead is not None:
                    chunk, lead = bytes(lead) + chunk, None  # noqa: PLW2901 - the silence held goes first
                yield chunk
            self._take_marks(pcm, told, chars, before)  # those of the job's end
            # The job has ended: its slot goes back to the engine's scheduler before this request queues again.
            await self._job.aclose()
            pcm = None
        if lead:  # no job made any audio
            yield bytes(lead)

    def _silence(self, seconds: float) -> Iterator[bytes]:
        """``seconds`` of PCM zeros at the engine's rate, in pieces."""
        left = round(seconds * self.sample_rate)
        piece = max(1, round(_SILENCE_CHUNK_S * self.sample_rate))
        while left > 0:
            count = min(left, piece)
            left -= count
            yield bytes(2 * count)

    def _take_marks(self, pcm: PcmStream, told: int, char_offset: int, sample_offset: int) -> int:
        """The job's marks from the ``told``-th on, moved to the whole request; returns how many it has told."""
        marks = pcm.marks
        self.marks.extend(
            replace(m, char_start=m.char_start + char_offset, char_end=m.char_end + char_offset,
                    sample_start=m.sample_start + sample_offset, sample_end=m.sample_end + sample_offset)
            for m in marks[told:]
        )  # fmt: skip
        return len(marks)
