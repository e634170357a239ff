"""How long a ChatTTS engine serves nothing when its only worker dies or hangs: workers forked from a warm template
(``warm_start: true``, ``engines/template.py``) against workers started as fresh interpreters (``false``).

    .venv/bin/python -m bench.warm_workers                 # about 2 minutes, 2 cores
    .venv/bin/python -m bench.warm_workers --rounds 3      # more replacements per way

For each way, a real gateway (``chattts-gateway serve``) with one ChatTTS worker on the project's tiny random-weight
assets (generated into ``--assets`` if missing) and espeak beside it:

- first start: from launching the gateway to the engine ready (its first worker imported and loaded everything);
- killed: SIGKILL of the worker; the time until the pool has dropped it, then until a replacement is ready and a
  request (a new text each time: never from the audio cache) is served by ChatTTS;
- hung: SIGSTOP of the worker; the time until the watchdog has found and killed it (``health_interval_s: 1``: an
  unanswered ping after one idle interval, the kill one interval later), then the same.

Each replacement (from the worker gone to serving again) is also given as a share of the first start: the target is
at most 35 % with warm starts.
Prints a Markdown table and writes every figure to ``bench/results/warm_workers.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from engines.chattts.assets import generate_assets
from harness.gateway_process import GatewayProcess

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["Replacement", "Way", "main", "measure"]

RESULTS = Path(__file__).resolve().parent / "results" / "warm_workers.json"
HEALTH_INTERVAL_S = 1.0
POLL_S = 0.02


@dataclass
class Replacement:
    found_s: float
    """From the signal to the worker gone from the pool (SIGKILL: its pipe closed; SIGSTOP: the watchdog's ping went
    unanswered for one interval, then it was killed)."""
    back_s: float
    """From then to a replacement ready and one request served by ChatTTS: what a warm start shortens."""


@dataclass
class Way:
    warm_start: bool
    first_start_s: float = 0.0
    killed: list[Replacement] = field(default_factory=list)
    hung: list[Replacement] = field(default_factory=list)

    def found_s(self, replacements: list[Replacement]) -> float:
        return statistics.median(r.found_s for r in replacements)

    def back_s(self, replacements: list[Replacement]) -> float:
        return statistics.median(r.back_s for r in replacements)

    def share(self, replacements: list[Replacement]) -> float:
        return self.back_s(replacements) / self.first_start_s


def config(assets: Path, *, warm_start: bool) -> dict[str, Any]:
    options = {"source": "dir", "path": str(assets), "max_new_token": 48, "min_new_token": 48}
    chattts = {"kind": "chattts", "workers": 1, "warm_start": warm_start, "health_interval_s": HEALTH_INTERVAL_S,
               "start_timeout_s": 120, "options": options}  # fmt: skip
    return {"engines": {"chattts": chattts, "espeak": {"kind": "espeak"}}}


def measure(assets: Path, *, warm_start: bool, rounds: int) -> Way:
    way = Way(warm_start)
    with tempfile.TemporaryDirectory(prefix="bench-warm-") as workdir:
        gateway = GatewayProcess(config(assets, warm_start=warm_start), Path(workdir))
        began = time.monotonic()
        gateway.start(timeout_s=180)
        try:
            _wait(gateway, lambda state: state["ready_workers"] == 1)
            way.first_start_s = time.monotonic() - began
            for _ in range(rounds):
                way.killed.append(_replace(gateway, signal.SIGKILL))
                way.hung.append(_replace(gateway, signal.SIGSTOP))
        finally:
            gateway.stop()
    return way


def _replace(gateway: GatewayProcess, how: signal.Signals) -> Replacement:
    before = gateway.engine("chattts")
    victim = before["pids"][0]
    began = time.monotonic()
    os.kill(victim, how)
    try:
        _wait(gateway, lambda state: victim not in state["pids"])
        found = time.monotonic()
        _wait(gateway, lambda state: state["ready_workers"] == 1 and state["restarts"] > before["restarts"])
        _speak(gateway)
        return Replacement(found - began, time.monotonic() - found)
    finally:
        if how == signal.SIGSTOP:
            with contextlib.suppress(ProcessLookupError):  # the watchdog did already; make sure
                os.kill(victim, signal.SIGKILL)


def _wait(gateway: GatewayProcess, condition: Callable[[dict[str, Any]], bool], timeout_s: float = 180.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition(gateway.engine("chattts")):
            return
        time.sleep(POLL_S)
    log = "\n".join(line for line in gateway.log().splitlines() if "/readyz" not in line)
    raise TimeoutError(f"chattts did not get there: {gateway.engine('chattts')}\n{log}")


def _speak(gateway: GatewayProcess) -> None:
    text = f"Back again at {time.time_ns()}."  # never the same: the reply must not come from the audio cache
    body = {"model": "chattts", "voice": "alloy", "input": text, "response_format": "pcm"}
    response = httpx.post(f"{gateway.base_url}/v1/audio/speech", json=body, timeout=60)
    response.raise_for_status()
    if response.headers["x-engine"] != "chattts" or not response.content:
        raise RuntimeError(f"not served by ChatTTS: {response.headers}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--assets", type=Path, default=Path(tempfile.gettempdir()) / "chattts-tiny-bench")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if not (args.assets / "asset").exists():
        generate_assets(args.assets, "tiny", seed=0)
    ways = [measure(args.assets, warm_start=warm, rounds=args.rounds) for warm in (True, False)]
    print(
        "| workers | first start (s) | killed: gone (s) | → serving (s) | share "
        "| hung: found (s) | → serving (s) | share |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for way in ways:
        name = "forked from the template" if way.warm_start else "fresh interpreters"
        cells = [f"{way.first_start_s:.1f}"]
        for replacements in (way.killed, way.hung):
            cells += [
                f"{way.found_s(replacements):.2f}",
                f"{way.back_s(replacements):.2f}",
                f"{way.share(replacements):.0%}",
            ]
        print(f"| {name} | {' | '.join(cells)} |")
    RESULTS.parent.mkdir(exist_ok=True)
    report = {"machine": platform.node(), "cpus": os.cpu_count(), "ways": [asdict(way) for way in ways]}
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
