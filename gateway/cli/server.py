"""The server's commands: ``serve``, ``keys create``, ``openapi``, ``config-reference`` and ``assets generate``."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from lifecycle import naming

if TYPE_CHECKING:
    import argparse

    from pydantic import ValidationError

    from gateway.settings import Settings

__all__ = ["add_server_parsers", "run_server_command"]


def _config_argument(parser: argparse.ArgumentParser) -> None:
    default = [Path(p) for p in (naming.environ("CONFIG") or "").split(os.pathsep) if p]
    parser.add_argument(
        "--config",
        type=Path,
        action="append",
        default=None,
        help="YAML configuration file, repeatable: later files deep-merge over earlier ones "
        "(default: $CHATTTS_GATEWAY_CONFIG, files separated by ':'); environment variables win",
    )
    parser.set_defaults(config_default=default)


def add_server_parsers(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``serve``, ``keys create``, ``openapi``, ``config-reference`` and ``assets generate``."""
    serve = commands.add_parser("serve", help="serve the gateway over HTTP")
    serve.add_argument("--host", help="address to bind (default: server.host, 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port to bind (default: server.port, 8000)")
    serve.add_argument("--tls-certfile", type=Path, help="PEM certificate: serve HTTPS and WSS (server.tls_certfile)")
    serve.add_argument("--tls-keyfile", type=Path, help="its PEM private key (server.tls_keyfile)")
    _config_argument(serve)
    keys = commands.add_parser("keys", help="API keys").add_subparsers(dest="keys_command", required=True)
    create = keys.add_parser("create", help="issue an API key for a tenant (stored in Redis when redis_url is set)")
    create.add_argument("--tenant", required=True)
    _config_argument(create)
    openapi = commands.add_parser("openapi", help="write the app's OpenAPI document (JSON)")
    openapi.add_argument("--output", type=Path, help="file to write (default: standard output)")
    reference = commands.add_parser(
        "config-reference", help="write the configuration reference (Markdown) from the settings' field docstrings"
    )
    reference.add_argument("--output", type=Path, help="file to write (default: standard output)")
    assets = commands.add_parser("assets", help="ChatTTS weights").add_subparsers(dest="assets_command", required=True)
    generate = assets.add_parser("generate", help="write ChatTTS assets with random weights (tests, benchmarks)")
    generate.add_argument(
        "--preset",
        choices=["tiny", "full"],
        default="tiny",
        help="tiny: seconds to build, for tests; full: the real model's dimensions, for benchmarks",
    )
    generate.add_argument("--seed", type=int, default=0)
    generate.add_argument("directory", type=Path)


def _settings(args: argparse.Namespace) -> Settings | None:
    from pydantic import ValidationError

    from gateway.settings import load_settings

    try:
        return load_settings(args.config if args.config is not None else args.config_default)
    except ValidationError as exc:
        print(f"chattts-gateway: invalid configuration: {_one_line(exc)}", file=sys.stderr)
        return None
    except (FileNotFoundError, ValueError) as exc:
        print(f"chattts-gateway: invalid configuration: {exc}", file=sys.stderr)
        return None


def _one_line(exc: ValidationError) -> str:
    """Each problem as ``where: what``, on one line, without the input values pydantic would quote (secrets)."""
    return "; ".join(
        f"{'.'.join(str(part) for part in error['loc']) or 'settings'}: {error['msg'].removeprefix('Value error, ')}"
        for error in exc.errors()
    )


def _serve(args: argparse.Namespace) -> int:
    from gateway.app import create_app
    from gateway.cli.shutdown import run_draining_realtime  # uvicorn.run, draining realtime sessions first
    from gateway.http.connection_limits import ConnectionLimits, guarded_http_protocol
    from gateway.http.connection_refusals import refusal_bodies
    from gateway.http.websocket_close import PolicyClosingWebSocketProtocol

    if (settings := _settings(args)) is None:
        return 2
    host = args.host or settings.server.host
    port = settings.server.port if args.port is None else args.port
    server = settings.server
    tls = _tls_files(args, settings)
    if isinstance(tls, str):
        print(f"chattts-gateway: {tls}", file=sys.stderr)
        return 2
    app = create_app(settings)  # it configures logging, uvicorn's loggers included (log_config=None below)
    logging.captureWarnings(True)  # a library's warning becomes a JSON line too, not plain text on stderr
    # httptools, behind the connection limits it lacks (gateway/http/connection_limits.py), refusing in the body of
    # the API family the app routes the request's path to. websockets-sansio waits
    # for the socket to drain before each send, so a slow realtime client pushes back instead of piling audio up; a
    # socket it closes for a policy reason is read no more (gateway/http/websocket_close.py).
    run_draining_realtime(
        app,
        host=host,
        port=port,
        loop="uvloop",
        http=guarded_http_protocol(ConnectionLimits.from_settings(server), refusal_bodies(app)),
        timeout_keep_alive=server.keep_alive_timeout_s,
        # uvicorn believes X-Forwarded-For from 127.0.0.1 by default: a local caller could forge any client address.
        proxy_headers=bool(server.trusted_proxies),
        forwarded_allow_ips=server.trusted_proxies or None,
        ws=PolicyClosingWebSocketProtocol,
        ws_max_size=server.max_body_bytes,
        log_config=None,
        log_level=server.log_level,
        timeout_graceful_shutdown=server.shutdown_grace_s,
        access_log=False,
        ssl_certfile=tls[0],  # uvicorn wraps the socket: every route, the WebSockets (wss://) included
        ssl_keyfile=tls[1],
    )  # one JSON line per request comes from the gateway itself
    return 0


def _tls_files(args: argparse.Namespace, settings: Settings) -> tuple[Path | None, Path | None] | str:
    """The certificate and key to serve with (the flags win over ``server.tls_*``), or why they cannot serve: loaded
    once here, so that a missing file, a key that is not the certificate's or a bad PEM is one line, before uvicorn
    would fail on it with a traceback."""
    import ssl

    certfile = args.tls_certfile or settings.server.tls_certfile
    keyfile = args.tls_keyfile or settings.server.tls_keyfile
    if (certfile is None) != (keyfile is None):
        return "--tls-certfile and --tls-keyfile go together: give both, or neither for plain HTTP"
    if certfile is not None:
        try:
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(certfile, keyfile)
        except (OSError, ssl.SSLError) as exc:  # SSLError is an OSError; named for the reader
            return f"cannot serve TLS with {certfile} and {keyfile}: {exc}"
    return certfile, keyfile


def _create_key(args: argparse.Namespace) -> int:
    if (settings := _settings(args)) is None:
        return 2
    if settings.redis_url is None:
        # Without a shared store the key goes into the configuration file as its hash.
        from auth import generate_api_key, hash_api_key

        key = generate_api_key()
        print(
            f"{key}\n\nNo redis_url is configured: add this hash to the tenant's api_key_sha256 in the config "
            f"file, then restart:\n  {hash_api_key(key)}",
            file=sys.stdout,
        )
        return 0
    return asyncio.run(_create_key_in_redis(settings, args.tenant))


async def _create_key_in_redis(settings: Settings, tenant: str) -> int:
    from auth import RedisAuthStore, TenantNotFoundError, seed_tenants
    from gateway.legacy import move_legacy_layout
    from storage import connect_redis

    client = connect_redis(settings.redis_url or "")
    store = RedisAuthStore(client, owns_client=True, revoked_retention_s=settings.auth.revoked_key_retention_s)
    try:
        await move_legacy_layout(client, revoked_retention_s=settings.auth.revoked_key_retention_s)
        await seed_tenants(store, settings.auth.tenants)
        key, record = await store.create_key(tenant)
    except TenantNotFoundError:
        print(f"chattts-gateway: no tenant named {tenant!r}", file=sys.stderr)
        return 1
    finally:
        await store.close()
    print(f"{key}\n\nkey id {record.id} for tenant {tenant}: shown once, stored only as a hash.")
    return 0


def _write_openapi(args: argparse.Namespace) -> int:
    from gateway.app import openapi_document

    return _write_document(openapi_document(), args.output)


def _write_config_reference(args: argparse.Namespace) -> int:
    from gateway.cli.config_reference import render_reference

    return _write_document(render_reference(), args.output)


def _write_document(document: str, output: Path | None) -> int:
    """A generated document to ``--output``, else to standard output."""
    if output is None:
        print(document, end="")
    else:
        output.write_text(document)
    return 0


def _generate_assets(args: argparse.Namespace) -> int:
    from engines.chattts.assets import generate_assets

    generate_assets(args.directory, args.preset, args.seed)
    print(f"wrote {args.preset} ChatTTS assets with random weights to {args.directory}")
    return 0


def run_server_command(args: argparse.Namespace) -> int:
    """Run the parsed server command; returns the exit status."""
    if args.command == "serve":
        return _serve(args)
    if args.command == "keys":
        return _create_key(args)
    if args.command == "openapi":
        return _write_openapi(args)
    if args.command == "config-reference":
        return _write_config_reference(args)
    return _generate_assets(args)
