"""``/v1/audio/speech/stream``, the realtime WebSocket where text streams in and audio streams out
(``docs/realtime.md``): its first message chooses this gateway's dialect (``gateway/native/``) or vLLM-Omni's
(``gateway/vllm_omni/``); both run the session of ``gateway/sessions/text_stream.py``. OpenAI's Realtime API is
``gateway/openai/realtime/``."""

from gateway.realtime.route import PATH, realtime_speech

__all__ = ["PATH", "realtime_speech"]
