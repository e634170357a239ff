"""``chattts-gateway serve`` serving TLS itself (``server.tls_certfile``/``tls_keyfile``, or ``--tls-certfile``/
``--tls-keyfile``): HTTPS and WSS on one port, checked with a certificate made here and a client that trusts it as its
CA, and both SDKs' realtime helpers over ``wss://`` (ElevenLabs' ``convert_realtime`` speaks nothing else)."""

from __future__ import annotations

import base64
import ssl
import subprocess
import time
from typing import TYPE_CHECKING, Any

import certifi
import httpx
import openai
import pytest
from elevenlabs import ElevenLabs

from engines.synthetic import voice_frequency
from harness.gateway_process import CONSOLE_SCRIPT, GatewayProcess
from tests.audio_decode import decode_audio, dominant_frequency
from tests.tls_proxy import write_self_signed

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

MODEL = "gpt-realtime-2.1-mini"
TEXT = "Spoken over a socket the gateway encrypts itself."


class TlsGateway(GatewayProcess):
    """A gateway whose base URL is ``https://``: the harness polls its readiness over TLS (httpx trusts the CA of
    ``SSL_CERT_FILE``, which the module sets)."""

    def __init__(self, config: dict[str, Any], workdir: Path) -> None:
        super().__init__(config, workdir)
        self.base_url = f"https://127.0.0.1:{self.port}"


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    folder = tmp_path_factory.mktemp("tls")
    files = (folder / "cert.pem", folder / "key.pem")
    write_self_signed(*files)
    # Every client of this module trusts it as a CA the way a deployment's clients would: OpenSSL's default paths
    # (websockets' default context, ElevenLabs' SDK) and httpx (trust_env) both read SSL_CERT_FILE.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SSL_CERT_FILE", str(files[0]))
        yield files


@pytest.fixture(scope="module")
def gateway(certificate: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    config = {
        "server": {"tls_certfile": str(certificate[0]), "tls_keyfile": str(certificate[1])},
        "engines": {"tones": {"kind": "synthetic", "options": {"seconds_per_char": 0.02}}},
        "aliases": {MODEL: ["tones"], "eleven_multilingual_v2": ["tones"]},
    }
    with TlsGateway(config, tmp_path_factory.mktemp("tls-gateway")) as process:
        yield process


def test_https_with_the_ca_and_nothing_in_plain_text(gateway: GatewayProcess, certificate: tuple[Path, Path]) -> None:
    context = ssl.create_default_context(cafile=certificate[0])
    assert httpx.get(f"{gateway.base_url}/readyz", verify=context, timeout=5).status_code == 200
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):  # a client without the CA refuses it
        httpx.get(f"{gateway.base_url}/readyz", verify=ssl.create_default_context(cafile=certifi.where()), timeout=5)
    with pytest.raises(httpx.HTTPError):  # plain HTTP on the TLS port gets no answer it can read
        httpx.get(gateway.base_url.replace("https://", "http://") + "/readyz", timeout=5)


async def test_the_openai_sdks_realtime_helper_over_wss(gateway: GatewayProcess) -> None:
    client = openai.AsyncOpenAI(base_url=f"{gateway.base_url}/v1", api_key="anything")  # wss:// from https://
    received: list[dict[str, Any]] = []
    async with client, client.realtime.connect(model=MODEL) as connection:
        assert (await connection.recv()).type == "session.created"
        params: Any = {"conversation": "none", "input": [_message(TEXT)], "audio": {"output": {"voice": "marin"}}}
        await connection.response.create(response=params)
        while not received or received[-1]["type"] != "response.done":
            received.append((await connection.recv()).model_dump(mode="json"))
    pcm = b"".join(base64.b64decode(e["delta"]) for e in received if e["type"] == "response.output_audio.delta")
    audio = decode_audio(pcm, "pcm")
    assert audio.duration == pytest.approx(len(TEXT) * 0.02, abs=0.03)
    assert dominant_frequency(audio) == pytest.approx(voice_frequency("marin"), abs=3)


# The SDK reads until the socket closes, then looks at the close's code the way websockets deprecated.
@pytest.mark.filterwarnings("ignore:ConnectionClosed.code is deprecated:DeprecationWarning")
def test_elevenlabs_convert_realtime_over_wss(gateway: GatewayProcess) -> None:
    with httpx.Client() as http:
        client = ElevenLabs(api_key="anything", base_url=gateway.base_url, httpx_client=http)
        chunks = client.text_to_speech.convert_realtime(
            "coral", text=iter(["Spoken over ", "a socket the gateway ", "encrypts itself."]),
            model_id="eleven_multilingual_v2", output_format="pcm_24000",
        )  # fmt: skip
        audio = decode_audio(b"".join(chunks), "pcm")
    assert audio.duration == pytest.approx(len(TEXT) * 0.02, abs=0.05)
    assert dominant_frequency(audio) == pytest.approx(voice_frequency("coral"), abs=3)


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--tls-certfile", "cert.pem"], "go together"),
        (["--tls-certfile", "missing.pem", "--tls-keyfile", "missing.pem"], "cannot serve TLS"),
    ],
)
def test_serve_says_what_is_wrong_with_its_tls_files(tmp_path: Path, flags: list[str], said: str) -> None:
    write_self_signed(tmp_path / "cert.pem", tmp_path / "key.pem")
    started = time.monotonic()
    result = subprocess.run(
        [str(CONSOLE_SCRIPT), "serve", "--port", "0", *flags],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert said in result.stderr and "Traceback" not in result.stderr
    assert time.monotonic() - started < 60


def _message(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
