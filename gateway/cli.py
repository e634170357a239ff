"""``tts-gateway``: the command line.

``tts-gateway serve [--host H] [--port P] [--config FILE]`` runs the gateway under uvicorn (uvloop, httptools).
``tts-gateway assets generate --preset tiny|full DIR`` writes a ChatTTS asset directory with random weights.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tts-gateway", description="OpenAI-compatible speech gateway for ChatTTS.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve the gateway over HTTP")
    serve.add_argument("--host", help="address to bind (default: server.host, 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port to bind (default: server.port, 8000)")
    serve.add_argument("--config", type=Path, default=os.environ.get("TTS_GATEWAY_CONFIG"),
                       help="YAML configuration file (default: $TTS_GATEWAY_CONFIG); environment variables win")
    assets = commands.add_parser("assets", help="ChatTTS weights").add_subparsers(dest="assets_command", required=True)
    generate = assets.add_parser("generate", help="write ChatTTS assets with random weights (tests, benchmarks)")
    generate.add_argument("--preset", choices=["tiny", "full"], default="tiny",
                          help="tiny: seconds to build, for tests; full: the real model's dimensions, for benchmarks")
    generate.add_argument("--seed", type=int, default=0)
    generate.add_argument("directory", type=Path)
    return parser


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from gateway.app import create_app
    from gateway.settings import load_settings

    try:
        settings = load_settings(args.config)
    except (FileNotFoundError, ValueError) as exc:
        print(f"tts-gateway: invalid configuration: {exc}", file=sys.stderr)
        return 2
    host = args.host or settings.server.host
    port = settings.server.port if args.port is None else args.port
    uvicorn.run(create_app(settings), host=host, port=port, loop="uvloop", http="httptools",
                log_level=settings.server.log_level, timeout_graceful_shutdown=30)
    return 0


def _generate_assets(args: argparse.Namespace) -> int:
    from engines.chattts.assets import generate_assets

    generate_assets(args.directory, args.preset, args.seed)
    print(f"wrote {args.preset} ChatTTS assets with random weights to {args.directory}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    return _generate_assets(args)


if __name__ == "__main__":
    sys.exit(main())
