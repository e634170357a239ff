"""The realtime speech endpoints, WebSockets where text streams in and audio streams out (``docs/realtime.md``): our
own ``/v1/audio/speech/stream`` (whose first message chooses this gateway's dialect, ``gateway/native/``, or
vLLM-Omni's, ``gateway/vllm_omni/``) and OpenAI's Realtime API on ``/v1/realtime``."""

from gateway.realtime.openai.route import openai_realtime
from gateway.realtime.route import PATH, realtime_speech

__all__ = ["PATH", "openai_realtime", "realtime_speech"]
