"""The realtime speech endpoint: a WebSocket where text streams in and audio streams out (``docs/realtime.md``)."""

from gateway.realtime.route import PATH, realtime_speech

__all__ = ["PATH", "realtime_speech"]
