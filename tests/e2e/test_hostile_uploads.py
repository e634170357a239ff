"""Hostile uploads (issue #39) against one real gateway: every file of ``harness/hostile_uploads.py``, through both
upload routes, one at a time and eight at once, while another tenant asks for speech.

Each must be refused with OpenAI's 400 ``invalid_audio`` naming the upload's field, and leave the server as it was:
the same process, answering ``/healthz``, its resident memory (now, and at its peak: a 9 GB decoding freed since
still shows in Linux's high-water mark) within 100 MB of what it was after warm-up. Before the fix, the 8-channel
files killed the server (SIGSEGV in PyAV) and the low-rate FLACs took it to GBs. Ordinary 5.1, 7.1 and 8-channel
recordings must be accepted (201) on both routes, and a voice made from one must speak.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import httpx
import pytest

from auth.keys import generate_api_key
from harness.gateway_process import GatewayProcess
from harness.hostile_uploads import (
    CLONING_MODEL,
    HOSTILE_UPLOADS,
    SECONDS_PER_CHAR,
    UPLOAD_ROUTES,
    ServerFootprint,
    UploadClient,
    UploadRoute,
    multichannel_recording,
    upload_gateway_config,
)
from harness.recordings import recording
from tests.audio_decode import DURATION_TOLERANCE_S, decode_audio

if TYPE_CHECKING:
    from collections.abc import Iterator

# The volley comes from several tenants, two uploads each, as an attack from many accounts would: a fixed gateway
# lets one tenant have only a few uploads in flight (``uploads.max_per_tenant``, 4) and answers one more with a 429
# before reading it, where these must each reach the decoding.
ATTACKERS = 4
KEYS = {"bystander": generate_api_key()} | {f"attacker-{index}": generate_api_key() for index in range(ATTACKERS)}
ROUTES: list[UploadRoute] = sorted(UPLOAD_ROUTES)
GROWTH_LIMIT_BYTES = 100 * 1000 * 1000
TEXT = "Another tenant is still being served."
# The eight sent at once: those that cost the old decoder most, and the crash.
VOLLEY = (
    "flac_6hz_block65535",
    "matroska_pcm_1hz",
    "flac_3hz",
    "flac_24hz",
    "wav_380mhz",
    "wav_520mhz_77_bytes",
    "wav_8ch_u8_1hz",
    "flac_44khz_then_6hz",
)
MULTICHANNEL: list[tuple[Literal["wav", "flac"], int, int]] = [
    (container, channels, rate) for container in ("wav", "flac") for channels in (6, 8) for rate in (24000, 48000)
]


@dataclass(frozen=True, slots=True)
class Scene:
    """One gateway under attack: the attacking tenants, another tenant asking for speech, and the server's footprint
    once warm, which every later footprint is held to."""

    gateway: GatewayProcess
    attackers: list[UploadClient]
    bystander: httpx.Client
    warm: ServerFootprint

    @property
    def attacker(self) -> UploadClient:
        return self.attackers[0]

    def assert_unharmed(self) -> None:
        """The same server process, answering, its memory now and at its peak within the limit of its warm level."""
        process = self.gateway.process
        assert process is not None
        assert process.poll() is None, f"the gateway died ({process.returncode}):\n{self.gateway.log()[-4000:]}"
        assert httpx.get(f"{self.gateway.base_url}/healthz", timeout=30).status_code == 200
        now = ServerFootprint.of(self.warm.pid)
        assert now.same_process(self.warm)
        assert now.rss - self.warm.rss < GROWTH_LIMIT_BYTES, (
            f"resident memory grew {(now.rss - self.warm.rss) / 1e6:.0f} MB"
        )
        peak_growth = now.peak_rss - self.warm.peak_rss
        assert peak_growth < GROWTH_LIMIT_BYTES, f"its peak resident memory grew {peak_growth / 1e6:.0f} MB"


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scene]:
    headers = {"authorization": f"Bearer {KEYS['bystander']}"}
    with (
        GatewayProcess(upload_gateway_config(KEYS), tmp_path_factory.mktemp("hostile")) as gateway,
        httpx.Client(base_url=gateway.base_url, headers=headers, timeout=120) as bystander,
    ):
        attackers = [UploadClient(gateway.base_url, KEYS[f"attacker-{index}"]) for index in range(ATTACKERS)]
        try:
            yield Scene(gateway, attackers, bystander, warm_up(gateway, attackers[0], bystander))
        finally:
            for attacker in attackers:
                attacker.close()


def warm_up(gateway: GatewayProcess, attacker: UploadClient, bystander: httpx.Client) -> ServerFootprint:
    """An ordinary upload on each route and a speech request (the first of each loads what it needs once), then the
    server's footprint."""
    for route in ROUTES:
        accepted = attacker.upload(route, recording("wav"), "warm-up.wav")
        assert accepted.status_code == 201, accepted.text
        attacker.forget(route, accepted)
    speak(bystander)
    assert gateway.process is not None
    return ServerFootprint.of(gateway.process.pid)


def speak(client: httpx.Client, voice: str | dict[str, str] = "alloy") -> None:
    """A short speech request, which must be served in full: 200, and a WAV that PyAV decodes to the whole clip."""
    body = {"model": CLONING_MODEL, "input": TEXT, "voice": voice, "response_format": "wav"}
    response = client.post("/v1/audio/speech", json=body)
    assert response.status_code == 200, response.text
    audio = decode_audio(response.content, "wav")
    assert audio.duration == pytest.approx(len(TEXT) * SECONDS_PER_CHAR, abs=DURATION_TOLERANCE_S)


def assert_refused(response: httpx.Response, route: UploadRoute) -> None:
    """OpenAI's 400 for an upload that is not usable audio, naming the route's file field."""
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    expected = ("invalid_request_error", UPLOAD_ROUTES[route], "invalid_audio")
    assert (error["type"], error["param"], error["code"]) == expected, error
    assert error["message"]


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("name", list(HOSTILE_UPLOADS))
def test_a_hostile_upload_is_refused_while_another_tenant_is_served(
    name: str, route: UploadRoute, scene: Scene
) -> None:
    upload = HOSTILE_UPLOADS[name]()
    with ThreadPoolExecutor(2) as pool:
        refused = pool.submit(scene.attacker.upload, route, upload, f"{name}.bin")
        spoken = pool.submit(speak, scene.bystander)
        response = refused.result()
        spoken.result()
    scene.assert_unharmed()  # first: a refusal that cost GBs is the failure to report
    assert_refused(response, route)


def test_eight_hostile_uploads_at_once_are_refused_while_another_tenant_is_served(scene: Scene) -> None:
    volley = [
        (scene.attackers[index % ATTACKERS], ROUTES[index % len(ROUTES)], name, HOSTILE_UPLOADS[name]())
        for index, name in enumerate(VOLLEY)
    ]
    with ThreadPoolExecutor(len(volley) + 1) as pool:
        refused = [
            (route, pool.submit(attacker.upload, route, upload, f"{name}.bin"))
            for attacker, route, name, upload in volley
        ]
        spoken = pool.submit(speak, scene.bystander)
        responses = [(route, response.result()) for route, response in refused]
        spoken.result()
    scene.assert_unharmed()
    for route, response in responses:
        assert_refused(response, route)


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize(
    ("container", "channels", "rate"), MULTICHANNEL, ids=[f"{c}-{n}ch-{r // 1000}khz" for c, n, r in MULTICHANNEL]
)
def test_an_ordinary_multichannel_recording_is_accepted(
    container: Literal["wav", "flac"], channels: int, rate: int, route: UploadRoute, scene: Scene
) -> None:
    upload = multichannel_recording(container, channels, rate)
    accepted = scene.attacker.upload(route, upload, f"speech.{container}")
    assert accepted.status_code == 201, accepted.text
    made: dict[str, Any] = accepted.json()
    if route == "voices":
        assert (made["object"], made["type"]) == ("audio.voice", "audio_sample")
        speak(scene.attacker.http, {"id": made["id"]})
    else:
        assert made["object"] == "audio.voice_consent"
    scene.attacker.forget(route, accepted)
    scene.assert_unharmed()
