"""The one resample and time-stretch stage that every encoder feeds its PCM through."""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING, Protocol, cast

import av
import numpy as np
from av.audio.frame import AudioFrame
from av.filter import Graph

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

__all__ = [
    "MAX_TEMPO",
    "MIN_TEMPO",
    "S16Stage",
    "TempoResampler",
    "UnchangedS16",
    "atempo_steps",
    "drain_with_silence",
    "s16_stage",
]

MIN_TEMPO = 0.25
"""Slowest tempo (``speed``) supported: output lasts four times as long as the input."""
MAX_TEMPO = 4.0
"""Fastest tempo (``speed``) supported: output lasts a quarter of the input."""

# Older ffmpeg builds limit one atempo instance to 0.5-2.0, and several moderate steps also sound better
# than one extreme one, so larger changes are split into a chain.
_STEP_MIN = 0.5
_STEP_MAX = 2.0
_SAMPLE_BYTES = 2
_DRAIN_STEP_S = 0.01
_ATEMPO_MARGIN_S = 0.01
# A bound on the silence one drain may add, should the filters ever owe less than they report.
_MAX_DRAIN_S = 1.0


def atempo_steps(tempo: float) -> list[float]:
    """Split ``tempo`` into factors within 0.5-2.0 whose product is ``tempo``.

    Args:
        tempo: Speed factor, from ``MIN_TEMPO`` to ``MAX_TEMPO``.

    Returns:
        The factors, one per ``atempo`` filter; empty for 1.0.

    Raises:
        ValueError: If ``tempo`` lies outside ``MIN_TEMPO``-``MAX_TEMPO``.
    """
    if not MIN_TEMPO <= tempo <= MAX_TEMPO:
        msg = f"tempo must be within {MIN_TEMPO}-{MAX_TEMPO}, got {tempo}"
        raise ValueError(msg)
    steps: list[float] = []
    while tempo > _STEP_MAX:
        steps.append(_STEP_MAX)
        tempo /= _STEP_MAX
    while tempo < _STEP_MIN:
        steps.append(_STEP_MIN)
        tempo /= _STEP_MIN
    if tempo != 1.0:
        steps.append(tempo)
    return steps


class TempoResampler:
    """Turns mono s16le PCM chunks into frames at another rate, tempo, sample format and frame size.

    Built on ffmpeg's filter graph (``atempo`` then ``aresample``), so it streams: frames come out as soon
    as the filters have enough input, and ``flush`` drains what they hold back.
    """

    def __init__(
        self, input_rate: int, output_rate: int, tempo: float = 1.0, sample_format: str = "s16", frame_size: int = 0
    ) -> None:
        """Build the filter graph.

        Args:
            input_rate: Sample rate of the PCM given to ``push``, in Hz.
            output_rate: Sample rate of the frames returned, in Hz.
            tempo: Speed factor; output lasts ``1 / tempo`` as long, at the same pitch.
            sample_format: ffmpeg sample format of the frames returned, such as ``s16`` or ``fltp``.
            frame_size: Samples per frame returned (the last may be shorter); 0 for whatever the filters give.

        Raises:
            ValueError: If a rate is not positive or ``tempo`` is out of range.
        """
        if input_rate <= 0 or output_rate <= 0:
            msg = f"sample rates must be positive, got {input_rate} and {output_rate}"
            raise ValueError(msg)
        self.input_rate = input_rate
        self._time_base = Fraction(1, input_rate)
        self._pushed = 0
        self._emitted = 0
        self._odd_byte = b""
        self.tempo = tempo
        self._graph = _build_graph(input_rate, output_rate, atempo_steps(tempo), sample_format, frame_size)
        self._output_per_input = output_rate / input_rate / tempo
        # atempo's output runs a few milliseconds behind the nominal ratio at the edges.
        self.margin_samples = 0 if tempo == 1.0 else round(output_rate * _ATEMPO_MARGIN_S)

    def push(self, pcm: bytes) -> list[AudioFrame]:
        """Feed PCM and collect the frames that are ready.

        Args:
            pcm: Mono signed 16-bit little-endian samples of any length; an odd trailing byte waits for the
                next call.

        Returns:
            The frames ready now, possibly none.
        """
        data = self._odd_byte + pcm
        whole = len(data) - len(data) % _SAMPLE_BYTES
        self._odd_byte = data[whole:]
        if not whole:
            return []
        samples = np.frombuffer(data, dtype="<i2", count=whole // _SAMPLE_BYTES)
        frame = AudioFrame.from_ndarray(samples.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = self.input_rate
        frame.time_base = self._time_base
        frame.pts = self._pushed
        self._pushed += frame.samples
        self._graph.push(frame)
        return self._pull()

    def pending_samples(self) -> int:
        """Output samples owed for the input pushed so far that the filters still hold back (their latency)."""
        return max(0, round(self._pushed * self._output_per_input) - self._emitted)

    @property
    def pushed_samples(self) -> int:
        """Input samples pushed so far."""
        return self._pushed

    @property
    def emitted_samples(self) -> int:
        """Output samples returned so far."""
        return self._emitted

    def flush(self) -> list[AudioFrame]:
        """End the input and collect every frame still held in the filters.

        Returns:
            The remaining frames. A dangling odd byte is dropped: it is half a sample.
        """
        self._graph.push(None)
        return self._pull()

    def push_s16(self, pcm: bytes) -> bytes:
        """:meth:`push`, the frames returned as s16le bytes (for a ``sample_format="s16"`` stage)."""
        return _s16_bytes(self.push(pcm))

    def flush_s16(self) -> bytes:
        """:meth:`flush`, the frames returned as s16le bytes (for a ``sample_format="s16"`` stage)."""
        return _s16_bytes(self.flush())

    def _pull(self) -> list[AudioFrame]:
        frames: list[AudioFrame] = []
        while True:
            try:
                # An audio-only graph yields only audio frames; the stubs type pull() for video graphs too.
                frame = cast("AudioFrame", self._graph.pull())
            except (av.BlockingIOError, av.EOFError):
                return frames
            frames.append(frame)
            self._emitted += frame.samples


class _DrainableStage(Protocol):
    """What :func:`drain_with_silence` reads of a stage."""

    input_rate: int
    tempo: float
    margin_samples: int

    @property
    def pushed_samples(self) -> int: ...

    @property
    def emitted_samples(self) -> int: ...

    def pending_samples(self) -> int: ...


class S16Stage(_DrainableStage, Protocol):
    """A stage that hands s16le bytes to an encoder that takes raw samples (PCM, WAV, LAME)."""

    def push_s16(self, pcm: bytes) -> bytes: ...

    def flush_s16(self) -> bytes: ...


class UnchangedS16:
    """The stage for s16 output at the engine's own rate and tempo: the samples pass through untouched.

    Building and running an ffmpeg filter graph that changes nothing cost more server CPU than the rest of an
    uncached raw-PCM response.
    """

    def __init__(self, rate: int) -> None:
        self.input_rate = rate
        self.tempo = 1.0
        self.margin_samples = 0
        self._pushed = 0
        self._odd_byte = b""

    def push_s16(self, pcm: bytes) -> bytes:
        """Return the whole samples of ``pcm``; an odd trailing byte waits for the next call."""
        data = self._odd_byte + pcm if self._odd_byte else pcm
        whole = len(data) - len(data) % _SAMPLE_BYTES
        self._odd_byte = data[whole:]
        self._pushed += whole // _SAMPLE_BYTES
        return data if whole == len(data) else data[:whole]

    def flush_s16(self) -> bytes:
        """Nothing is held back (a dangling odd byte is dropped: it is half a sample)."""
        return b""

    def pending_samples(self) -> int:
        return 0

    @property
    def pushed_samples(self) -> int:
        return self._pushed

    @property
    def emitted_samples(self) -> int:
        return self._pushed


def s16_stage(input_rate: int, output_rate: int, tempo: float) -> S16Stage:
    """The cheapest stage that turns s16le PCM at ``input_rate`` into s16le at ``output_rate`` and ``tempo``.

    Raises:
        ValueError: If a rate is not positive or ``tempo`` is out of range.
    """
    if input_rate == output_rate > 0 and tempo == 1.0:
        return UnchangedS16(input_rate)
    return TempoResampler(input_rate, output_rate, tempo)


def _s16_bytes(frames: Iterable[AudioFrame]) -> bytes:
    return b"".join(frame.to_ndarray().tobytes() for frame in frames)


def drain_with_silence(
    stage: _DrainableStage, encode: Callable[[bytes], bytes], held_samples: int
) -> tuple[bytes, float]:
    """Push silence through ``encode`` until everything fed to ``stage`` so far has left the encoder.

    Ending a stream (``flush``) would do that too, but it closes the stream; this keeps it open, so that audio fed
    later continues the same stream, at the cost of a little silence.

    Args:
        stage: The encoder's resampling stage.
        encode: The encoder's ``encode``.
        held_samples: Output samples the codec and container hold back after the stage (their delay).

    Returns:
        The bytes ``encode`` returned on the way, and the seconds of silence added to the stream's audio (all of it
        is heard: what did not come out now comes out before the next audio).
    """
    if not stage.pushed_samples:
        return b"", 0.0  # nothing to complete; silence now would only delay the stream's first sound
    target = stage.emitted_samples + stage.pending_samples() + held_samples + stage.margin_samples
    step = bytes(_SAMPLE_BYTES * round(stage.input_rate * _DRAIN_STEP_S))
    out: list[bytes] = []
    for _ in range(round(_MAX_DRAIN_S / _DRAIN_STEP_S)):
        if stage.emitted_samples >= target:
            break
        out.append(encode(step))
    silence_s = len(out) * len(step) / (_SAMPLE_BYTES * stage.input_rate) / stage.tempo
    return b"".join(out), silence_s


def _build_graph(input_rate: int, output_rate: int, steps: list[float], sample_format: str, frame_size: int) -> Graph:
    graph = Graph()
    # The default spawns a thread pool per graph (one thread per core); audio filters gain nothing from it
    # and a server holds one graph per stream.
    graph.threads = 1
    source = graph.add_abuffer(sample_rate=input_rate, format="s16", layout="mono", time_base=Fraction(1, input_rate))
    tempo = [graph.add("atempo", str(float(step))) for step in steps]
    resample = graph.add("aresample", str(output_rate))
    convert = graph.add("aformat", sample_fmts=sample_format, channel_layouts="mono", sample_rates=str(output_rate))
    graph.link_nodes(source, *tempo, resample, convert, graph.add("abuffersink")).configure()
    if frame_size:
        graph.set_audio_frame_size(frame_size)
    return graph
