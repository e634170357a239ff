"""``chattts-gateway say``: a client of a running gateway (or any OpenAI-compatible speech API), not part of the server.

It streams ``POST /v1/audio/speech`` to a file or standard output as the audio arrives, shows progress on a terminal,
and can play the result with the first of ffplay, mpv or aplay that is installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, TextIO

from lifecycle import naming

if TYPE_CHECKING:
    import argparse

    import httpx

__all__ = ["add_say_parser", "run_say"]


#: What ``say`` writes by default for each format, and the format it infers from an output file's suffix.
_SAY_SUFFIXES = {
    "mp3": ".mp3",
    "opus": ".ogg",
    "aac": ".aac",
    "flac": ".flac",
    "wav": ".wav",
    "pcm": ".pcm",
    "pcmu": ".ulaw",
    "pcma": ".alaw",
}
_SAY_FORMATS_BY_SUFFIX = {
    **{suffix: fmt for fmt, suffix in _SAY_SUFFIXES.items()},
    **{f".{fmt}": fmt for fmt in _SAY_SUFFIXES},
    ".opus": "opus",
}


@dataclass(frozen=True)
class _Raw:
    """A headerless format, as each player is told to read it."""

    ffmpeg: str
    rate: int
    aplay: str


_RAW = {
    "pcm": _Raw("s16le", 24000, "S16_LE"),
    "pcmu": _Raw("mulaw", 8000, "MU_LAW"),
    "pcma": _Raw("alaw", 8000, "A_LAW"),
}


def add_say_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    say = commands.add_parser(
        "say",
        help="speak text through a running gateway into a file (and play it)",
        description="Streams POST /v1/audio/speech from a running gateway (or any OpenAI-compatible API) to a file. "
        "The API key comes from --api-key, $CHATTTS_GATEWAY_API_KEY or $OPENAI_API_KEY.",
    )
    say.add_argument("text", help="what to say; '-' reads it from standard input")
    say.add_argument("--voice", default="nova", help="voice name (default: nova)")
    say.add_argument(
        "--format",
        dest="response_format",
        choices=list(_SAY_SUFFIXES),
        help="audio format (default: from the output file's suffix, else mp3)",
    )
    say.add_argument("-o", "--output", help="file to write, '-' for standard output (default: speech.<format>)")
    say.add_argument("--play", action="store_true", help="play the file when written (ffplay, mpv or aplay)")
    say.add_argument("--model", default="tts-1", help="model or alias (default: tts-1)")
    say.add_argument("--speed", type=float, default=1.0, help="0.25 to 4.0 (default: 1.0)")
    say.add_argument("--instructions", help="speaking instructions, for engines that use them")
    say.add_argument(
        "--base-url",
        default=naming.environ("BASE_URL") or "http://127.0.0.1:8000/v1",
        help="the API's base URL, as the OpenAI SDKs take it "
        "(default: $CHATTTS_GATEWAY_BASE_URL or http://127.0.0.1:8000/v1)",
    )
    say.add_argument("--api-key", help="bearer token (default: $CHATTTS_GATEWAY_API_KEY, then $OPENAI_API_KEY)")


def run_say(args: argparse.Namespace) -> int:
    """Run ``chattts-gateway say``; returns the exit status."""
    suffix = Path(args.output or "").suffix.lower()
    response_format = args.response_format or _SAY_FORMATS_BY_SUFFIX.get(suffix, "" if suffix else "mp3")
    if not response_format:
        print(f"chattts-gateway: no audio format is named {suffix!r}: give --format", file=sys.stderr)
        return 2
    output = args.output or f"speech{_SAY_SUFFIXES[response_format]}"
    if args.play and output == "-":
        print("chattts-gateway: --play needs an output file, not standard output", file=sys.stderr)
        return 2
    text = sys.stdin.read() if args.text == "-" else args.text
    body: dict[str, object] = {
        "model": args.model,
        "input": text,
        "voice": args.voice,
        "response_format": response_format,
        "speed": args.speed,
    }
    if args.instructions is not None:
        body["instructions"] = args.instructions
    api_key = args.api_key or naming.environ("API_KEY") or os.environ.get("OPENAI_API_KEY")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    status = _stream_speech(f"{args.base_url.rstrip('/')}/audio/speech", body, headers, output)
    if status != 0 or not args.play:
        return status
    return _play(Path(output), response_format)


def _stream_speech(url: str, body: dict[str, object], headers: dict[str, str], output: str) -> int:
    import httpx

    try:
        with (
            httpx.Client(timeout=httpx.Timeout(10.0, read=300.0)) as client,
            client.stream("POST", url, json=body, headers=headers) as response,
        ):
            if response.is_error:
                response.read()
                print(f"chattts-gateway: {response.status_code} {_error_message(response)}", file=sys.stderr)
                return 1
            if output == "-":
                _receive(response, sys.stdout.buffer)
            else:
                with Path(output).open("wb") as file:
                    _receive(response, file)
    except (httpx.HTTPError, OSError, KeyboardInterrupt) as exc:
        if output != "-":
            Path(output).unlink(missing_ok=True)  # a truncated clip must not look like a complete one
        if isinstance(exc, KeyboardInterrupt):
            return 130
        where = url if isinstance(exc, httpx.HTTPError) else output
        print(f"chattts-gateway: {where}: {str(exc) or type(exc).__name__}", file=sys.stderr)
        return 1
    return 0


def _receive(response: httpx.Response, sink: BinaryIO) -> None:
    progress = _Progress(sys.stderr)
    try:
        for chunk in response.iter_bytes():
            sink.write(chunk)
            sink.flush()
            progress.advance(len(chunk))
    finally:
        progress.close()


def _error_message(response: httpx.Response) -> str:
    try:
        message = response.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return response.text.strip() or response.reason_phrase
    return str(message)


class _Progress:
    """Bytes received and time elapsed, redrawn in place on a terminal once a wait is long enough to notice."""

    def __init__(self, stream: TextIO, delay_s: float = 0.5, interval_s: float = 0.1) -> None:
        self._stream = stream
        self._enabled = stream.isatty()
        self._delay_s = delay_s
        self._interval_s = interval_s
        self._started = time.monotonic()
        self._drawn_at: float | None = None
        self.received = 0

    def advance(self, size: int) -> None:
        self.received += size
        elapsed = time.monotonic() - self._started
        due = self._drawn_at is None or elapsed - self._drawn_at >= self._interval_s
        if self._enabled and elapsed >= self._delay_s and due:
            self._draw(elapsed)

    def close(self) -> None:
        if self._drawn_at is not None:
            self._draw(time.monotonic() - self._started)
            self._stream.write("\n")
            self._stream.flush()

    def _draw(self, elapsed: float) -> None:
        self._stream.write(f"\r\x1b[K{self.received / 1024:,.1f} KiB received in {elapsed:.1f} s")
        self._stream.flush()
        self._drawn_at = elapsed


def _player_command(path: Path, response_format: str) -> list[str] | None:
    """The first installed player that can play ``response_format``, as a command line; ``None`` when none can."""
    raw = _RAW.get(response_format)  # headerless, mono: the players are told its encoding and rate
    candidates = [
        [
            "ffplay",
            "-nodisp",
            "-autoexit",
            "-loglevel",
            "error",
            *(["-f", raw.ffmpeg, "-ar", str(raw.rate), "-ch_layout", "mono"] if raw else []),
            str(path),
        ],
        [
            "mpv",
            "--no-video",
            "--really-quiet",
            *(
                [
                    "--demuxer=rawaudio",
                    f"--demuxer-rawaudio-format={raw.ffmpeg}",
                    f"--demuxer-rawaudio-rate={raw.rate}",
                    "--demuxer-rawaudio-channels=1",
                ]
                if raw
                else []
            ),
            str(path),
        ],
    ]
    if response_format == "wav" or raw:
        candidates.append(
            ["aplay", "-q", *(["-t", "raw", "-f", raw.aplay, "-r", str(raw.rate), "-c", "1"] if raw else []), str(path)]
        )
    return next((command for command in candidates if shutil.which(command[0])), None)


def _play(path: Path, response_format: str) -> int:
    command = _player_command(path, response_format)
    if command is None:
        wanted = "ffplay, mpv or aplay" if response_format == "wav" or response_format in _RAW else "ffplay or mpv"
        print(f"chattts-gateway: wrote {path} but cannot play it: install {wanted}", file=sys.stderr)
        return 1
    return subprocess.run(command, check=False).returncode
