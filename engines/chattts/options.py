"""The ChatTTS engine's options: the ``options`` mapping of its engine settings, validated once at start."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Literal, get_args

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["ChatTTSOptions"]

Source = Literal["hub", "dir"]
Device = Literal["auto", "cpu", "cuda"]


@dataclass(frozen=True, slots=True)
class ChatTTSOptions:
    """Options of the ``chattts`` engine kind. Unknown keys are rejected."""

    source: Source = "hub"
    """``hub``: the 2Noise/ChatTTS snapshot in ``cache_dir``, downloaded on first start when the hub is reachable;
    ``dir``: a directory the user provides (``path``), holding ``asset/``."""
    path: str | None = None
    """The model directory for ``source: dir``."""
    cache_dir: str = "~/.cache/tts-gateway/huggingface"
    """Where hub snapshots are kept (``models--2Noise--ChatTTS/snapshots/<rev>``); existing ones load offline."""
    download: bool = True
    """Allow downloading the hub snapshot when none is cached."""
    hub_timeout_s: float = 3.0
    """How long the reachability probe of the hub may take before the engine reports itself unavailable."""
    device: Device = "auto"
    """``auto``: CUDA when available, else CPU."""
    half: bool | None = None
    """Run the GPT backbone in float16; default: on CUDA only."""
    threads: int | None = None
    """torch CPU threads per worker (default: torch's choice)."""
    temperature: float = 0.3
    top_P: float = 0.7  # noqa: N815 - ChatTTS's name
    top_K: int = 20  # noqa: N815 - ChatTTS's name
    repetition_penalty: float = 1.05
    max_new_token: int = 2048
    """Most audio tokens per sentence segment (one token is about 21 ms of audio)."""
    min_new_token: int = 0
    """Fewest audio tokens per segment (equal to ``max_new_token`` gives exact lengths: benchmarks, tests)."""
    refine_text: bool = False
    """Run ChatTTS's text-refinement pass before speaking (adds latency); also runs when the instructions carry
    ``[oral_N]``, ``[laugh_N]`` or ``[break_N]``."""
    refine_max_new_token: int = 384
    max_batch: int = 4
    """Requests one worker generates together (dynamic batching)."""
    batch_window_ms: float = 10.0
    """How long an idle worker waits for more requests before it starts a batch."""
    seed: int | None = None
    """Sampling seed for requests that carry none (default: random per request)."""
    max_segment_chars: int = 200
    """Long input is spoken sentence by sentence; longer sentences are split at this many characters."""
    stream_first_tokens: int = 24
    """Tokens generated before the first audio chunk leaves."""
    stream_chunk_tokens: int = 24
    """Tokens per later chunk."""
    stream_left_context: int = 40
    """Tokens of already-spoken context decoded again with each chunk (the decoder's receptive field)."""

    @classmethod
    def parse(cls, options: Mapping[str, Any] | None) -> ChatTTSOptions:
        """Build from a mapping, rejecting unknown keys and out-of-range values with ``ValueError``."""
        values = dict(options or {})
        known = {f.name for f in fields(cls)}
        if unknown := sorted(set(values) - known):
            raise ValueError(f"unknown chattts engine options: {unknown}; known: {sorted(known)}")
        parsed = cls(**values)
        parsed._check()
        return parsed

    def _check(self) -> None:
        problems = [
            *([] if self.source in get_args(Source) else [f"source must be one of {get_args(Source)}"]),
            *([] if self.device in get_args(Device) else [f"device must be one of {get_args(Device)}"]),
            *([] if self.temperature > 0 else ["temperature must be > 0"]),
            *([] if 0 < self.top_P <= 1 else ["top_P must be in (0, 1]"]),
            *([] if self.top_K >= 1 else ["top_K must be >= 1"]),
            *([] if 1 <= self.max_new_token <= 4096 else ["max_new_token must be in 1..4096"]),
            *([] if 0 <= self.min_new_token <= self.max_new_token else ["min_new_token must be in 0..max_new_token"]),
            *([] if 1 <= self.max_batch <= 64 else ["max_batch must be in 1..64"]),
            *([] if self.batch_window_ms >= 0 else ["batch_window_ms must be >= 0"]),
            *([] if self.max_segment_chars >= 20 else ["max_segment_chars must be >= 20"]),
            *([] if self.stream_first_tokens >= 8 else ["stream_first_tokens must be >= 8"]),
            *([] if self.stream_chunk_tokens >= 8 else ["stream_chunk_tokens must be >= 8"]),
            *([] if self.stream_left_context >= 0 else ["stream_left_context must be >= 0"]),
            *([] if self.hub_timeout_s > 0 else ["hub_timeout_s must be > 0"]),
        ]
        if problems:
            raise ValueError(f"invalid chattts engine options: {'; '.join(problems)}")
