"""What goes wrong with an engine, the same for every backend (worker pools, remote engines, the in-process test
double): the gateway maps each to its HTTP answer (``gateway/http/errors.py``) and its retry rule
(``gateway/speech/failover.py``)."""

from __future__ import annotations

__all__ = ["ConsumerTooSlowError", "EngineNotReadyError", "EngineOverloadedError", "SynthesisFailedError"]


class EngineNotReadyError(RuntimeError):
    """No worker of this engine can take requests (still loading, or unavailable)."""

    def __init__(self, engine: str, reason: str) -> None:
        super().__init__(f"engine {engine!r} is not ready: {reason}")
        self.engine = engine


class EngineOverloadedError(RuntimeError):
    """Every worker is busy and the wait queue is full (or the wait timed out)."""

    def __init__(self, engine: str, retry_after_s: int) -> None:
        super().__init__(f"engine {engine!r} is overloaded, retry after {retry_after_s} s")
        self.engine = engine
        self.retry_after_s = retry_after_s


class SynthesisFailedError(RuntimeError):
    """The engine or its worker failed while synthesizing."""


class ConsumerTooSlowError(SynthesisFailedError):
    """The job was dropped: its consumer left more than ``max_buffered_audio_s`` of audio unread."""
