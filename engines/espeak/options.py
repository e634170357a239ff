"""The espeak engine's options: the ``options`` of a ``kind: espeak`` engine, validated when the settings load."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["EspeakOptions"]


class EspeakOptions(BaseModel):
    """Options of the ``espeak`` engine kind. Unknown keys are rejected."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    chunk_ms: int = Field(default=100, ge=10, le=1000)
    """The longest chunk yielded, in milliseconds. It also sets espeak's output buffer, which the first engine loaded
    in a process fixes for the rest of it."""
