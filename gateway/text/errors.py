"""The one error of reading marked-up text: where it went wrong, and why."""

from __future__ import annotations

__all__ = ["MarkupError"]


class MarkupError(ValueError):
    """The input's markup (SSML, a break tag) cannot be read, or asks for more than the caps allow.

    Args:
        reason: What is wrong, safe to show to the client.
        line: The line (from 1) where it was found.
        column: The column (from 1) where it was found.
    """

    def __init__(self, reason: str, line: int, column: int) -> None:
        super().__init__(f"Invalid SSML at line {line}, column {column}: {reason}")
        self.reason = reason
        self.line = line
        self.column = column
