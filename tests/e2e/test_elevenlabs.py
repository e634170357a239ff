"""ElevenLabs' REST API (issue #34) through the official ``elevenlabs`` SDK, unchanged but for its base URL.

Three real processes: an open gateway (no tenants; it has espeak too, for the timestamps), and a front gateway with
tenants, API keys and JWTs whose ``remote`` engine is an engine node's. Every clip is the synthetic engine's tone,
decoded with PyAV (or as raw PCM and G.711): its sample rate is the format's, its length the text's
(``SECONDS_PER_CHAR`` a character, over the speed), its pitch the voice's.
"""

from __future__ import annotations

import base64
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import httpx
import jwt
import openai
import pytest
from elevenlabs import ElevenLabs
from elevenlabs.core.api_error import ApiError
from elevenlabs.errors import UnprocessableEntityError
from elevenlabs.types import (
    CharacterAlignmentResponseModel,
    GetVoicesResponse,
    GetVoicesV2Response,
    HttpValidationError,
    Model,
    StreamingAudioChunkWithTimestampsResponse,
    Voice,
    VoiceSettings,
)

from auth.keys import generate_api_key, hash_api_key
from engines.base import OPENAI_VOICES
from engines.synthetic import voice_frequency
from engines.timing import word_spans
from gateway.elevenlabs.formats import OutputFormat, encoding_of
from harness.gateway_process import GatewayProcess
from tests.audio_decode import DecodedAudio, decode_audio, decode_g711, dominant_frequency
from tests.espeak_events import TOLERANCE_S, espeak_events, first_events
from tests.tenancy import ADMIN_TOKEN, Admin

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from elevenlabs.core.request_options import RequestOptions

SECONDS_PER_CHAR = 0.02
TEXT = "The gateway speaks ElevenLabs now, in every format."  # 51 characters: 1.02 s of tone
SERVICE_TOKEN = "svc-" + uuid.uuid4().hex * 2
JWT_SECRET = "jwt-" + uuid.uuid4().hex
AUDIENCE = "tts-gateway-elevenlabs"
KEYS = {name: generate_api_key() for name in ("acme", "beta", "tones-only", "one-a-minute")}


def tones() -> dict[str, Any]:
    return {"kind": "synthetic", "workers": 2, "options": {"seconds_per_char": SECONDS_PER_CHAR}}


def tenant(name: str, **settings: Any) -> dict[str, Any]:
    return {"name": name, "api_key_sha256": [hash_api_key(KEYS[name])], **settings}


class Gateways:
    def __init__(self, workdir: Path) -> None:
        for folder in ("node", "front", "open"):
            (workdir / folder).mkdir()
        node = {"server": {"profile": "engine"}, "auth": {"service_token": SERVICE_TOKEN}}
        self.node = GatewayProcess(node | {"engines": {"tones": tones()}}, workdir / "node")
        remote = {
            "endpoints": [f"{self.node.base_url}/v1"],
            "model": "tones",
            "api_key": SERVICE_TOKEN,
            "probe_interval_s": 0.2,
        }
        front = {
            "auth": {
                "admin_token": ADMIN_TOKEN,
                "tenants": [
                    tenant("acme"),
                    tenant("beta"),
                    tenant("tones-only", models=["tones"]),
                    tenant("one-a-minute", limits={"requests_per_minute": 1}),
                ],
                "jwt": {"algorithm": "HS256", "secret": JWT_SECRET, "audience": AUDIENCE, "tenant_claim": "org"},
            },
            "engines": {"tones": tones(), "remote": {"kind": "openai", "options": remote}},
            "aliases": {"eleven_multilingual_v2": ["tones"], "eleven_flash_v2_5": ["remote"]},
        }
        self.front = GatewayProcess(front, workdir / "front")
        self.open = GatewayProcess(
            {
                "engines": {"tones": tones(), "espeak": {"kind": "espeak"}},
                "aliases": {"eleven_multilingual_v2": ["tones"]},
            },
            workdir / "open",
        )

    def start(self) -> None:
        with ThreadPoolExecutor(3) as starting:
            list(starting.map(GatewayProcess.start, [self.node, self.front, self.open]))
        self.front.wait_engine("remote", state="ready")

    def stop(self) -> None:
        for process in (self.open, self.front, self.node):
            if process.process is not None:
                process.stop()


@pytest.fixture(scope="module")
def gateways(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateways]:
    running = Gateways(tmp_path_factory.mktemp("elevenlabs"))
    try:
        running.start()
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def front(gateways: Gateways) -> GatewayProcess:
    return gateways.front


@pytest.fixture(scope="module")
def open_gateway(gateways: Gateways) -> GatewayProcess:
    return gateways.open


_OPEN_CLIENTS: list[httpx.Client] = []


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    """The SDK never closes the HTTP client it makes itself: each test's are given to it, and closed here."""
    yield
    while _OPEN_CLIENTS:
        _OPEN_CLIENTS.pop().close()


def sdk(gateway: GatewayProcess, api_key: str | None = None, **options: Any) -> ElevenLabs:
    """The SDK as a user makes it: the key goes out as ``xi-api-key``. The calls below do not retry, so that a
    refusal counts once."""
    http = httpx.Client(timeout=30)
    _OPEN_CLIENTS.append(http)
    return ElevenLabs(api_key=api_key, base_url=gateway.base_url, httpx_client=http, **options)


def xi(key: str) -> dict[str, str]:
    return {"xi-api-key": key}


NO_RETRIES: RequestOptions = {"max_retries": 0}


def convert(client: ElevenLabs, voice_id: str, text: str = TEXT, **fields: Any) -> bytes:
    return b"".join(client.text_to_speech.convert(voice_id, text=text, request_options=NO_RETRIES, **fields))


def stream(client: ElevenLabs, voice_id: str, text: str = TEXT, **fields: Any) -> bytes:
    return b"".join(client.text_to_speech.stream(voice_id, text=text, request_options=NO_RETRIES, **fields))


def decode(audio: bytes, output_format: OutputFormat) -> DecodedAudio:
    """What a client of ``output_format`` hears: raw PCM and G.711 at the format's rate, containers through PyAV."""
    encoding = encoding_of(output_format)
    codec, rate = encoding.codec.value, encoding.sample_rate
    if codec == "pcm":
        pcm = decode_audio(audio, "pcm")
        return DecodedAudio(pcm.samples, rate, 1, "pcm_s16le")
    if codec in {"ulaw", "alaw"}:
        return decode_g711(audio, "pcmu" if codec == "ulaw" else "pcma")
    return decode_audio(audio, codec)


def assert_tone(audio: DecodedAudio, text: str, voice: str, speed: float = 1.0, tolerance_s: float = 0.03) -> None:
    assert audio.duration == pytest.approx(len(text) * SECONDS_PER_CHAR / speed, abs=tolerance_s)
    # The FFT's bins are 1 / duration apart (about 1 Hz here); lossy codecs smear a little more.
    assert dominant_frequency(audio) == pytest.approx(voice_frequency(voice), abs=3)


def api_error(call: Any) -> ApiError:
    with pytest.raises(ApiError) as raised:
        call()
    return raised.value


def detail(error: ApiError) -> dict[str, Any]:
    assert isinstance(error.body, dict), error.body
    found: dict[str, Any] = error.body["detail"]
    assert set(found) == {"status", "message"}, found
    return found


def custom_voice(gateway: GatewayProcess, key: str, model: str = "tones", seed: int = 7) -> str:
    made = httpx.post(
        f"{gateway.base_url}/v1/audio/voices",
        json={"name": f"mine-{uuid.uuid4().hex[:6]}", "model": model, "seed": seed},
        headers={"authorization": f"Bearer {key}"},
        timeout=10,
    )
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


# ----------------------------------------------------------------------------------------------------------------
# voices


def test_voices_get_all_lists_the_built_in_voices_and_the_tenants_own(front: GatewayProcess) -> None:
    mine = custom_voice(front, KEYS["acme"])
    theirs = custom_voice(front, KEYS["beta"])

    voices = sdk(front, KEYS["acme"]).voices.get_all().voices
    raw = httpx.get(f"{front.base_url}/v1/voices", headers=xi(KEYS["acme"]), timeout=10).json()

    GetVoicesResponse.model_validate(raw)  # the SDK's own types, validated (the SDK itself only constructs them)
    by_id = {voice.voice_id: voice for voice in voices}
    assert set(OPENAI_VOICES) <= set(by_id)
    assert {by_id[name].category for name in OPENAI_VOICES} == {"premade"}
    assert by_id["nova"].labels == {"engines": "remote, tones"}  # both engines speak it
    assert by_id[mine].category == "cloned" and by_id[mine].is_owner
    assert by_id[mine].labels == {"engines": "tones"}
    assert theirs not in by_id  # another tenant's voice is never listed


def test_voices_search_pages_filters_and_counts(front: GatewayProcess) -> None:
    client = sdk(front, KEYS["acme"])
    mine = custom_voice(front, KEYS["acme"], seed=11)
    everything = {voice.voice_id for voice in client.voices.get_all().voices}

    seen: list[str] = []
    token: str | None = None
    while True:
        raw = httpx.get(
            f"{front.base_url}/v2/voices",
            params={"page_size": 4, **({"next_page_token": token} if token else {})},
            headers=xi(KEYS["acme"]),
            timeout=10,
        ).json()
        page = GetVoicesV2Response.model_validate(raw)
        assert len(page.voices) <= 4 and page.total_count == len(everything)
        seen += [voice.voice_id for voice in page.voices]
        if not page.has_more:
            assert page.next_page_token is None
            break
        token = page.next_page_token

    assert sorted(seen) == sorted(everything)  # every voice once
    assert [v.voice_id for v in client.voices.search(search="NOVA").voices] == ["nova"]
    cloned = client.voices.search(category="cloned", page_size=100).voices
    assert mine in {v.voice_id for v in cloned} and {v.category for v in cloned} == {"cloned"}
    assert {v.category for v in client.voices.search(voice_type="default", page_size=100).voices} == {"premade"}
    by_name = [v.name for v in client.voices.search(sort="name", sort_direction="desc", page_size=100).voices]
    assert by_name == sorted(by_name, key=str.lower, reverse=True)


def test_voices_get_answers_one_voice_or_voice_not_found(front: GatewayProcess) -> None:
    client = sdk(front, KEYS["acme"])
    mine = custom_voice(front, KEYS["acme"], seed=13)
    theirs = custom_voice(front, KEYS["beta"], seed=13)

    nova = client.voices.get("nova")
    raw = httpx.get(f"{front.base_url}/v1/voices/{mine}", headers=xi(KEYS["acme"]), timeout=10).json()

    assert (nova.voice_id, nova.category, nova.description) == ("nova", "premade", "520 Hz tone")
    assert Voice.model_validate(raw).category == "cloned"
    for unknown in ("nobody", theirs):
        error = api_error(lambda unknown=unknown: client.voices.get(unknown))
        assert (error.status_code, detail(error)["status"]) == (404, "voice_not_found")


# ----------------------------------------------------------------------------------------------------------------
# speech


@pytest.mark.parametrize("output_format", list(OutputFormat), ids=str)
def test_convert_in_every_output_format(open_gateway: GatewayProcess, output_format: OutputFormat) -> None:
    client = sdk(open_gateway, "anything")
    audio = convert(client, "coral", model_id="eleven_multilingual_v2", output_format=output_format)

    decoded = decode(audio, output_format)
    encoding = encoding_of(output_format)
    assert decoded.sample_rate == encoding.sample_rate
    lossy = encoding.codec.value in {"mp3", "opus"}
    assert_tone(decoded, TEXT, "coral", tolerance_s=0.1 if lossy else 0.03)
    if encoding.codec.value == "mp3":  # LAME's constant bit rate, frames and all
        assert encoding.kbps is not None
        assert len(audio) * 8 / decoded.duration == pytest.approx(encoding.kbps * 1000, rel=0.1)


@pytest.mark.parametrize(
    "output_format", [OutputFormat.PCM_16000, OutputFormat.ULAW_8000, OutputFormat.OPUS_48000_64], ids=str
)
def test_stream_in_pcm_ulaw_and_opus(open_gateway: GatewayProcess, output_format: OutputFormat) -> None:
    client = sdk(open_gateway, "anything")
    audio = stream(client, "echo", model_id="eleven_multilingual_v2", output_format=output_format)

    decoded = decode(audio, output_format)
    assert decoded.sample_rate == encoding_of(output_format).sample_rate
    assert_tone(decoded, TEXT, "echo", tolerance_s=0.1 if output_format.startswith("opus") else 0.03)


def test_the_default_format_and_model_are_elevenlabs(open_gateway: GatewayProcess) -> None:
    audio = convert(sdk(open_gateway, "anything"), "ash")  # mp3_44100_128 with eleven_multilingual_v2

    decoded = decode_audio(audio, "mp3")
    assert decoded.sample_rate == 44100
    assert_tone(decoded, TEXT, "ash", tolerance_s=0.1)


@pytest.mark.parametrize("speed", [0.7, 1.2])
def test_voice_settings_speed_changes_the_length_not_the_pitch(open_gateway: GatewayProcess, speed: float) -> None:
    settings = {"speed": speed, "stability": 0.3, "similarity_boost": 0.9, "style": 0.1, "use_speaker_boost": True}
    audio = stream(sdk(open_gateway, "anything"), "sage", output_format="pcm_24000", voice_settings=settings)

    assert_tone(decode(audio, OutputFormat.PCM_24000), TEXT, "sage", speed=speed)


def test_convert_answers_the_whole_audio_and_stream_streams_it(open_gateway: GatewayProcess) -> None:
    text = f"Whole or streamed {uuid.uuid4().hex[:8]}"
    with httpx.Client(base_url=open_gateway.base_url, timeout=10) as http:
        whole = http.post("/v1/text-to-speech/onyx?output_format=pcm_22050", json={"text": text})
        streamed = http.post("/v1/text-to-speech/onyx/stream?output_format=pcm_22050", json={"text": text + "!"})

    assert whole.status_code == streamed.status_code == 200
    assert int(whole.headers["content-length"]) == len(whole.content)
    assert "content-length" not in streamed.headers and streamed.headers["transfer-encoding"] == "chunked"
    assert (whole.headers["content-type"], whole.headers["x-character-count"]) == ("audio/pcm", str(len(text)))
    assert whole.headers["request-id"] == whole.headers["x-request-id"]
    assert_tone(decode(whole.content, OutputFormat.PCM_22050), text, "onyx")


def test_a_custom_voice_speaks_by_its_id(front: GatewayProcess) -> None:
    mine = custom_voice(front, KEYS["acme"], seed=21)
    audio = stream(sdk(front, KEYS["acme"]), mine, model_id="tones", output_format="pcm_24000")

    decoded = decode(audio, OutputFormat.PCM_24000)
    assert decoded.duration == pytest.approx(len(TEXT) * SECONDS_PER_CHAR, abs=0.03)
    assert dominant_frequency(decoded) == pytest.approx(voice_frequency("", "seed:21"), abs=3)


def test_through_two_tiers_the_node_speaks_for_the_front(gateways: Gateways) -> None:
    client = sdk(gateways.front, KEYS["acme"])
    mine = custom_voice(gateways.front, KEYS["acme"], model="remote", seed=5)
    with client.text_to_speech.with_raw_response.convert(
        "fable", text=TEXT, model_id="eleven_flash_v2_5", output_format="mp3_22050_32"
    ) as response:
        engine = response.headers["x-engine"]
        audio = b"".join(response.data)
    custom = stream(client, mine, model_id="eleven_flash_v2_5", output_format="pcm_16000")

    assert engine == "remote"
    decoded = decode(audio, OutputFormat.MP3_22050_32)
    assert decoded.sample_rate == 22050
    assert_tone(decoded, TEXT, "fable", tolerance_s=0.1)
    heard = decode(custom, OutputFormat.PCM_16000)
    assert heard.duration == pytest.approx(len(TEXT) * SECONDS_PER_CHAR, abs=0.03)
    assert dominant_frequency(heard) == pytest.approx(voice_frequency("", "seed:5"), abs=3)


# ----------------------------------------------------------------------------------------------------------------
# timestamps

MP3_FRAME_S = 1152 / 44100
"""One mp3 frame at 44.1 kHz: how far past the decoded audio a last character's end may reach (padding)."""
TIMED = [
    pytest.param("eleven_multilingual_v2", "coral", OutputFormat.MP3_44100_128, id="tones-mp3"),
    pytest.param("espeak", "nova", OutputFormat.PCM_16000, id="espeak-pcm"),
]


def assert_aligned(alignment: CharacterAlignmentResponseModel | None, text: str, duration: float) -> None:
    """The characters joined are the text; their times never go back; every end lies within the audio."""
    assert alignment is not None
    assert "".join(alignment.characters) == text
    starts, ends = alignment.character_start_times_seconds, alignment.character_end_times_seconds
    assert len(starts) == len(ends) == len(text)
    assert starts == sorted(starts) and ends == sorted(ends)
    assert all(0 <= start <= end for start, end in zip(starts, ends, strict=True))
    assert ends[-1] <= duration + MP3_FRAME_S


def assert_words_where_espeak_says(alignment: CharacterAlignmentResponseModel, text: str) -> None:
    """Each word's first character starts within 50 ms of espeak-ng's own event for it."""
    spans = word_spans(text)
    for index, seconds in first_events(text, espeak_events(text, "nova", 1.0)).items():
        start = alignment.character_start_times_seconds[spans[index][0]]
        assert abs(start - seconds) <= TOLERANCE_S, (text[slice(*spans[index])], start, seconds)


def joined(
    chunks: list[StreamingAudioChunkWithTimestampsResponse], output_format: OutputFormat
) -> tuple[bytes, CharacterAlignmentResponseModel]:
    """A stream's audio and its characters, joined as a client joins them: each line's characters start within the
    audio sent so far, their times counted from the start of the audio."""
    audio, characters, starts, ends = b"", [], [], []
    for chunk in chunks:
        piece = base64.b64decode(chunk.audio_base_64)
        if output_format.startswith("pcm"):
            assert len(piece) % 2 == 0  # whole samples
        audio += piece
        if (alignment := chunk.alignment) is not None:
            assert chunk.normalized_alignment == alignment  # the text is spoken as given
            if output_format.startswith("pcm"):
                assert max(alignment.character_start_times_seconds) <= decode(audio, output_format).duration + 0.01
            characters += alignment.characters
            starts += alignment.character_start_times_seconds
            ends += alignment.character_end_times_seconds
    return audio, CharacterAlignmentResponseModel(
        characters=characters, character_start_times_seconds=starts, character_end_times_seconds=ends
    )


@pytest.mark.parametrize(("model_id", "voice", "output_format"), TIMED)
def test_convert_and_stream_with_timestamps_align_every_character(
    open_gateway: GatewayProcess, model_id: str, voice: str, output_format: OutputFormat
) -> None:
    text = f"Every character has its time, {voice} says; the {output_format.split('_')[0]} stream agrees."
    client = sdk(open_gateway, "anything")
    timed: dict[str, Any] = {"model_id": model_id, "output_format": output_format, "request_options": NO_RETRIES}
    chunks = list(client.text_to_speech.stream_with_timestamps(voice, text=text, **timed))  # a miss: it speaks
    response = client.text_to_speech.with_raw_response.convert_with_timestamps(voice, text=text, **timed)
    cache, whole = response.headers["x-cache"], response.data  # the same request again: a hit
    again = list(client.text_to_speech.stream_with_timestamps(voice, text=text, **timed))  # a hit, streamed

    assert cache == "hit" and len(chunks) > 1
    audio, alignment = joined(chunks, output_format)
    duration = decode(audio, output_format).duration
    if model_id == "espeak":
        assert_words_where_espeak_says(alignment, text)
    else:
        assert_tone(decode(audio, output_format), text, voice, tolerance_s=0.1)
    assert_aligned(alignment, text, duration)
    # After a cache hit, whole or streamed: the same audio, the same times.
    assert decode(base64.b64decode(whole.audio_base_64), output_format).duration == pytest.approx(duration, abs=0.01)
    assert whole.alignment == whole.normalized_alignment == alignment
    assert joined(again, output_format) == (audio, alignment)


def test_with_timestamps_are_elevenlabs_errors_and_honour_speed(open_gateway: GatewayProcess) -> None:
    client = sdk(open_gateway, "anything")
    error = api_error(lambda: client.text_to_speech.convert_with_timestamps("nobody", text=TEXT))
    assert (error.status_code, detail(error)["status"]) == (404, "voice_not_found")
    text = "Slower speech, later times."
    slow = client.text_to_speech.convert_with_timestamps(
        "sage",
        text=text,
        output_format="pcm_24000",
        voice_settings=VoiceSettings(speed=0.8),
        request_options=NO_RETRIES,
    )
    audio = decode(base64.b64decode(slow.audio_base_64), OutputFormat.PCM_24000)
    assert audio.duration == pytest.approx(len(text) * SECONDS_PER_CHAR / 0.8, abs=0.03)
    assert_aligned(slow.alignment, text, audio.duration)
    assert slow.alignment is not None
    assert slow.alignment.character_end_times_seconds[-1] == pytest.approx(audio.duration, abs=0.01)


# ----------------------------------------------------------------------------------------------------------------
# models


def test_models_list_is_elevenlabs_for_its_sdk_and_openai_for_openais(front: GatewayProcess) -> None:
    models = sdk(front, KEYS["acme"]).models.list()
    raw = httpx.get(f"{front.base_url}/v1/models", headers=xi(KEYS["acme"]), timeout=10).json()
    with openai.OpenAI(base_url=f"{front.base_url}/v1", api_key=KEYS["acme"], max_retries=0) as client:
        openai_ids = [model.id for model in client.models.list()]

    assert isinstance(raw, list) and [Model.model_validate(entry).model_id for entry in raw] == openai_ids
    assert {model.model_id for model in models} == {"eleven_multilingual_v2", "eleven_flash_v2_5", "tones", "remote"}
    assert all(model.can_do_text_to_speech for model in models)
    assert [model.model_id for model in sdk(front, KEYS["tones-only"]).models.list()] == ["tones"]


# ----------------------------------------------------------------------------------------------------------------
# authentication


def test_a_key_works_as_xi_api_key_and_as_bearer_and_a_jwt_as_either(front: GatewayProcess) -> None:
    token = jwt.encode({"org": "acme", "aud": AUDIENCE, "exp": int(time.time()) + 300}, JWT_SECRET, algorithm="HS256")
    bearer = sdk(front, headers={"authorization": f"Bearer {KEYS['acme']}"})
    for client in (sdk(front, KEYS["acme"]), bearer, sdk(front, token)):
        audio = stream(client, "alloy", output_format="pcm_16000")
        assert_tone(decode(audio, OutputFormat.PCM_16000), TEXT, "alloy")


def test_a_wrong_or_missing_key_is_refused_as_elevenlabs_does(front: GatewayProcess) -> None:
    refused_before = front.refusals()[("credentials", 401, "invalid_api_key")]

    wrong = api_error(lambda: stream(sdk(front, generate_api_key()), "alloy"))
    missing = api_error(lambda: stream(sdk(front), "alloy"))
    listing = api_error(sdk(front, "not-a-key").voices.get_all)

    assert (wrong.status_code, detail(wrong)["status"]) == (401, "invalid_api_key")
    assert (missing.status_code, detail(missing)["status"]) == (401, "needs_authorization")
    assert (listing.status_code, detail(listing)["status"]) == (401, "invalid_api_key")
    # Refused keys count against the address's credential throttle as any other; a missing key guesses nothing.
    assert front.refusals()[("credentials", 401, "invalid_api_key")] == refused_before + 2


def test_a_revoked_key_is_refused_at_once(front: GatewayProcess) -> None:
    admin = Admin(front.base_url)
    try:
        record = admin.key("acme")
        client = sdk(front, str(record["key"]))
        assert "alloy" in {voice.voice_id for voice in client.voices.get_all().voices}
        admin.revoke(record)
        error = api_error(client.voices.get_all)
    finally:
        admin.close()

    assert (error.status_code, detail(error)["status"]) == (401, "invalid_api_key")


def test_a_gateway_without_tenants_takes_any_key_or_none(open_gateway: GatewayProcess) -> None:
    for client in (sdk(open_gateway, "anything"), sdk(open_gateway)):
        assert "nova" in {voice.voice_id for voice in client.voices.get_all().voices}
        assert_tone(decode(stream(client, "nova", output_format="pcm_8000"), OutputFormat.PCM_8000), TEXT, "nova")


# ----------------------------------------------------------------------------------------------------------------
# refusals


DIALOGUE = [{"text": "Hello.", "voice_id": "alloy"}, {"text": "Hi.", "voice_id": "nova"}]
STRING_SETTINGS = {"use_speaker_boost": "true", "stability": "0.5"}

BAD_REQUESTS: dict[str, tuple[str, dict[str, Any], list[Any]]] = {
    # name: (query, the body's fields beside a valid text, where the problem is)
    "empty text": ("", {"text": "  "}, ["body", "text"]),
    "text too long": ("", {"text": "a" * 4097}, ["body", "text"]),
    "speed out of range": ("", {"voice_settings": {"speed": 1.5}}, ["body", "voice_settings", "speed"]),
    "stability over 1": ("", {"voice_settings": {"stability": 2}}, ["body", "voice_settings", "stability"]),
    "negative seed": ("", {"seed": -1}, ["body", "seed"]),
    # What FastAPI's lax reading (ElevenLabs' server) cannot make an integer, a boolean or a string of.
    "fractional seed": ("", {"seed": 1.5}, ["body", "seed"]),
    "seed in words": ("", {"seed": "seven"}, ["body", "seed"]),
    "speaker boost of 2": (
        "",
        {"voice_settings": {"use_speaker_boost": 2}},
        ["body", "voice_settings", "use_speaker_boost"],
    ),
    "text a number": ("", {"text": 7}, ["body", "text"]),
    "four request ids": ("", {"previous_request_ids": ["a", "b", "c", "d"]}, ["body", "previous_request_ids"]),
    "bad language": ("", {"language_code": "english!"}, ["body", "language_code"]),
    "normalization": ("", {"apply_text_normalization": "sometimes"}, ["body", "apply_text_normalization"]),
    "audio effects": ("", {"audio_effects": {"pan": 1}}, ["body", "audio_effects"]),
    "unknown format": ("?output_format=mp3_44100_999", {}, ["query", "output_format"]),
    "latency over 4": ("?optimize_streaming_latency=9", {}, ["query", "optimize_streaming_latency"]),
}


@pytest.mark.parametrize("case", BAD_REQUESTS, ids=str)
def test_invalid_requests_get_elevenlabs_validation_errors(front: GatewayProcess, case: str) -> None:
    query, fields, where = BAD_REQUESTS[case]
    for route in ("", "/stream"):
        response = httpx.post(
            f"{front.base_url}/v1/text-to-speech/alloy{route}{query}",
            json={"text": "hi", **fields},
            headers=xi(KEYS["acme"]),
            timeout=10,
        )
        assert response.status_code == 422, response.text
        assert where in [problem.loc for problem in HttpValidationError.model_validate(response.json()).detail or []]


@pytest.mark.parametrize(
    "fields",
    [{"seed": "7"}, {"seed": True}, {"voice_settings": STRING_SETTINGS, "settings": STRING_SETTINGS}],
    ids=["seed as a string", "seed as a boolean", "settings as strings"],
)
def test_values_are_read_as_elevenlabs_fastapi_reads_them(front: GatewayProcess, fields: dict[str, Any]) -> None:
    """ElevenLabs' server is FastAPI, whose pydantic reads a body in its lax mode: a number or a boolean may come as
    its string, a boolean where a number is due; so do the gateway's ElevenLabs routes (OpenAI's refuse them). A
    dialogue's settings are ``settings``, a text-to-speech request's ``voice_settings``: each ignores the other."""
    for path, body in (
        ("text-to-speech/alloy", {"text": "hi"}),
        ("text-to-dialogue", {"inputs": DIALOGUE, "model_id": "tones"}),
    ):
        response = httpx.post(
            f"{front.base_url}/v1/{path}", json={**body, **fields}, headers=xi(KEYS["acme"]), timeout=10
        )
        assert response.status_code == 200, response.text


def test_a_speed_given_as_a_string_is_honoured(front: GatewayProcess) -> None:
    response = httpx.post(
        f"{front.base_url}/v1/text-to-speech/alloy?output_format=pcm_24000",
        json={"text": TEXT, "voice_settings": {"speed": "1.2"}},
        headers=xi(KEYS["acme"]),
        timeout=10,
    )
    assert response.status_code == 200, response.text
    assert_tone(decode(response.content, OutputFormat.PCM_24000), TEXT, "alloy", speed=1.2)


def test_bodies_that_are_not_json_or_missing_are_validation_errors(front: GatewayProcess) -> None:
    url = f"{front.base_url}/v1/text-to-speech/alloy"
    for content in (b"{not json", b""):
        response = httpx.post(url, content=content, headers=xi(KEYS["acme"]), timeout=10)
        assert response.status_code == 422, response.text
        assert HttpValidationError.model_validate(response.json()).detail


def test_the_sdk_raises_its_validation_error(front: GatewayProcess) -> None:
    with pytest.raises(UnprocessableEntityError) as raised:
        convert(sdk(front, KEYS["acme"]), "alloy", text="", model_id="tones")
    assert raised.value.status_code == 422


def test_unknown_voices_models_and_forbidden_models_get_elevenlabs_errors(front: GatewayProcess) -> None:
    acme, tones_only = sdk(front, KEYS["acme"]), sdk(front, KEYS["tones-only"])
    remote_voice = custom_voice(front, KEYS["acme"], model="remote", seed=9)
    cases = {
        "unknown built-in voice": (lambda: convert(acme, "nobody"), 404, "voice_not_found"),
        "unknown custom voice": (lambda: convert(acme, "voice_0000000000000000"), 404, "voice_not_found"),
        "unknown model": (lambda: convert(acme, "alloy", model_id="eleven_nonexistent"), 404, "model_not_found"),
        "a model not allowed": (lambda: convert(tones_only, "alloy"), 403, "model_not_allowed"),
        "a voice of another engine": (lambda: convert(acme, remote_voice, model_id="tones"), 400, "invalid_value"),
    }
    for name, (call, status_code, status) in cases.items():
        error = api_error(call)
        assert (error.status_code, detail(error)["status"]) == (status_code, status), name


def test_over_the_request_rate_is_429_with_retry_after(front: GatewayProcess) -> None:
    client = sdk(front, KEYS["one-a-minute"])
    convert(client, "alloy", text="the one request of this minute", output_format="pcm_16000")
    error = api_error(lambda: convert(client, "alloy", output_format="pcm_16000"))

    assert (error.status_code, detail(error)["status"]) == (429, "rate_limit_exceeded")
    assert error.headers is not None and int(error.headers["retry-after"]) >= 1
