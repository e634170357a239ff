"""``chattts-gateway say`` against httpx's MockTransport: the request it sends, where the audio goes, how it fails."""

from __future__ import annotations

import functools
import io
import json
from typing import TYPE_CHECKING

import httpx
import pytest

from gateway import cli
from gateway.cli import say as say_cli

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

AUDIO = b"ID3" + bytes(range(256)) * 8


@pytest.fixture
def requests(monkeypatch: pytest.MonkeyPatch) -> Callable[[httpx.Response], list[httpx.Request]]:
    """Route ``say``'s httpx client to a MockTransport answering ``response``; returns the requests it saw."""

    def install(response: httpx.Response) -> list[httpx.Request]:
        seen: list[httpx.Request] = []

        def handler(request: httpx.Request) -> httpx.Response:
            seen.append(request)
            return response

        monkeypatch.setattr(httpx, "Client", functools.partial(httpx.Client, transport=httpx.MockTransport(handler)))
        return seen

    for name in (
        "OPENAI_API_KEY",
        *(p + n for p in ("CHATTTS_GATEWAY_", "TTS_GATEWAY_") for n in ("API_KEY", "BASE_URL")),
    ):
        monkeypatch.delenv(name, raising=False)
    return install


def test_sends_openais_speech_request_and_writes_the_audio(
    requests: Callable[[httpx.Response], list[httpx.Request]],
    tmp_path: Path,
) -> None:
    seen = requests(httpx.Response(200, content=AUDIO))
    status = cli.main(
        [
            "say",
            "Hi there.",
            "--voice",
            "onyx",
            "--speed",
            "1.5",
            "--instructions",
            "calmly",
            "--base-url",
            "http://gw:9000/v1/",
            "-o",
            str(tmp_path / "out.flac"),
        ]
    )
    assert status == 0
    assert (tmp_path / "out.flac").read_bytes() == AUDIO
    [request] = seen
    assert str(request.url) == "http://gw:9000/v1/audio/speech"
    assert "authorization" not in request.headers
    assert json.loads(request.content) == {
        "model": "tts-1",
        "input": "Hi there.",
        "voice": "onyx",
        "response_format": "flac",
        "speed": 1.5,
        "instructions": "calmly",
    }


@pytest.mark.parametrize(
    ("argument", "environment", "expected"),
    [
        (["--api-key", "sk-flag"], {"CHATTTS_GATEWAY_API_KEY": "sk-gw", "OPENAI_API_KEY": "sk-oa"}, "Bearer sk-flag"),
        ([], {"CHATTTS_GATEWAY_API_KEY": "sk-gw", "OPENAI_API_KEY": "sk-oa"}, "Bearer sk-gw"),
        ([], {"OPENAI_API_KEY": "sk-oa"}, "Bearer sk-oa"),
        # the former prefix still works, beneath the new one
        ([], {"TTS_GATEWAY_API_KEY": "sk-old", "OPENAI_API_KEY": "sk-oa"}, "Bearer sk-old"),
        ([], {"CHATTTS_GATEWAY_API_KEY": "sk-gw", "TTS_GATEWAY_API_KEY": "sk-old"}, "Bearer sk-gw"),
    ],
)
def test_api_key_comes_from_the_flag_then_the_environment(
    requests: Callable[[httpx.Response], list[httpx.Request]],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    *,
    argument: list[str],
    environment: dict[str, str],
    expected: str,
) -> None:
    seen = requests(httpx.Response(200, content=AUDIO))
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert cli.main(["say", "Hi.", "-o", str(tmp_path / "out.mp3"), *argument]) == 0
    assert seen[0].headers["authorization"] == expected


def test_writes_to_standard_output_with_dash(
    requests: Callable[[httpx.Response], list[httpx.Request]],
    capsysbinary: pytest.CaptureFixture[bytes],
) -> None:
    seen = requests(httpx.Response(200, content=AUDIO))
    assert cli.main(["say", "Hi.", "--format", "pcm", "-o", "-"]) == 0
    assert capsysbinary.readouterr().out == AUDIO
    assert json.loads(seen[0].content)["response_format"] == "pcm"


def test_http_error_prints_openais_message(
    requests: Callable[[httpx.Response], list[httpx.Request]],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    body = {"error": {"message": "Too many requests.", "type": "rate_limit_error", "param": None, "code": None}}
    requests(httpx.Response(429, json=body))
    assert cli.main(["say", "Hi.", "-o", str(tmp_path / "out.mp3")]) == 1
    assert capsys.readouterr().err == "chattts-gateway: 429 Too many requests.\n"
    assert not (tmp_path / "out.mp3").exists()


class _TruncatedStream(httpx.SyncByteStream):
    def __iter__(self) -> Iterator[bytes]:
        yield AUDIO
        raise httpx.RemoteProtocolError("peer closed connection without sending complete message body")


def test_a_truncated_transfer_fails_and_leaves_no_file(
    requests: Callable[[httpx.Response], list[httpx.Request]],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    requests(httpx.Response(200, stream=_TruncatedStream()))
    assert cli.main(["say", "Hi.", "-o", str(tmp_path / "out.mp3")]) == 1
    assert "peer closed connection" in capsys.readouterr().err
    assert not (tmp_path / "out.mp3").exists()


def fake_player(directory: Path, name: str) -> Path:
    """An executable ``name`` that records its arguments, one per line."""
    record = directory / f"{name}.args"
    script = directory / name
    script.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > "{record}"\n')
    script.chmod(0o755)
    return record


@pytest.mark.parametrize(
    ("response_format", "players", "expected"),
    [
        ("mp3", ["ffplay", "mpv", "aplay"], ["ffplay", "-nodisp", "-autoexit", "-loglevel", "error"]),
        ("mp3", ["mpv", "aplay"], ["mpv", "--no-video", "--really-quiet"]),
        ("wav", ["aplay"], ["aplay", "-q"]),
        ("pcm", ["aplay"], ["aplay", "-q", "-t", "raw", "-f", "S16_LE", "-r", "24000", "-c", "1"]),
        ("ulaw", ["aplay"], ["aplay", "-q", "-t", "raw", "-f", "MU_LAW", "-r", "8000", "-c", "1"]),
        (
            "pcma",
            ["ffplay"],
            ["ffplay", "-nodisp", "-autoexit", "-loglevel", "error", "-f", "alaw", "-ar", "8000", "-ch_layout", "mono"],
        ),
        (
            "alaw",
            ["mpv"],
            [
                "mpv",
                "--no-video",
                "--really-quiet",
                "--demuxer=rawaudio",
                "--demuxer-rawaudio-format=alaw",
                "--demuxer-rawaudio-rate=8000",
                "--demuxer-rawaudio-channels=1",
            ],
        ),
    ],
)
def test_play_uses_the_first_available_player(
    requests: Callable[[httpx.Response], list[httpx.Request]],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    *,
    response_format: str,
    players: list[str],
    expected: list[str],
) -> None:
    requests(httpx.Response(200, content=AUDIO))
    records = {name: fake_player(tmp_path, name) for name in players}
    monkeypatch.setenv("PATH", str(tmp_path))
    output = tmp_path / f"out.{response_format}"
    assert cli.main(["say", "Hi.", "-o", str(output), "--play"]) == 0
    assert records[expected[0]].read_text().splitlines() == [*expected[1:], str(output)]


def test_a_suffix_that_names_no_format_is_refused(
    requests: Callable[[httpx.Response], list[httpx.Request]], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    seen = requests(httpx.Response(200, content=AUDIO))
    assert cli.main(["say", "Hi.", "-o", str(tmp_path / "notes.txt")]) == 2
    assert capsys.readouterr().err == "chattts-gateway: no audio format is named '.txt': give --format\n"
    assert not seen and not (tmp_path / "notes.txt").exists()
    assert cli.main(["say", "Hi.", "-o", str(tmp_path / "notes.txt"), "--format", "pcmu"]) == 0
    assert json.loads(seen[0].content)["response_format"] == "pcmu"


@pytest.mark.parametrize(("response_format", "advice"), [("mp3", "ffplay or mpv"), ("wav", "ffplay, mpv or aplay")])
def test_play_says_when_it_cannot(
    requests: Callable[[httpx.Response], list[httpx.Request]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    *,
    response_format: str,
    advice: str,
) -> None:
    requests(httpx.Response(200, content=AUDIO))
    if response_format == "mp3":
        fake_player(tmp_path, "aplay")  # aplay plays only wav and pcm
    monkeypatch.setenv("PATH", str(tmp_path))
    output = tmp_path / f"out.{response_format}"
    assert cli.main(["say", "Hi.", "-o", str(output), "--play"]) == 1
    assert capsys.readouterr().err == f"chattts-gateway: wrote {output} but cannot play it: install {advice}\n"
    assert output.read_bytes() == AUDIO


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_redraws_one_line_on_a_terminal() -> None:
    terminal = _Terminal()
    progress = say_cli._Progress(terminal, delay_s=0, interval_s=0)
    progress.advance(1024)
    progress.advance(2048)
    progress.close()
    lines = terminal.getvalue().split("\r\x1b[K")
    assert lines[0] == ""
    assert [line.split(" received")[0] for line in lines[1:]] == ["1.0 KiB", "3.0 KiB", "3.0 KiB"]
    assert terminal.getvalue().endswith(" s\n")


@pytest.mark.parametrize(("stream", "delay_s"), [(io.StringIO(), 0.0), (_Terminal(), 60.0)])
def test_progress_is_quiet_off_a_terminal_and_for_short_waits(stream: io.StringIO, delay_s: float) -> None:
    progress = say_cli._Progress(stream, delay_s=delay_s, interval_s=0)
    progress.advance(1024)
    progress.close()
    assert stream.getvalue() == ""


def test_say_is_listed_with_the_other_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "{serve,keys,openapi,config-reference,assets,say}" in capsys.readouterr().out
