"""Which dialect a socket of ``/v1/audio/speech/stream`` speaks: one session engine, two ways of talking to it.

The first client message decides: vLLM-Omni's ``session.config`` selects :class:`VllmOmniDialect`; anything else
(or nothing yet) is this gateway's own protocol, :class:`NativeDialect` (``docs/realtime.md``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from gateway.http.json_depth import json_depth_exceeds
from gateway.native.dialect import NativeDialect
from gateway.sessions.stream_events import MAX_MESSAGE_DEPTH
from gateway.vllm_omni.dialect import VllmOmniDialect

if TYPE_CHECKING:
    from gateway.sessions.stream_dialect import Dialect

__all__ = ["SpokenDialect", "dialect_for"]


def dialect_for(first_message: str | None, *, max_whole_audio_s: float) -> Dialect:
    """The dialect a socket speaks, from its first text message (``None``: none yet, or a binary one);
    ``max_whole_audio_s`` is ``speech.max_whole_audio_s``, which bounds vLLM-Omni's sentences sent as one file."""
    if first_message is None or json_depth_exceeds(first_message, MAX_MESSAGE_DEPTH):
        return NativeDialect()  # which refuses it as it refuses any such message
    try:
        message = json.loads(first_message)
    except json.JSONDecodeError:
        return NativeDialect()
    if isinstance(message, dict) and message.get("type") == VllmOmniDialect.FIRST_TYPE:
        return VllmOmniDialect(max_whole_audio_s=max_whole_audio_s)
    return NativeDialect()


class SpokenDialect:
    """The dialect of one socket: the native one until its first message has chosen.

    Held apart from the session because a refusal before the session exists (missing credentials) is already said
    in the dialect of the message that lacked them.
    """

    def __init__(self, *, max_whole_audio_s: float) -> None:
        self.current: Dialect = NativeDialect()
        self.chosen = False
        self._max_whole_audio_s = max_whole_audio_s

    def choose(self, first_message: str | None) -> Dialect:
        self.current, self.chosen = dialect_for(first_message, max_whole_audio_s=self._max_whole_audio_s), True
        return self.current

    def error_event(self, failure: BaseException) -> str:
        return self.current.error(failure)
