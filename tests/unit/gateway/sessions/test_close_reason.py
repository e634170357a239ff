"""A close frame's reason (``gateway/sessions/serving.py``): at most 123 bytes of UTF-8, cut at a word's end."""

from __future__ import annotations

import pytest

from gateway.sessions.serving import MAX_CLOSE_REASON_BYTES, close_reason

FLOOD = (
    "Your tenant sent more than its budget of messages per second on one connection (the server's echoes of your "
    "messages count too); slow down."
)


def test_a_reason_that_fits_is_sent_whole() -> None:
    assert close_reason("Idle for 30 s.") == "Idle for 30 s."


@pytest.mark.parametrize("reason", [FLOOD, "é" * 200, "x" * 500, "a " * 100])
def test_a_long_reason_is_cut_at_a_words_end_within_the_frame(reason: str) -> None:
    cut = close_reason(reason)
    assert len(cut.encode()) <= MAX_CLOSE_REASON_BYTES
    assert cut.endswith("…")
    assert reason.startswith(cut.removesuffix("…"))
    if " " in reason:
        assert reason[len(cut) - 1] in " ,;:(", cut  # never in the middle of a word
