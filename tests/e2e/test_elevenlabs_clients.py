"""What ElevenLabs' clients send as they are written (issue #49): the v3 and v4 model ids, ElevenLabs' premade voice
ids and the operator's voice aliases, through the official ElevenLabs and OpenAI SDKs against a real gateway.

The synthetic engine speaks each built-in voice as its own tone (``voice_frequency``): the pitch of the audio says
which voice spoke.
"""

from __future__ import annotations

import base64
import json
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import httpx
import openai
import pytest
from elevenlabs import ElevenLabs
from elevenlabs.core.api_error import ApiError
from websockets.asyncio.client import connect

from auth.keys import generate_api_key, hash_api_key
from engines.synthetic import voice_frequency
from harness.gateway_process import GatewayProcess
from tests.audio_decode import DecodedAudio, decode_audio, dominant_frequency
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator

KEYS = {name: generate_api_key() for name in ("acme", "beta", "gamma")}
NEW_MODELS = ("eleven_v3", "eleven_v3_conversational", "eleven_v4", "eleven_v4_turbo")
AUDIO_BUDGET = {"audio_seconds_per_month": 3}
"""Gamma's only budget: 150 characters of the tones engine (0.02 s each)."""
#: The premade ids clients default to, and the voice each speaks here (docs/elevenlabs.md).
PREMADE = {"21m00Tcm4TlvDq8ikWAM": "alloy", "hpp4J3VqNfWAUOO0d1Us": "shimmer", "JBFqnCBsd6RMkjVDRZzb": "fable"}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    config = {
        "auth": {
            "tenants": [
                {"name": "acme", "api_key_sha256": [hash_api_key(KEYS["acme"])]},
                {
                    "name": "beta",
                    "api_key_sha256": [hash_api_key(KEYS["beta"])],
                    "limits": {"characters_per_minute": 5000, "requests_per_minute": 100},
                    # The tenant's own aliases win over the configuration's and the premade table.
                    "voice_aliases": {"JBFqnCBsd6RMkjVDRZzb": "nova", "narrator": "echo"},
                },
                {"name": "gamma", "api_key_sha256": [hash_api_key(KEYS["gamma"])], "limits": AUDIO_BUDGET},
            ]
        },
        "voices": {"aliases": {"narrator": "sage"}},
        # espeak keeps the built-in aliases (ElevenLabs' model ids among them); tones says by its pitch who spoke.
        "engines": {
            "espeak": {"kind": "espeak"},
            "tones": {"kind": "synthetic", "options": {"seconds_per_char": 0.02}},
        },
    }
    with GatewayProcess(config, tmp_path_factory.mktemp("elevenlabs-clients")) as process:
        yield process


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    """The SDKs' connections, closed with the module (a client of their own would be left to the garbage collector)."""
    with httpx.Client(timeout=30) as client:
        yield client


def elevenlabs(gateway: GatewayProcess, http: httpx.Client, tenant: str = "acme") -> ElevenLabs:
    return ElevenLabs(api_key=KEYS[tenant], base_url=gateway.base_url, httpx_client=http)


@pytest.fixture(scope="module")
def openai_client(gateway: GatewayProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=KEYS["acme"]) as client:
        yield client


def pcm(raw: bytes) -> DecodedAudio:
    return decode_audio(raw, "pcm")  # 24 kHz, as both routes were asked for


def spoken_by(gateway: GatewayProcess, http: httpx.Client, voice_id: str, tenant: str = "acme") -> float:
    """The pitch of ``voice_id`` as the ElevenLabs SDK's ``convert`` has the tones engine say it."""
    chunks = elevenlabs(gateway, http, tenant).text_to_speech.convert(
        voice_id, text="Which voice is this one?", model_id="tones", output_format="pcm_24000"
    )
    return dominant_frequency(pcm(b"".join(chunks)))


# ------------------------------------------------------------------ models


def test_the_v3_and_v4_ids_are_in_both_model_lists(
    gateway: GatewayProcess, http: httpx.Client, openai_client: openai.OpenAI
) -> None:
    ours = {model.model_id for model in elevenlabs(gateway, http).models.list()}
    theirs = {model.id for model in openai_client.models.list()}
    assert set(NEW_MODELS) <= ours
    assert set(NEW_MODELS) <= theirs


@pytest.mark.parametrize("model", ["eleven_v3", "eleven_v4_turbo"])
async def test_the_v3_and_v4_ids_speak_on_the_stream_input_socket(gateway: GatewayProcess, model: str) -> None:
    url = gateway.base_url.replace("http://", "ws://")
    url += f"/v1/text-to-speech/JBFqnCBsd6RMkjVDRZzb/stream-input?model_id={model}&output_format=pcm_24000"
    received: list[dict[str, Any]] = []
    async with connect(url, additional_headers={"xi-api-key": KEYS["acme"]}) as socket:
        for text in (" ", "A socket in version three.", ""):
            await socket.send(json.dumps({"text": text}))
        async for message in socket:
            received.append(json.loads(message))
    audio = b"".join(base64.b64decode(m["audio"]) for m in received if m.get("audio"))
    assert len(audio) > 24000  # espeak-ng said the sentence: over half a second
    assert received[-1].get("isFinal") is True


# ------------------------------------------------------------------ voices


@pytest.mark.parametrize(("voice_id", "voice"), PREMADE.items())
def test_the_premade_ids_clients_default_to_speak_a_stable_voice(
    gateway: GatewayProcess, http: httpx.Client, voice_id: str, voice: str
) -> None:
    assert spoken_by(gateway, http, voice_id) == pytest.approx(voice_frequency(voice), abs=3)


def test_litellms_alloy_speaks_alloy(gateway: GatewayProcess, http: httpx.Client, openai_client: openai.OpenAI) -> None:
    """LiteLLM's ``elevenlabs/`` provider sends OpenAI's ``alloy`` as Rachel's id, on ElevenLabs' route (what the
    SDK's ``convert`` sends too), and OpenAI's callers may name the id as well: alloy's voice either way."""
    assert spoken_by(gateway, http, "21m00Tcm4TlvDq8ikWAM") == pytest.approx(voice_frequency("alloy"), abs=3)
    audio = openai_client.audio.speech.create(
        model="tones", voice="21m00Tcm4TlvDq8ikWAM", input="LiteLLM's alloy.", response_format="pcm"
    )
    assert dominant_frequency(pcm(audio.content)) == pytest.approx(voice_frequency("alloy"), abs=3)


def test_aliases_of_the_configuration_and_of_the_tenant(gateway: GatewayProcess, http: httpx.Client) -> None:
    assert spoken_by(gateway, http, "narrator") == pytest.approx(voice_frequency("sage"), abs=3)  # configured
    assert spoken_by(gateway, http, "narrator", "beta") == pytest.approx(voice_frequency("echo"), abs=3)  # the tenant's
    assert spoken_by(gateway, http, "JBFqnCBsd6RMkjVDRZzb", "beta") == pytest.approx(voice_frequency("nova"), abs=3)


# ------------------------------------------------------------------ account


def test_the_subscription_is_the_tenants_characters_per_minute(gateway: GatewayProcess, http: httpx.Client) -> None:
    text = "Counted against the minute."
    client = elevenlabs(gateway, http, "beta")
    b"".join(client.text_to_speech.convert("alloy", text=text, model_id="tones", output_format="pcm_24000"))
    subscription = client.user.subscription.get()
    assert (subscription.character_limit, subscription.status) == (5000, "active")
    assert len(text) <= subscription.character_count < 5000
    assert subscription.next_character_count_reset_unix is not None
    assert 0 < subscription.next_character_count_reset_unix - time.time() <= 61
    assert subscription.voice_slots_used == 0 and subscription.voice_limit == 20
    user = client.user.get()
    assert user.user_id == "beta" and user.subscription.character_limit == 5000


def test_without_a_limit_the_count_is_every_character_spoken(gateway: GatewayProcess, http: httpx.Client) -> None:
    client = elevenlabs(gateway, http, "acme")
    before = client.user.subscription.get().character_count
    b"".join(client.text_to_speech.convert("alloy", text="Twenty characters ok", model_id="tones"))
    after = client.user.subscription.get()
    assert after.character_limit == 2**31 - 1
    assert after.character_count - before == 20


def test_a_spent_audio_budget_leaves_the_subscription_no_characters(
    gateway: GatewayProcess, http: httpx.Client
) -> None:
    """ElevenLabs' subscription counts characters only: a spent audio budget shows as a count at its limit, so that a
    client checking its quota sees none left, until the month's end (when its requests are served again)."""
    client = elevenlabs(gateway, http, "gamma")
    month_end = datetime.fromtimestamp(time.time(), UTC).replace(day=28) + timedelta(days=4)
    next_month = int(datetime(month_end.year, month_end.month, 1, tzinfo=UTC).timestamp())
    text = "An audio budget is spent by what is heard. " * 4  # 172 characters: 3.44 s of tones
    b"".join(client.text_to_speech.convert("alloy", text=text[:60], model_id="tones", output_format="pcm_24000"))
    before = client.user.subscription.get()
    assert (before.character_count, before.character_limit) == (60, 2**31 - 1)
    assert (before.character_refresh_period, before.next_character_count_reset_unix) == ("monthly_period", next_month)

    b"".join(client.text_to_speech.convert("alloy", text=text, model_id="tones", output_format="pcm_24000"))

    def spent() -> bool:  # the audio is counted once spoken, off the response's path
        subscription = client.user.subscription.get()
        return bool(subscription.character_count == subscription.character_limit)

    wait_until(spent, what="the spent audio budget in the subscription")
    after = client.user.subscription.get()
    assert after.character_limit - after.character_count == 0 and after.status == "active"
    assert (after.character_refresh_period, after.next_character_count_reset_unix) == ("monthly_period", next_month)
    with pytest.raises(ApiError) as refused:
        b"".join(client.text_to_speech.convert("alloy", text="One more.", model_id="tones"))
    assert refused.value.status_code == 401
    assert isinstance(refused.value.body, dict) and refused.value.body["detail"]["status"] == "quota_exceeded"


def test_history_is_empty_and_voice_settings_are_the_defaults(gateway: GatewayProcess, http: httpx.Client) -> None:
    client = elevenlabs(gateway, http)
    history = client.history.list()
    assert history.history == [] and history.has_more is False
    settings = client.voices.settings.get_default()
    assert (settings.stability, settings.similarity_boost, settings.speed) == (0.5, 0.75, 1.0)
    assert client.voices.settings.get("alloy") == settings
    with pytest.raises(ApiError) as unknown:  # the settings of a voice the caller has, as GET /v1/voices/{id}
        client.voices.settings.get("nobody-has-this")
    assert (unknown.value.status_code, unknown.value.body["detail"]["status"]) == (404, "voice_not_found")


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/v1/user/nothing-here"), ("POST", "/v1/sound-generation"), ("GET", "/v1/convai/agents")],
)
def test_unknown_elevenlabs_routes_authenticate_then_answer_elevenlabs_404(
    gateway: GatewayProcess, http: httpx.Client, method: str, path: str
) -> None:
    wrong = http.request(method, gateway.base_url + path, headers={"xi-api-key": "sk-wrong"})
    assert wrong.status_code == 401
    assert wrong.json()["detail"]["status"] == "invalid_api_key"
    missing = http.request(method, gateway.base_url + path, headers={"xi-api-key": KEYS["acme"]})
    assert missing.status_code == 404
    assert missing.json()["detail"]["status"] == "not_found"


def test_the_shared_model_list_refuses_each_family_in_its_shape(gateway: GatewayProcess, http: httpx.Client) -> None:
    with pytest.raises(ApiError) as elevenlabs_client:  # xi-api-key: an ElevenLabs client
        ElevenLabs(base_url=gateway.base_url, api_key="sk-wrong", httpx_client=http).models.list()
    assert (elevenlabs_client.value.status_code, elevenlabs_client.value.body["detail"]["status"]) == (
        401,
        "invalid_api_key",
    )
    with (
        openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key="sk-wrong", max_retries=0) as sdk,
        pytest.raises(openai.AuthenticationError) as openai_client,
    ):
        sdk.models.list()
    assert openai_client.value.code == "invalid_api_key"


def test_a_premade_id_is_a_voice_to_get(gateway: GatewayProcess, http: httpx.Client) -> None:
    voice = elevenlabs(gateway, http).voices.get("hpp4J3VqNfWAUOO0d1Us")
    assert (voice.voice_id, voice.name, voice.category) == ("hpp4J3VqNfWAUOO0d1Us", "Bella", "premade")
    assert elevenlabs(gateway, http, "beta").voices.get("narrator").voice_id == "narrator"  # the tenant's alias
