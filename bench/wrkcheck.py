"""A cross-check of the overhead benchmark with ``wrk`` (Debian package), when it is installed.

httpx in one Python process tops out at a few hundred to a few thousand requests per second, which can be below
what the bare route serves; wrk (C, one thread) shows the servers' own limits with the same concurrency.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from bench.loadgen import ProcessTreeCPU
from bench.servers import pinned

__all__ = ["available", "run_wrk"]

_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0}


def available() -> bool:
    return shutil.which("wrk") is not None


def _ms(text: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    if match is None:
        raise ValueError(f"unexpected wrk latency {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


def _script(body: bytes, template: str | None) -> str:
    lines = [
        'wrk.method = "POST"',
        'wrk.headers["Content-Type"] = "application/json"',
        f"wrk.body = [[{body.decode()}]]",
    ]
    if template is not None:  # a unique body per request: "%06d" in the template takes a counter
        lines += ["local counter = 0", f"local template = [[{template}]]", "request = function()",
                  "  counter = counter + 1",
                  "  return wrk.format(nil, nil, nil, string.format(template, counter % 1000000))", "end"]  # fmt: skip
    return "\n".join(lines) + "\n"


def run_wrk(
    url: str,
    body: bytes,
    *,
    concurrency: int,
    duration_s: float,
    cpus: set[int] | None,
    server_pid: int,
    template: str | None = None,
) -> dict[str, Any]:
    """``wrk -t1 -c<concurrency> -d<duration> --latency`` POSTing ``body`` (or ``template % counter``).

    Returns req/s, median and p99 latency, and the server's CPU per request.
    """
    with tempfile.TemporaryDirectory(prefix="bench-wrk-") as tmp:
        script = Path(tmp) / "post.lua"
        script.write_text(_script(body, template))
        command = ["wrk", "-t1", f"-c{concurrency}", f"-d{max(1, round(duration_s))}s", "--latency", "-s",
                   str(script), url]  # fmt: skip
        server = ProcessTreeCPU(server_pid)
        before = server.seconds()
        with pinned(cpus):
            out = subprocess.run(command, capture_output=True, text=True, check=True, timeout=duration_s + 30).stdout
        server_cpu = server.seconds() - before
    requests = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: (.*)", out)
    return {
        "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),  # type: ignore[union-attr]
        "median_ms": _ms(re.search(r"\s50%\s+(\S+)", out).group(1)),  # type: ignore[union-attr]
        "p99_ms": _ms(re.search(r"\s99%\s+(\S+)", out).group(1)),  # type: ignore[union-attr]
        "requests": requests,
        "non_2xx": int(non_2xx.group(1)) if non_2xx else 0,
        "socket_errors": errors.group(1).strip() if errors else "",
        "server_cpu_ms_per_req": server_cpu * 1000 / max(1, requests),
    }
