"""The socket session kernel: what every speech WebSocket does the same (``kernel.py``: the accept skeleton, the
session's end and its log line; ``lanes.py``: speaking a segment, its heard clock, its failure, teardown), and the
contract a dialect fills in (``dialect.py``). The dialects (this gateway's and vLLM-Omni's in ``gateway/realtime/``,
OpenAI Realtime in ``gateway/realtime/openai/``, ElevenLabs' sockets in ``gateway/elevenlabs/``) parse and render."""
