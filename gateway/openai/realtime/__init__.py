"""OpenAI's Realtime API (GA) as a speech endpoint: ``GET /v1/realtime?model=...``, text in and audio out."""
