"""OpenAI's API family: ``POST /v1/audio/speech`` (audio or server-sent events), the organization usage API and the
Realtime API on ``/v1/realtime`` (``realtime/``). Its error table is ``gateway/http/errors.py``."""
