"""The ``x-ratelimit-reset-*`` headers' durations, written as OpenAI writes them."""

from __future__ import annotations

import pytest

from gateway.http.ratelimit_headers import format_reset


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (0.12, "120ms"),
        (0.0004, "0s"),
        (1, "1s"),
        (1.5, "1.5s"),
        (59.9991, "59.999s"),
        (60, "1m0s"),
        (360, "6m0s"),
        (61.25, "1m1.25s"),
        (3725, "1h2m5s"),
    ],
)
def test_reset_is_formatted_like_openai(seconds: float, text: str) -> None:
    assert format_reset(seconds) == text
