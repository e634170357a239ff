"""The errors of upload handling beside :class:`~gateway.audio.samples.RecordingError` (what an upload is refused
for): the replica cannot take one more upload now.

- :class:`UploadsBusyError`: every decoder is busy past the wait, or the bodies in flight fill their budget (503).
- :class:`TooManyUploadsError`: the tenant has its most uploads in flight (429).
"""

from __future__ import annotations

__all__ = ["TooManyUploadsError", "UploadsBusyError"]


class UploadsBusyError(Exception):
    """The replica takes no more uploads for now; ``retry_after_s`` says when to try again."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class TooManyUploadsError(Exception):
    """A tenant's uploads in flight are at its cap; ``retry_after_s`` says when to try again."""

    def __init__(self, limit: int, retry_after_s: int) -> None:
        super().__init__(f"Your tenant has {limit} uploads in flight, the most it may have at once.")
        self.limit = limit
        self.retry_after_s = retry_after_s
