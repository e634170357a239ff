"""The bare Litestar route the gateway's overhead is measured against.

``POST /v1/audio/speech`` parses the JSON body and returns fixed bytes (the file named by ``BENCH_BODY_FILE``) with the
content type ``BENCH_CONTENT_TYPE``, status 200. Served by ``bench/run.py overhead`` under the gateway's uvicorn
settings: ``uvicorn bench.bare_app:app --loop uvloop --http httptools --no-access-log`` (one process).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from litestar import Litestar, Response, post

BODY = Path(os.environ.get("BENCH_BODY_FILE", "/dev/null")).read_bytes()
CONTENT_TYPE = os.environ.get("BENCH_CONTENT_TYPE", "audio/pcm")


@post("/v1/audio/speech", status_code=200)
async def speech(data: dict[str, Any]) -> Response[bytes]:
    return Response(BODY, media_type=CONTENT_TYPE)


app = Litestar([speech])
