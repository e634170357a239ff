"""``chattts-gateway``: the command line. Nothing imports it; it imports the rest.

``chattts-gateway serve [--host H] [--port P] [--config FILE]`` runs the gateway under uvicorn (uvloop, httptools).
``chattts-gateway keys create --tenant NAME [--config FILE]`` issues an API key (shown once, stored only as a hash).
``chattts-gateway assets generate --preset tiny|full DIR`` writes a ChatTTS asset directory with random weights.
``chattts-gateway openapi [--output FILE]`` writes the OpenAPI document the app serves (checked in as openapi/).
``chattts-gateway config-reference [--output FILE]`` writes docs/configuration-reference.md from the settings.
``chattts-gateway say TEXT|- [--voice V] [--format F] [-o FILE|-] [--play] [--model M] [--speed S] [--base-url URL]
[--api-key KEY]`` speaks through a running gateway, writing the audio as it arrives (``say.py``, a client).
"""

from __future__ import annotations

import argparse
import sys

from gateway.cli.say import add_say_parser, run_say
from gateway.cli.server import add_server_parsers, run_server_command

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """Every command and option of ``chattts-gateway`` (the docs' commands are checked against it)."""
    parser = argparse.ArgumentParser(
        prog="chattts-gateway", description="OpenAI-compatible speech gateway for ChatTTS."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    add_server_parsers(commands)
    add_say_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    """The console script ``chattts-gateway``; returns the exit status."""
    args = build_parser().parse_args(argv)
    return run_say(args) if args.command == "say" else run_server_command(args)


if __name__ == "__main__":
    sys.exit(main())
