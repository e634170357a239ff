"""Custom voices from recordings, end to end: two gateway replicas on one real redis-server, driven by the official
OpenAI SDK (``client.audio.voice_consents``, ``client.audio.voices``), httpx for SSE and the realtime WebSocket.

consent -> voice -> speech in every format (decoded by PyAV), SSE and realtime -> delete; then every refusal, each an
OpenAI-shaped 4xx. The synthetic engine clones deterministically: its speaker is a hash of the PCM it was given, so
each test knows the tone the voice must speak with, and so that the gateway handed the engine the decoded sample.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import httpx
import openai
import pytest
import redis
from websockets.asyncio.client import connect

from engines.synthetic import voice_frequency
from gateway.audio.samples import MAX_RECORDING_BYTES, SAMPLE_RATE, decode_recording
from harness.gateway_process import GatewayProcess
from harness.recordings import CONTAINERS, recording, tone
from tests.audio_decode import SPEECH_FORMATS, decode_audio, dominant_frequency
from tests.starting import start_together, stop_together

if TYPE_CHECKING:
    from collections.abc import Iterator

    from openai.types.audio.speech_create_params import VoiceID

    from tests.redis_server import RedisServer

ADMIN_TOKEN = "admin-" + uuid.uuid4().hex
MAX_VOICES = 3
MAX_CONSENTS = 3
SECONDS_PER_CHAR = 0.02
TRANSCRIPT = "This is my voice, and I am glad to lend it."
CONTENT_TYPES = {
    "mp3": "audio/mpeg",
    "wav": "audio/wav",
    "ogg": "audio/ogg",
    "ogg-vorbis": "audio/ogg",
    "aac": "audio/aac",
    "flac": "audio/flac",
    "webm": "audio/webm",
    "mp4": "audio/mp4",
}


def gateway_config(redis_url: str) -> dict[str, Any]:
    return {
        "redis_url": redis_url,
        "limits": {"fail_mode": "open"},
        "auth": {"admin_token": ADMIN_TOKEN},
        "voices": {"max_per_tenant": MAX_VOICES, "max_consents_per_tenant": MAX_CONSENTS},
        "engines": {
            "synthetic": {"kind": "synthetic", "workers": 2, "options": {"seconds_per_char": SECONDS_PER_CHAR}},
            "espeak": {"kind": "espeak"},
        },
        "aliases": {"tts-1": ["synthetic"]},
    }


@pytest.fixture(scope="module")
def replicas(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[GatewayProcess]]:
    redis_server.flush()
    processes = [
        GatewayProcess(gateway_config(redis_server.url), tmp_path_factory.mktemp(f"voices{i}")) for i in range(2)
    ]
    start_together(processes)
    yield processes
    stop_together(processes)


class Tenant:
    """A fresh tenant with a key, and an SDK client per replica."""

    def __init__(self, replicas: list[GatewayProcess]) -> None:
        self.name = f"t-{uuid.uuid4().hex[:10]}"
        admin = {"authorization": f"Bearer {ADMIN_TOKEN}"}
        base = replicas[0].base_url
        assert httpx.post(f"{base}/admin/tenants", json={"name": self.name}, headers=admin).status_code == 201
        self.key = httpx.post(f"{base}/admin/tenants/{self.name}/keys", headers=admin).json()["key"]
        self.sdks = [
            openai.OpenAI(base_url=f"{replica.base_url}/v1", api_key=self.key, max_retries=0, timeout=30)
            for replica in replicas
        ]
        self.headers = {"authorization": f"Bearer {self.key}"}

    def consent(self, replica: int = 0, kind: str = "mp3") -> str:
        return self.sdks[replica].audio.voice_consents.create(name="Ada", language="en-US", recording=upload(kind)).id

    def voice(self, consent: str, sample: bytes, name: str = "ada", replica: int = 0, **extra: str) -> Any:
        return self.sdks[replica].audio.voices.create(
            name=name,
            audio_sample=("sample.wav", sample, "audio/wav"),
            consent=consent,
            extra_body={"transcript": TRANSCRIPT, "model": "synthetic", **extra},
        )

    def close(self) -> None:
        for sdk in self.sdks:
            sdk.close()


@pytest.fixture
def tenants(replicas: list[GatewayProcess]) -> Iterator[list[Tenant]]:
    made = [Tenant(replicas), Tenant(replicas)]
    yield made
    for tenant in made:
        tenant.close()


def upload(kind: str, pcm: Any = None) -> tuple[str, bytes, str]:
    return f"recording.{kind}", recording(kind, pcm), CONTENT_TYPES[kind]


def synthetic_tone(sample: bytes, transcript: str = TRANSCRIPT) -> tuple[float, str]:
    """The tone the synthetic engine speaks a voice from ``sample`` with, and its speaker's SHA-256: the engine hashes
    the 24 kHz mono PCM the gateway decoded (``engines/synthetic.py``)."""
    digest = hashlib.sha256(f"{SAMPLE_RATE}:{transcript}:".encode())
    digest.update(decode_recording(sample).pcm)
    speaker = "sample:" + digest.hexdigest()[:32]
    return voice_frequency("", speaker), hashlib.sha256(speaker.encode()).hexdigest()


def assert_openai_error(error: openai.APIStatusError, status: int, param: str | None, code: str | None) -> None:
    assert error.status_code == status, error.response.text
    body = error.response.json()["error"]
    assert set(body) == {"message", "type", "param", "code"}
    assert body["type"] == "invalid_request_error"
    assert (body["param"], body["code"]) == (param, code), body
    assert body["message"]


# ------------------------------------------------------------------ consent recordings
@pytest.mark.parametrize("kind", sorted(CONTAINERS))
def test_a_consent_in_every_container_is_kept_as_ogg_opus(
    kind: str, tenants: list[Tenant], redis_server: RedisServer
) -> None:
    tenant = tenants[0]
    uploaded = upload(kind, tone(4.0, 330.0))
    consent = tenant.sdks[0].audio.voice_consents.create(name="Ada Lovelace", language="en-GB", recording=uploaded)
    assert consent.id.startswith("cons_")
    assert (consent.object, consent.name, consent.language) == ("audio.voice_consent", "Ada Lovelace", "en-GB")
    assert tenant.sdks[1].audio.voice_consents.retrieve(consent.id) == consent  # every replica knows it
    client = redis.Redis(port=redis_server.port)
    kept = client.hget(f"tts:consents:{{{tenant.name}}}:recordings", consent.id)
    client.connection_pool.disconnect()
    assert isinstance(kept, bytes)
    assert kept != uploaded[1]
    assert kept.startswith(b"OggS")
    audit = decode_audio(kept, "opus")
    assert (audit.codec, audit.channels) == ("opus", 1)
    assert audit.duration == pytest.approx(4.0, abs=0.1)
    assert dominant_frequency(audit) == pytest.approx(330.0, abs=3)
    assert len(kept) < 4 * 16000 / 8 * 1.3  # 16 kbit/s


def test_consents_are_listed_a_page_at_a_time_renamed_and_deleted(tenants: list[Tenant]) -> None:
    tenant = tenants[0]
    made = [tenant.consent(replica=i % 2) for i in range(MAX_CONSENTS)]
    sdk = tenant.sdks[1]
    first = sdk.audio.voice_consents.list(limit=2)
    assert [c.id for c in first.data] == made[:2]
    assert first.has_more
    raw = httpx.get(f"{first._client.base_url}audio/voice_consents", params={"limit": 2}, headers=tenant.headers)
    assert {k: raw.json()[k] for k in ("object", "first_id", "last_id", "has_more")} == {
        "object": "list",
        "first_id": made[0],
        "last_id": made[1],
        "has_more": True,
    }
    assert [c.id for c in sdk.audio.voice_consents.list(limit=2)] == made  # the SDK follows the cursor
    renamed = tenant.sdks[0].audio.voice_consents.update(made[0], name="Countess of Lovelace")
    assert renamed.name == "Countess of Lovelace"
    assert sdk.audio.voice_consents.retrieve(made[0]).name == "Countess of Lovelace"
    deleted = sdk.audio.voice_consents.delete(made[0])
    assert (deleted.id, deleted.object, deleted.deleted) == (made[0], "audio.voice_consent", True)
    with pytest.raises(openai.NotFoundError):
        tenant.sdks[0].audio.voice_consents.retrieve(made[0])
    assert [c.id for c in sdk.audio.voice_consents.list()] == made[1:]


# ------------------------------------------------------------------ a voice from a sample, speaking everywhere
def test_a_voice_from_a_sample_speaks_in_every_format_by_id_and_by_name(tenants: list[Tenant]) -> None:
    tenant = tenants[0]
    sample = recording("wav", tone(5.0, 523.0))
    voice = tenant.voice(tenant.consent(), sample, name="narrator", replica=1)
    frequency, speaker_sha256 = synthetic_tone(sample)
    assert voice.id.startswith("voice_")
    assert (voice.object, voice.name, voice.type) == ("audio.voice", "narrator", "audio_sample")
    assert voice.model_extra is not None
    assert voice.model_extra["speaker_sha256"] == speaker_sha256
    text = "Speaking with a voice made from a sample."
    choices: tuple[tuple[int, VoiceID | str], ...] = ((0, {"id": voice.id}), (1, "narrator"))
    for fmt in SPEECH_FORMATS:
        for replica, chosen in choices:
            speech = tenant.sdks[replica].audio.speech.create(
                model="synthetic", voice=chosen, input=text, response_format=fmt
            )
            audio = decode_audio(speech.read(), fmt)
            assert audio.duration == pytest.approx(len(text) * SECONDS_PER_CHAR, abs=0.15), fmt
            assert dominant_frequency(audio) == pytest.approx(frequency, abs=3), fmt
    listed = httpx.get(f"{tenant.sdks[0].base_url}audio/voices", headers=tenant.headers).json()["data"]
    assert [v["type"] for v in listed if v["id"] == voice.id] == ["audio_sample"]


def test_a_voice_from_a_sample_streams_as_server_sent_events(
    replicas: list[GatewayProcess], tenants: list[Tenant]
) -> None:
    tenant = tenants[0]
    sample = recording("ogg", tone(3.0, 700.0))
    voice = tenant.voice(tenant.consent(), sample)
    body = {"model": "synthetic", "input": "Events, one after another.", "voice": {"id": voice.id}}
    with httpx.stream(
        "POST",
        f"{replicas[1].base_url}/v1/audio/speech",
        json={**body, "response_format": "pcm", "stream_format": "sse"},
        headers=tenant.headers,
        timeout=30,
    ) as response:
        assert response.status_code == 200
        events = [json.loads(line[5:]) for line in response.iter_lines() if line.startswith("data:")]
    assert events[-1]["type"] == "speech.audio.done"
    pcm = b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta")
    assert dominant_frequency(decode_audio(pcm, "pcm")) == pytest.approx(synthetic_tone(sample)[0], abs=3)


async def test_a_voice_from_a_sample_speaks_on_the_realtime_socket(
    replicas: list[GatewayProcess], tenants: list[Tenant]
) -> None:
    tenant = tenants[0]
    sample = recording("flac", tone(3.0, 800.0))
    voice = await asyncio.to_thread(tenant.voice, await asyncio.to_thread(tenant.consent), sample)
    url = replicas[0].base_url.replace("http://", "ws://") + "/v1/audio/speech/stream"
    audio = b""
    async with connect(url, additional_headers=tenant.headers) as socket:
        session = {"model": "synthetic", "voice": {"id": voice.id}, "response_format": "pcm"}
        for event in (
            {"type": "session.update", "session": session},
            {"type": "input.append", "text": "A sentence spoken live. "},
            {"type": "session.close"},
        ):
            await socket.send(json.dumps(event))
        async for message in socket:
            event = json.loads(message)
            assert event["type"] != "error", event
            if event["type"] == "audio.delta":
                audio += base64.b64decode(event["audio"])
    assert dominant_frequency(decode_audio(audio, "pcm")) == pytest.approx(synthetic_tone(sample)[0], abs=3)


def test_a_deleted_voice_is_gone_everywhere_and_its_consent_may_go_then(tenants: list[Tenant]) -> None:
    tenant = tenants[0]
    consent = tenant.consent()
    voice = tenant.voice(consent, recording("wav"))
    with pytest.raises(openai.BadRequestError) as in_use:
        tenant.sdks[1].audio.voice_consents.delete(consent)  # the evidence of a voice that still exists
    assert_openai_error(in_use.value, 400, "consent_id", "consent_in_use")
    deleted = tenant.sdks[1].audio.voices.delete(voice.id)
    assert (deleted.id, deleted.object, deleted.deleted) == (voice.id, "audio.voice.deleted", True)
    for sdk in tenant.sdks:
        with pytest.raises(openai.NotFoundError) as gone:
            sdk.audio.speech.create(model="synthetic", voice={"id": voice.id}, input="still there?")
        assert_openai_error(gone.value, 404, "voice", "voice_not_found")
    with pytest.raises(openai.NotFoundError):
        tenant.sdks[0].audio.voices.delete(voice.id)
    assert tenant.sdks[0].audio.voice_consents.delete(consent).deleted


def test_a_voice_made_again_under_its_name_is_not_heard_from_the_cache(tenants: list[Tenant]) -> None:
    tenant = tenants[0]
    consent = tenant.consent()
    text = f"Who is speaking? {uuid.uuid4().hex}"
    heard = []
    for pitch in (440.0, 880.0):
        sample = recording("wav", tone(3.0, pitch))
        voice = tenant.voice(consent, sample, name="narrator")
        raw = tenant.sdks[0].audio.speech.with_raw_response.create(
            model="synthetic", voice="narrator", input=text, response_format="wav"
        )
        again = tenant.sdks[1].audio.speech.with_raw_response.create(
            model="synthetic", voice="narrator", input=text, response_format="wav"
        )
        assert (raw.headers["x-cache"], again.headers["x-cache"]) == ("miss", "hit")
        heard.append(dominant_frequency(decode_audio(raw.content, "wav")))
        assert heard[-1] == pytest.approx(synthetic_tone(sample)[0], abs=3)
        tenant.sdks[1].audio.voices.delete(voice.id)
    assert heard[0] != pytest.approx(heard[1], abs=3)


def test_the_json_form_still_makes_voices_beside_samples(tenants: list[Tenant]) -> None:
    tenant = tenants[0]
    url = f"{tenant.sdks[0].base_url}audio/voices"
    made = httpx.post(url, json={"name": "seeded", "model": "synthetic", "seed": 7}, headers=tenant.headers)
    assert made.status_code == 201, made.text
    assert {k: made.json()[k] for k in ("object", "name", "type")} == {
        "object": "audio.voice",
        "name": "seeded",
        "type": "seed",
    }
    speech = tenant.sdks[1].audio.speech.create(
        model="synthetic", voice="seeded", input="seeded", response_format="wav"
    )
    assert dominant_frequency(decode_audio(speech.read(), "wav")) == pytest.approx(voice_frequency("", "seed:7"), abs=3)


# ------------------------------------------------------------------ refusals: each an OpenAI-shaped 4xx
def test_a_made_up_or_another_tenants_consent_makes_no_voice(tenants: list[Tenant]) -> None:
    owner, other = tenants
    theirs = owner.consent()
    for consent in ("cons_000000000000000000000000", theirs):
        with pytest.raises(openai.NotFoundError) as refused:
            other.voice(consent, recording("wav"))
        assert_openai_error(refused.value, 404, "consent", "consent_not_found")
        with pytest.raises(openai.NotFoundError):
            other.sdks[1].audio.voice_consents.retrieve(consent)
    with pytest.raises(openai.NotFoundError):
        other.sdks[0].audio.voice_consents.update(theirs, name="mine now")
    with pytest.raises(openai.NotFoundError):
        other.sdks[0].audio.voice_consents.delete(theirs)
    assert owner.sdks[1].audio.voice_consents.retrieve(theirs).name == "Ada"
    assert theirs not in [c.id for c in other.sdks[0].audio.voice_consents.list()]


def test_another_tenants_voice_id_is_not_found(tenants: list[Tenant]) -> None:
    owner, other = tenants
    voice = owner.voice(owner.consent(), recording("wav"))
    with pytest.raises(openai.NotFoundError) as refused:
        other.sdks[1].audio.speech.create(model="synthetic", voice={"id": voice.id}, input="borrowed")
    assert_openai_error(refused.value, 404, "voice", "voice_not_found")
    with pytest.raises(openai.NotFoundError):
        other.sdks[0].audio.voices.delete(voice.id)
    assert httpx.get(f"{other.sdks[0].base_url}audio/voices/{voice.id}", headers=other.headers).status_code == 404
    speech = owner.sdks[0].audio.speech.create(model="synthetic", voice={"id": voice.id}, input="still mine")
    assert speech.read()


def _over(limit: int) -> bytes:
    """A WAV file of a tone, padded to ``limit`` bytes: a valid start, too much in all."""
    start = recording("wav")
    return start + b"\x00" * (limit - len(start))


@pytest.mark.parametrize(
    ("sample", "status", "code"),
    [
        (b"%PDF-1.7 this is not a recording at all" * 50, 400, "invalid_audio"),
        (recording("mp3", tone(0.4)), 400, "audio_too_short"),
        (recording("mp3", tone(31.0)), 400, "audio_too_long"),
        (_over(MAX_RECORDING_BYTES + 1), 400, "file_too_large"),
    ],
    ids=["not-audio", "too-short", "too-long", "over-10-mib"],
)
def test_a_sample_that_is_no_usable_recording_is_refused(
    sample: bytes, status: int, code: str, tenants: list[Tenant]
) -> None:
    tenant = tenants[0]
    consent = tenant.consent()
    with pytest.raises(openai.APIStatusError) as refused:
        tenant.voice(consent, sample)
    assert_openai_error(refused.value, status, "audio_sample", code)
    with pytest.raises(openai.APIStatusError) as consent_refused:
        tenant.sdks[1].audio.voice_consents.create(name="x", language="en", recording=("r.wav", sample, "audio/wav"))
    assert_openai_error(consent_refused.value, status, "recording", code)


def test_a_body_over_the_upload_limit_is_413(tenants: list[Tenant]) -> None:
    tenant = tenants[0]
    with pytest.raises(openai.APIStatusError) as refused:
        tenant.sdks[0].audio.voice_consents.create(
            name="x", language="en", recording=("r.wav", _over(12 * 1024 * 1024), "audio/wav")
        )
    assert refused.value.status_code == 413
    assert set(refused.value.response.json()["error"]) == {"message", "type", "param", "code"}


def test_a_sample_without_its_transcript_is_refused_naming_it(tenants: list[Tenant]) -> None:
    tenant = tenants[0]
    with pytest.raises(openai.BadRequestError) as refused:
        tenant.sdks[0].audio.voices.create(
            name="mute",
            audio_sample=("s.wav", recording("wav"), "audio/wav"),
            consent=tenant.consent(),
            extra_body={"model": "synthetic"},
        )
    assert_openai_error(refused.value, 400, "transcript", "invalid_value")
    assert "transcript" in refused.value.message


def test_an_engine_that_cannot_clone_and_prompt_voices_are_refused(tenants: list[Tenant]) -> None:
    tenant = tenants[0]
    consent = tenant.consent()
    with pytest.raises(openai.BadRequestError) as espeak:
        tenant.voice(consent, recording("wav"), model="espeak")
    assert_openai_error(espeak.value, 400, "model", "voice_cloning_unsupported")
    with pytest.raises(openai.BadRequestError) as prompt:
        tenant.sdks[1].audio.voices.create(name="designed", prompt="a warm baritone", type="prompt")
    assert_openai_error(prompt.value, 400, "type", "unsupported_value")
    assert not [
        v
        for v in httpx.get(f"{tenant.sdks[0].base_url}audio/voices", headers=tenant.headers).json()["data"]
        if v["custom"]
    ]


def test_the_caps_hold_across_replicas(tenants: list[Tenant]) -> None:
    tenant = tenants[0]

    def consent(index: int) -> str | int:
        try:
            return tenant.consent(replica=index % 2, kind="wav")
        except openai.BadRequestError as refused:
            assert_openai_error(refused, 400, None, "consent_limit_reached")
            return 400

    with ThreadPoolExecutor(6) as pool:
        consents = list(pool.map(consent, range(6)))
    made = [c for c in consents if isinstance(c, str)]
    assert len(made) == MAX_CONSENTS
    sample = recording("wav")

    def voice(index: int) -> str | int:
        try:
            return str(tenant.voice(made[0], sample, name=f"v{index}", replica=index % 2).id)
        except openai.BadRequestError as refused:
            assert_openai_error(refused, 400, None, "voice_limit_reached")
            return 400

    with ThreadPoolExecutor(6) as pool:
        voices = list(pool.map(voice, range(6)))
    assert sum(isinstance(v, str) for v in voices) == MAX_VOICES


def test_deleting_a_tenant_forgets_its_consents(replicas: list[GatewayProcess], redis_server: RedisServer) -> None:
    tenant = Tenant(replicas)
    try:
        tenant.consent()
        admin = {"authorization": f"Bearer {ADMIN_TOKEN}"}
        assert httpx.delete(f"{replicas[1].base_url}/admin/tenants/{tenant.name}", headers=admin).status_code == 200
        client = redis.Redis(port=redis_server.port)
        assert not client.keys(f"tts:consents:{{{tenant.name}}}*")
        client.connection_pool.disconnect()
        assert httpx.post(f"{replicas[0].base_url}/admin/tenants", json={"name": tenant.name}, headers=admin).is_success
        key = httpx.post(f"{replicas[0].base_url}/admin/tenants/{tenant.name}/keys", headers=admin).json()["key"]
        listing = httpx.get(
            f"{replicas[1].base_url}/v1/audio/voice_consents", headers={"authorization": f"Bearer {key}"}
        )
        assert listing.json()["data"] == []
    finally:
        tenant.close()
