"""The socket session kernel: what every speech WebSocket does the same (``kernel.py``: the accept skeleton, the
session's end and its log line; ``lanes.py``: speaking a segment, its heard clock, its failure, teardown), and the
contract a dialect fills in (``dialect.py``; what the kernel hands its error table is the failure itself, a domain
error or the session's own, ``session_errors.py``, never an API family's error object); what every socket shares
(``serving.py``: credentials and refusals; ``channel.py``, ``budget.py``, ``ending.py``, ``registry.py``,
``segmenter.py``); and the session of text streamed in that ``/v1/audio/speech/stream`` runs (``text_stream.py``, its
events ``stream_events.py`` and the contract of its dialects ``stream_dialect.py``). The dialects (this gateway's in
``gateway/native/``, vLLM-Omni's in ``gateway/vllm_omni/``, OpenAI Realtime in ``gateway/openai/realtime/``,
ElevenLabs' sockets in ``gateway/elevenlabs/``) parse and render."""
