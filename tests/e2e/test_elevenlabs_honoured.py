"""What ElevenLabs' requests say is honoured, not only accepted (#49, part 6): ``language_code`` (espeak-ng's voice
of that language; one the engine cannot speak is a 400), ``apply_text_normalization: "off"`` (ChatTTS reads digits as
written) and ``voices.search``'s label filters, through the real ElevenLabs SDK against a real gateway.

ChatTTS runs on tiny random weights: with a seed its audio is a function of the tokens it reads, so two texts it reads
alike sound alike and two it reads otherwise do not.
"""

from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from elevenlabs import DialogueInput, ElevenLabs
from elevenlabs.core.api_error import ApiError
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from auth.keys import generate_api_key, hash_api_key
from harness.gateway_process import GatewayProcess
from tests.chattts_assets import chattts_engine_options

if TYPE_CHECKING:
    from collections.abc import Iterator

KEYS = {name: generate_api_key() for name in ("acme", "speakers")}
FEMALE = {"coral", "marin", "nova", "sage", "shimmer"}
"""espeak-ng's female voices (engines/espeak/voices.py)."""
TOLERANCE_BYTES = 960
"""20 ms of 24 kHz PCM: espeak-ng's audio of the same text varies by a few samples from one synthesis to the next."""


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    chattts = {"kind": "chattts", "workers": 1, "start_timeout_s": 120, "options": chattts_engine_options()}
    config = {
        "auth": {
            "tenants": [
                {"name": "acme", "api_key_sha256": [hash_api_key(KEYS["acme"])]},
                # Only espeak-ng speaks its voices: what is known of them is theirs alone.
                {"name": "speakers", "api_key_sha256": [hash_api_key(KEYS["speakers"])], "models": ["espeak"]},
            ]
        },
        "engines": {"espeak": {"kind": "espeak"}, "chattts": chattts},
    }
    process = GatewayProcess(config, tmp_path_factory.mktemp("elevenlabs-honoured")).start(timeout_s=120)
    yield process
    process.stop()


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=60) as client:
        yield client


def sdk(gateway: GatewayProcess, http: httpx.Client, tenant: str = "acme") -> ElevenLabs:
    return ElevenLabs(api_key=KEYS[tenant], base_url=gateway.base_url, httpx_client=http)


def speak(client: ElevenLabs, text: str, model_id: str = "espeak", voice_id: str = "nova", **fields: Any) -> bytes:
    chunks = client.text_to_speech.convert(voice_id, text=text, model_id=model_id, output_format="pcm_24000", **fields)
    return b"".join(chunks)


def refusal(call: Any) -> ApiError:
    with pytest.raises(ApiError) as caught:
        call()
    return caught.value


def test_language_code_speaks_with_espeaks_voice_of_that_language(gateway: GatewayProcess, http: httpx.Client) -> None:
    client = sdk(gateway, http)
    text = "Guten Tag, wie geht es dir heute?"
    own = speak(client, text)
    german = speak(client, text, language_code="de")
    # German reads the words otherwise: another length (the old code served the first request's audio from cache).
    assert abs(len(german) - len(own)) > TOLERANCE_BYTES * 10, (len(german), len(own))
    # English is the voice's own language: its accent is kept (new audio, not a cache hit of the unset request).
    assert abs(len(speak(client, text, language_code="en")) - len(own)) <= TOLERANCE_BYTES
    dialogue = client.text_to_dialogue.convert(
        inputs=[DialogueInput(text=text, voice_id="nova")], model_id="espeak", output_format="pcm_24000",
        language_code="de",
    )  # fmt: skip
    assert abs(len(b"".join(dialogue)) - len(german)) <= TOLERANCE_BYTES


def test_a_language_the_engine_cannot_speak_is_a_400(gateway: GatewayProcess, http: httpx.Client) -> None:
    client = sdk(gateway, http)
    error = refusal(lambda: speak(client, "Hello there.", language_code="xx"))
    assert error.status_code == 400
    assert isinstance(error.body, dict)
    assert "'xx'" in error.body["detail"]["message"]
    error = refusal(lambda: speak(client, "Hello there.", model_id="chattts", language_code="de", seed=1))
    assert error.status_code == 400
    assert isinstance(error.body, dict)
    assert "ChatTTS" in error.body["detail"]["message"]
    assert len(speak(client, "Hello there.", model_id="chattts", language_code="zh", seed=1)) > 0


def test_apply_text_normalization_off_reads_digits_as_written(gateway: GatewayProcess, http: httpx.Client) -> None:
    client = sdk(gateway, http)

    def chattts(text: str, normalization: str) -> bytes:
        return speak(client, text, model_id="chattts", seed=11, apply_text_normalization=normalization)

    # A text without digits or symbols reads the same either way: the same seed, the same audio.
    assert chattts("Hello there, my friend.", "off") == chattts("Hello there, my friend.", "on")
    # "12" is "twelve" when normalized, and not when read as written.
    assert chattts("I have 12 cats.", "off") != chattts("I have 12 cats.", "auto")


def test_voices_search_filters_by_labels(gateway: GatewayProcess, http: httpx.Client) -> None:
    client = sdk(gateway, http, "speakers")
    female = client.voices.search(gender="female", page_size=100)
    assert {voice.voice_id for voice in female.voices} == FEMALE
    assert all(voice.labels is not None and voice.labels["gender"] == "female" for voice in female.voices)
    british = client.voices.search(gender="male", accent="british", page_size=100)
    assert {voice.voice_id for voice in british.voices} == {"echo"}
    assert client.voices.search(language="en", page_size=100).total_count == 13
    assert client.voices.search(language="de", page_size=100).voices == []
    # No voice here is labelled with a use case: asking for one finds none, rather than every voice.
    assert client.voices.search(use_cases=["conversational"], page_size=100).voices == []
    # ChatTTS samples its speakers from the names: voices it speaks too have no gender a caller can rely on.
    assert client.voices.search(gender="female", page_size=100, voice_ids=["nova"]).total_count == 1
    shared = sdk(gateway, http).voices.search(gender="female", page_size=100)
    assert shared.voices == []


async def socket_audio(gateway: GatewayProcess, text: str, **query: str) -> bytes:
    """What ElevenLabs' ``stream-input`` socket speaks of ``text`` with the URL's ``query``."""
    params = "&".join(f"{name}={value}" for name, value in {"model_id": "espeak", **query}.items())
    url = (
        f"{gateway.base_url.replace('http', 'ws')}/v1/text-to-speech/nova/stream-input?{params}&output_format=pcm_24000"
    )
    audio = b""
    async with connect(url, additional_headers={"xi-api-key": KEYS["acme"]}) as socket:
        await socket.send(json.dumps({"text": " "}))
        await socket.send(json.dumps({"text": text, "flush": True}))
        await socket.send(json.dumps({"text": ""}))
        async for message in socket:
            event = json.loads(message)
            audio += base64.b64decode(event.get("audio") or "")
            if event.get("isFinal"):
                break
    return audio


async def test_the_sockets_url_says_the_language_of_every_piece(gateway: GatewayProcess) -> None:
    text = "Guten Tag, wie geht es dir heute?"
    own, german = await socket_audio(gateway, text), await socket_audio(gateway, text, language_code="de")
    assert abs(len(german) - len(own)) > TOLERANCE_BYTES * 10, (len(german), len(own))  # the old code ignored it
    with pytest.raises(InvalidStatus) as refused:
        await socket_audio(gateway, text, language_code="1x")
    assert refused.value.response.status_code == 422
    with pytest.raises(InvalidStatus) as refused:
        await socket_audio(gateway, text, apply_text_normalization="sometimes")
    assert refused.value.response.status_code == 422
