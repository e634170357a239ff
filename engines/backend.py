"""What the gateway needs from an engine, whatever runs it: a pool of worker processes (``engines.pool``), an
engine in a thread (the in-process tests), or a remote server. The gateway only ever talks to this interface."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence
    from contextlib import AbstractAsyncContextManager

    from engines.base import EngineInfo, SynthesisRequest
    from engines.breaker import BreakerSettings
    from engines.scheduling import TenantShare
    from engines.status import PoolStatus
    from engines.timing import WordMark

__all__ = ["EngineBackend", "PcmStream"]


class PcmStream(Protocol):
    """One synthesis as it arrives: iterate for mono int16 little-endian PCM bytes at :attr:`sample_rate`.

    Iteration raises :class:`~engines.base.InvalidSynthesisRequestError` when the engine rejected the request, and
    :class:`~engines.errors.SynthesisFailedError` when it failed.
    """

    sample_rate: int
    info: EngineInfo

    @property
    def marks(self) -> Sequence[WordMark]:
        """The word marks of the request's text (``engines/timing.py``: exact or estimated, as
        ``info.timestamps`` says), in the order of the words: those whose audio has been iterated, growing as it is;
        all of them once the iteration has ended."""
        ...

    def __aiter__(self) -> AsyncIterator[bytes]: ...


class EngineBackend(Protocol):
    """One engine as the gateway sees it: started and stopped with the app, asked for streams, asked for status."""

    name: str

    @property
    def info(self) -> EngineInfo | None:
        """What the engine last reported about itself; ``None`` until it has loaded."""
        ...

    @property
    def breaker_settings(self) -> BreakerSettings | None:
        """The settings of the engine-wide circuit breaker the gateway keeps for it (``gateway/speech/routing.py``);
        ``None`` for an engine that breaks per upstream endpoint itself (a remote engine)."""
        ...

    async def start(self) -> None:
        """Start loading; returns at once (readiness shows in :meth:`status`)."""
        ...

    async def stop(self) -> None:
        """Stop, cancelling whatever runs."""
        ...

    def status(self) -> PoolStatus:
        """A snapshot for ``/readyz`` and the metrics."""
        ...

    def open_stream(
        self,
        request: SynthesisRequest,
        *,
        tenant: str = "",
        share: TenantShare | None = None,
        continuing: bool = False,
    ) -> AbstractAsyncContextManager[PcmStream]:
        """Run ``request`` for ``tenant``; leaving the block before the end cancels it.

        While the engine is busy it waits with the tenant's ``share`` of it (weight, priority class, cap on waiting
        requests; see ``engines.scheduling``), or the default share when ``None``. ``continuing``: the request is a
        later segment of a stream whose audio is already under way; it waits its turn like any other, but neither the
        queue's bounds nor its timeout refuse it (a stream must not break off because the engine is busy).

        Raises (on enter):
            EngineNotReadyError: nothing can take requests (loading, unavailable).
            EngineOverloadedError: every worker is busy and the wait queue is full, or the wait timed out.
        """
        ...

    async def check_speaker(self, speaker: str) -> None:
        """Refuse a custom voice's speaker (``SynthesisRequest.speaker``: the engine's speaker string, or ``seed:N``)
        that the engine could never speak with, when the voice is made rather than on each use. Judged without loading
        weights (``engines.registry.SPEAKER_CHECKS``); a remote engine asks an engine node, whose engine it is.

        Raises:
            InvalidSynthesisRequestError: ``param`` ``speaker``: malformed for this engine (ChatTTS: not a
                ``spk_emb`` of its weights' size, not finite); ``param`` ``model``: the engine takes no custom voices.
            EngineNotReadyError: a remote engine with no endpoint to ask now.
            SynthesisFailedError: the engine node asked failed or did not answer in time.
        """
        ...

    async def speaker_from_sample(self, pcm: bytes, sample_rate: int, transcript: str) -> str:
        """The engine's speaker string for the voice of a recording (``engines.base.CloningEngine``), to be sent
        later as ``SynthesisRequest.speaker``. Nothing is kept: the caller stores the result.

        It does not wait for a synthesis slot: encoding a sample is one short encoder pass, which the engine runs
        between the steps of the syntheses under way.

        Args:
            pcm: The recording as mono int16 little-endian bytes (the gateway sends 24000 Hz).
            sample_rate: Its sample rate.
            transcript: What is said in it, exactly.

        Raises:
            InvalidSynthesisRequestError: the engine cannot make voices from samples (``EngineInfo.clones_voices``),
                or cannot use this sample or transcript (a 400 naming ``param``).
            EngineNotReadyError: nothing can take the sample (loading, unavailable).
            EngineOverloadedError: too many samples are waiting already.
            SynthesisFailedError: the engine failed, died or did not answer in time.
        """
        ...
