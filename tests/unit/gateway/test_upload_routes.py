"""The upload routes in process (the real app, engines in threads, real decoder processes): ordinary multichannel
recordings are taken, a decoder's crash is one upload's 400 and a decoder starved of CPU one upload's 503, and what a
tenant and the replica may have in flight is bounded before a body is read (429 and 503 with Retry-After, in
OpenAI's shape)."""

from __future__ import annotations

import asyncio
import io
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np
import pytest
import soundfile
from litestar.testing import AsyncTestClient

from gateway.app import create_app
from gateway.settings import Settings
from gateway.uploads import DecoderProcesses, UploadSettings
from harness.hostile_uploads import wav_pcm
from harness.recordings import recording, tone
from tests.cpu_starvation import children_running, starved_of_cpu
from tests.inprocess import ThreadBackend, in_process_app
from tests.upload_faults import CRASH, SPIN
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from litestar import Litestar

ENGINES: dict[str, Any] = {"chattts": None, "espeak": None, "tones": {"kind": "synthetic"}}
CONSENT_FORM = {"name": "Ada", "language": "en-US"}
BOUNDARY = "upload-boundary"


@asynccontextmanager
async def gateway(**uploads: Any) -> AsyncIterator[AsyncTestClient[Litestar]]:
    config = {"engines": ENGINES, "aliases": {}, "uploads": uploads}
    async with AsyncTestClient(app=in_process_app(config)) as client:
        yield client


def multichannel(channels: int, rate: int, container: str) -> bytes:
    sound = 0.3 * np.sin(2 * np.pi * 440.0 * np.arange(3 * rate) / rate)
    upload = io.BytesIO()
    soundfile.write(upload, np.tile(sound[:, None], (1, channels)), rate, format=container, subtype="PCM_16")
    return upload.getvalue()


async def consent(client: AsyncTestClient[Litestar], data: bytes, name: str = "consent.wav") -> Any:
    return await client.post(
        "/v1/audio/voice_consents", data=CONSENT_FORM, files={"recording": (name, data, "application/octet-stream")}
    )


@pytest.mark.parametrize("channels", [6, 8])
@pytest.mark.parametrize("rate", [24000, 48000])
@pytest.mark.parametrize("container", ["WAV", "FLAC"])
async def test_ordinary_multichannel_recordings_are_taken_on_both_routes(
    channels: int, rate: int, container: str
) -> None:
    upload = multichannel(channels, rate, container)
    async with gateway() as client:
        created = await consent(client, upload)
        assert created.status_code == 201, created.text
        assert created.json()["object"] == "audio.voice_consent"
        voice = await client.post(
            "/v1/audio/voices",
            data={"name": "studio", "consent": created.json()["id"], "model": "tones", "transcript": "Hello."},
            files={"audio_sample": ("sample.bin", upload, "application/octet-stream")},
        )
        assert voice.status_code == 201, voice.text


async def test_a_crashed_decoder_is_one_uploads_400_and_the_next_is_served() -> None:
    decoders = DecoderProcesses(UploadSettings(decoders=1), module="tests.upload_faults")
    decoders.start()
    settings = Settings(engines=ENGINES, aliases={})
    app = create_app(settings, pool_factory=ThreadBackend, decoders=decoders)
    try:
        async with AsyncTestClient(app=app) as client:
            crashed = await consent(client, CRASH + bytes(64))
            assert crashed.status_code == 400
            error = crashed.json()["error"]
            assert (error["code"], error["param"]) == ("invalid_audio", "recording")
            assert error["message"] == "The recording could not be decoded: it crashed the decoder (signal SIGSEGV)."
            served = await consent(client, recording("wav", tone(1.5)))
            assert served.status_code == 201, served.text
    finally:
        decoders.stop()


async def test_a_wav_declaring_0_bits_per_sample_is_invalid_audio_saying_so() -> None:
    # FFmpeg has no codec for such a header: the decoder once failed on it ("the decoder failed (AttributeError)").
    async with gateway() as client:
        refused = await consent(client, wav_pcm(bytes(48000), rate=24000, channels=1, bits=0))
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        assert (error["code"], error["param"]) == ("invalid_audio", "recording")
        assert error["message"] == (
            "The wav file declares its audio in an encoding no decoder reads "
            "(an unknown codec, or an impossible sample size such as 0 bits)."
        )


async def test_a_decoder_starved_of_cpu_is_one_uploads_503_not_its_fault() -> None:
    # Decoders run at idle priority: on a machine whose cores synthesis keeps busy one may not run before its
    # deadline. That upload did nothing wrong: it is told to come back (503), not that it is no audio (400). The
    # decoding it was given would spin until its deadline if it ran, so only the waiting tells the two apart.
    settings = UploadSettings(decoders=1, decode_timeout_s=1.0, decoder_cpu_s=30, decoder_priority="idle")
    decoders = DecoderProcesses(settings, module="tests.upload_faults")
    decoders.start()
    app = create_app(Settings(engines=ENGINES, aliases={}), pool_factory=ThreadBackend, decoders=decoders)
    try:
        async with AsyncTestClient(app=app) as client:
            wait_until(lambda: decoders.idle == 1, what="the decoder started")
            with starved_of_cpu(children_running("tests.upload_faults")):
                starved = await consent(client, SPIN + bytes(64))
            assert_refused(starved, 503, "uploads_busy")
            assert "too busy to decode the upload within 1 s" in starved.json()["error"]["message"]
            served = await consent(client, recording("wav", tone(1.5)))
            assert served.status_code == 201, served.text
    finally:
        decoders.stop()


class HeldUpload:
    """A consent upload whose body stops after its first bytes until :meth:`release`: in flight as long as needed."""

    def __init__(self, declared_bytes: int) -> None:
        self.released = asyncio.Event()
        self.declared_bytes = declared_bytes
        self.started = asyncio.Event()

    def release(self) -> None:
        self.released.set()

    async def body(self) -> AsyncIterator[bytes]:
        head = (
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="recording"; filename="r.wav"\r\n'
            "Content-Type: audio/wav\r\n\r\n"
        ).encode()
        tail = f"\r\n--{BOUNDARY}--\r\n".encode()
        self.started.set()
        yield head
        await self.released.wait()
        yield bytes(self.declared_bytes - len(head) - len(tail)) + tail

    async def send(self, client: AsyncTestClient[Litestar]) -> httpx.Response:
        """Sent straight to the app (Litestar's test transport reads a body whole before the app sees it)."""
        headers = {
            "content-type": f"multipart/form-data; boundary={BOUNDARY}",
            "content-length": str(self.declared_bytes),
        }
        transport = httpx.ASGITransport(app=client.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as streaming:
            return await streaming.post("/v1/audio/voice_consents", content=self.body(), headers=headers)


def assert_refused(answer: Any, status: int, code: str) -> None:
    assert answer.status_code == status, answer.text
    assert answer.json()["error"]["code"] == code
    assert int(answer.headers["retry-after"]) >= 1


async def test_a_tenant_holds_at_most_its_uploads_in_flight() -> None:
    async with gateway(max_per_tenant=2) as client:
        held = [HeldUpload(4096) for _ in range(2)]
        sending = [asyncio.create_task(upload.send(client)) for upload in held]
        await asyncio.gather(*(upload.started.wait() for upload in held))
        await asyncio.sleep(0.2)  # both bodies begun: their places are taken
        assert_refused(await consent(client, recording("wav", tone(1.5))), 429, "concurrency_limit_exceeded")
        assert (await client.get("/v1/usage")).json()["rejections"] == {"uploads": 1}  # the tenant's usage says so
        for upload in held:
            upload.release()
        for answer in await asyncio.gather(*sending):
            assert answer.status_code == 400  # a body of zeros is no audio; what matters is that it was read
        served = await consent(client, recording("wav", tone(1.5)))
        assert served.status_code == 201, served.text


async def test_the_bodies_in_flight_are_held_to_their_budget() -> None:
    async with gateway(max_spooled_mb=16) as client:
        held = HeldUpload(10 * 1024 * 1024)
        sending = asyncio.create_task(held.send(client))
        await held.started.wait()
        await asyncio.sleep(0.2)
        big = recording("wav", tone(1.5)) + bytes(7 * 1024 * 1024)  # 7 MiB more: over the 16 MiB budget
        assert_refused(await consent(client, big), 503, "uploads_busy")
        small = await consent(client, recording("wav", tone(1.5)))  # a small one still fits
        assert small.status_code == 201, small.text
        held.release()
        assert (await sending).status_code == 400
