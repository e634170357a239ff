"""The server process never imports torch (nor ChatTTS and what it brings): engines that need it run in worker
processes (``engines/registry.py`` imports them lazily, there), for ChatTTS's per-token Python loop slows a hundredfold
when it shares the GIL with a busy server. ``tests/e2e/test_chattts.py`` checks the same of a running server."""

from __future__ import annotations

import json
import subprocess
import sys

# What the server must not load; numba and transformers come with ChatTTS.
HEAVY = ["torch", "torchaudio", "transformers", "ChatTTS", "numba"]

# What `chattts-gateway serve` does up to uvicorn.run (gateway/cli/server.py), with the default settings, which name the
# ChatTTS engine among the built-in ones.
SERVE = f"""
import json, sys
from gateway.app import create_app
from gateway.cli import main
from gateway.cli.shutdown import run_draining_realtime
from gateway.http.connection_limits import ConnectionLimits, guarded_http_protocol
from gateway.settings import load_settings

settings = load_settings()
assert "chattts" in settings.engines
create_app(settings)
guarded_http_protocol(ConnectionLimits.from_settings(settings.server))
print(json.dumps([name for name in {HEAVY!r} if name in sys.modules]))
"""


def test_serving_imports_no_torch() -> None:
    done = subprocess.run([sys.executable, "-c", SERVE], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == []
