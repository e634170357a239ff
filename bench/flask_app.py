"""The naive baseline: a Flask app holding one global model lock, as many published TTS servers do.

``POST /v1/audio/speech`` takes the lock, sleeps ``BENCH_DELAY_MS`` (the model's work, as the gateway's synthetic
engine does with ``request_delay_ms``) and returns fixed bytes (``BENCH_BODY_FILE``, content type
``BENCH_CONTENT_TYPE``). Run by ``bench/run.py baseline`` under gunicorn with sync workers:
``gunicorn -w P -k sync bench.flask_app:app``. The lock is per process, so within one worker it serializes every
request (with sync workers there is only one at a time anyway; with threads it would serialize them).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from flask import Flask, Response, request

BODY = Path(os.environ.get("BENCH_BODY_FILE", "/dev/null")).read_bytes()
CONTENT_TYPE = os.environ.get("BENCH_CONTENT_TYPE", "audio/pcm")
DELAY_S = float(os.environ.get("BENCH_DELAY_MS", "200")) / 1000
MODEL_LOCK = threading.Lock()


def speech() -> Response:
    request.get_json(force=True)
    with MODEL_LOCK:
        time.sleep(DELAY_S)
        return Response(BODY, mimetype=CONTENT_TYPE)


app = Flask(__name__)
# Not @app.post: flask is a bench extra, absent where mypy runs, and an untyped decorator would untype the view.
app.add_url_rule("/v1/audio/speech", view_func=speech, methods=["POST"])
