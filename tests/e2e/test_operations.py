"""Request ids, structured logs, Prometheus metrics and graceful shutdown, on real gateway processes."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from typing import TYPE_CHECKING, Any

import httpx
import psutil
import pytest

from harness.gateway_process import GatewayProcess
from tests.audio_decode import DURATION_TOLERANCE_S, decode_audio
from tests.waiting import wait_until

if TYPE_CHECKING:
    from pathlib import Path


def log_lines(gateway: GatewayProcess) -> list[dict[str, Any]]:
    lines = []
    for line in gateway.log().splitlines():
        if line.startswith("{"):
            lines.append(json.loads(line))
    return lines


def access_line(gateway: GatewayProcess, request_id: str, timeout_s: float = 5.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in log_lines(gateway):
            if line.get("logger") == "chattts_gateway.access" and line.get("request_id") == request_id:
                return line
        time.sleep(0.05)
    raise AssertionError(f"no access log line for {request_id}")


def test_request_ids_are_echoed_or_made(gateway: GatewayProcess) -> None:
    given = httpx.get(f"{gateway.base_url}/healthz", headers={"x-request-id": "client-42.a:b"})
    assert given.headers["x-request-id"] == "client-42.a:b"
    made = httpx.get(f"{gateway.base_url}/healthz")
    assert len(made.headers["x-request-id"]) == 32
    unsafe = httpx.get(f"{gateway.base_url}/healthz", headers={"x-request-id": "bad id\twith spaces"})
    assert unsafe.headers["x-request-id"] != "bad id\twith spaces"


def test_one_json_line_per_speech_request_without_the_text(gateway: GatewayProcess) -> None:
    secret_text = "the quick secret phrase nobody should log"
    response = httpx.post(
        f"{gateway.base_url}/v1/audio/speech",
        headers={"x-request-id": "log-check-1"},
        json={"model": "synthetic", "input": secret_text, "voice": "nova", "response_format": "wav"},
        timeout=30,
    )
    assert response.status_code == 200
    line = access_line(gateway, "log-check-1")
    assert line["status"] == 200
    assert line["tenant"] == "anonymous"
    assert line["model"] == line["engine"] == "synthetic"
    assert line["format"] == "wav"
    assert line["characters"] == len(secret_text)
    assert line["audio_seconds"] == pytest.approx(len(secret_text) * 0.02, abs=0.01)
    assert 0 <= line["ttfb_ms"] <= line["duration_ms"]
    assert line["cache"] in {"hit", "miss"}
    assert secret_text not in gateway.log()


def test_metrics_cover_requests_engines_and_tenants(gateway: GatewayProcess) -> None:
    httpx.post(
        f"{gateway.base_url}/v1/audio/speech",
        json={"model": "synthetic", "input": "metrics please", "voice": "echo"},
        timeout=30,
    )
    metrics = httpx.get(f"{gateway.base_url}/metrics").text
    for expected in (
        'tts_time_to_first_audio_seconds_count{engine="synthetic"}',
        'tts_synthesis_seconds_count{engine="synthetic"}',
        'tts_real_time_factor_count{engine="synthetic"}',
        'tts_audio_seconds_total{engine="synthetic"}',
        'tts_engine_ready_workers{engine="synthetic"} 2.0',
        'tts_engine_queue_depth{engine="slow"}',
        'tts_engine_busy_workers{engine="espeak"}',
        'tts_engine_worker_restarts_total{engine="synthetic"}',
        'tts_cache_requests_total{result="miss"}',
        'tts_tenant_requests_total{tenant="anonymous"}',
        'tts_tenant_input_characters_total{tenant="anonymous"}',
        "tts_http_requests_total",
        "tts_http_request_duration_seconds_bucket",
    ):
        assert expected in metrics, expected


def test_sigterm_lets_streams_finish_then_stops_the_workers(tmp_path: Path) -> None:
    config = {
        "server": {"shutdown_grace_s": 20},
        "engines": {"slow": {"kind": "synthetic", "workers": 1, "options": {"rtf": 1.0, "seconds_per_char": 0.05}}},
        "aliases": {},
    }
    gateway = GatewayProcess(config, tmp_path).start()
    assert gateway.process is not None
    workers = gateway.engine("slow")["pids"]
    body = {"model": "slow", "input": "x" * 60, "voice": "alloy", "response_format": "wav"}  # 3 s, real time
    received = bytearray()
    signalled = threading.Event()
    with httpx.stream("POST", f"{gateway.base_url}/v1/audio/speech", json=body, timeout=30) as response:
        for chunk in response.iter_raw():
            received += chunk
            if not signalled.is_set():
                gateway.process.send_signal(signal.SIGTERM)
                signalled.set()
                time.sleep(0.3)
                with pytest.raises(httpx.ConnectError):  # no new connections once shutting down
                    httpx.get(f"{gateway.base_url}/healthz", timeout=2)
    assert decode_audio(bytes(received), "wav").duration == pytest.approx(3.0, abs=DURATION_TOLERANCE_S)
    # uvicorn finishes its graceful shutdown, then re-raises SIGTERM so the exit status says why it stopped.
    assert gateway.process.wait(20) in {0, -signal.SIGTERM}
    assert "Finished server process" in gateway.log()
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in workers)


def running(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_sigterm_to_the_whole_process_group_lets_streams_finish(tmp_path: Path) -> None:
    """What systemd's ``KillMode=control-group``, ``timeout`` or a container without an init do: every process of
    the group gets the SIGTERM, the engine workers (forked warm and started cold), their templates and the upload
    decoders too; they leave the stopping to the server, which drains, then ends them."""
    config = {
        "server": {"shutdown_grace_s": 20},
        "engines": {
            "slow": {"kind": "synthetic", "workers": 1, "options": {"rtf": 1.0, "seconds_per_char": 0.05}},
            "cold": {"kind": "synthetic", "workers": 1, "warm_start": False},
        },
        "aliases": {},
    }
    gateway = GatewayProcess(config, tmp_path, own_group=True).start()
    assert gateway.process is not None
    group = gateway.process.pid
    assert os.getpgid(group) == group  # its own group: the signal below reaches none of the test's processes
    server = psutil.Process(group)
    wait_until(lambda: any("gateway.uploads.decoder" in " ".join(c.cmdline()) for c in server.children()), 10.0)
    children = {child: " ".join(child.cmdline()) for child in server.children(recursive=True)}
    body = {"model": "slow", "input": "x" * 60, "voice": "alloy", "response_format": "wav"}  # 3 s, real time
    received = bytearray()
    with httpx.stream("POST", f"{gateway.base_url}/v1/audio/speech", json=body, timeout=30) as response:
        for chunk in response.iter_raw():
            if not received:
                os.killpg(group, signal.SIGTERM)
                time.sleep(0.5)
                assert [command for child, command in children.items() if not running(child)] == []
            received += chunk
    assert decode_audio(bytes(received), "wav").duration == pytest.approx(3.0, abs=DURATION_TOLERANCE_S)
    assert gateway.process.wait(20) in {0, -signal.SIGTERM}
    log = gateway.log()
    assert "Traceback" not in log
    assert "ended: " not in log  # no worker died before the pool stopped it
    assert "worker template failed" not in log
    assert log.count("started the synthetic worker template") == 1  # none started again while shutting down
    wait_until(lambda: not any(running(c) for c in children), 10.0, "the server ending its children")
