"""TLS in front of a gateway, as an ingress terminates it: for clients that only speak ``wss://`` (the OpenAI Node
SDK's Realtime client turns every base URL into one)."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import ssl
import threading
from contextlib import suppress
from typing import TYPE_CHECKING

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

if TYPE_CHECKING:
    from pathlib import Path
    from types import TracebackType

__all__ = ["TlsProxy", "write_self_signed"]

_HOST = "127.0.0.1"


class TlsProxy:
    """Accepts TLS on a free port of 127.0.0.1 and relays the plain bytes to ``upstream_port``; its self-signed
    certificate (for 127.0.0.1) is written to ``certificate`` for clients to trust."""

    def __init__(self, upstream_port: int, workdir: Path) -> None:
        self.certificate = workdir / "proxy-cert.pem"
        self._key = workdir / "proxy-key.pem"
        self._upstream_port = upstream_port
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tls-proxy", daemon=True)
        self.port = 0

    def __enter__(self) -> TlsProxy:
        self._write_certificate()
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.certificate, self._key)
        self._thread.start()
        server = asyncio.run_coroutine_threadsafe(asyncio.start_server(self._relay, _HOST, 0, ssl=context), self._loop)
        self._server = server.result(timeout=5)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def __exit__(self, *_: type[BaseException] | BaseException | TracebackType | None) -> None:
        asyncio.run_coroutine_threadsafe(self._shut_down(), self._loop).result(timeout=5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop.close()

    async def _shut_down(self) -> None:
        self._server.close()
        relays = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in relays:
            task.cancel()
        await asyncio.gather(*relays, return_exceptions=True)

    @property
    def base_url(self) -> str:
        return f"https://{_HOST}:{self.port}"

    async def _relay(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection(_HOST, self._upstream_port)
        await asyncio.gather(_pipe(client_reader, upstream_writer), _pipe(upstream_reader, client_writer))

    def _write_certificate(self) -> None:
        write_self_signed(self.certificate, self._key)


def write_self_signed(certificate_file: Path, key_file: Path) -> None:
    """A self-signed certificate for 127.0.0.1 (its own CA: a client trusts it as such) and its unencrypted key, in
    PEM."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, _HOST)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(_HOST))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    certificate_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, ssl.SSLError):
        pass
    finally:
        with suppress(ConnectionError, ssl.SSLError, RuntimeError):
            writer.close()
