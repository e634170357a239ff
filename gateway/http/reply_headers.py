"""The headers every speech reply carries over HTTP, whichever API family's route sends it (OpenAI's
``gateway/openai/speech.py``, ElevenLabs' ``gateway/elevenlabs/speech.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.http.ratelimit_headers import rate_limit_headers

if TYPE_CHECKING:
    from gateway.speech.reply import SpeechReply

__all__ = ["reply_headers"]


def reply_headers(reply: SpeechReply) -> dict[str, str]:
    """``x-engine`` (who spoke), ``x-cache``, ``x-retries`` (tries repeated before the first audio) and OpenAI's
    ``x-ratelimit-*`` headers."""
    headers = {
        "x-engine": reply.engine,
        "x-cache": "hit" if reply.cache_hit else "miss",
        "x-retries": str(reply.retries),
    }
    if reply.limits is not None:
        headers.update(rate_limit_headers(reply.limits))
    return headers
