"""Every charged character buys bounded work (issue #47): a request is charged the characters the engine is asked to
speak once every expansion applied (a tenant's pronunciation dictionaries, ``say-as``, ``sub``) and its silences, never
less than what the caller sent; its silences are capped. The rule lives in the plan (``gateway/speech/plan.py``), so
OpenAI's route and ElevenLabs' charge alike, in the tenant's usage and against its per-minute characters; plain text
is charged its length, as before."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from litestar.testing import AsyncTestClient

from auth import Principal
from auth.settings import TenantSettings
from auth.tenants import tenant_from_settings
from engines.settings import engine_settings
from gateway.http.errors import as_openai_error
from gateway.schemas import SpeechRequest
from gateway.speech.errors import InvalidSpeechRequestError
from gateway.speech.plan import CHARACTERS_PER_SILENT_SECOND, MAX_SILENCE_S, Planner, charged_characters
from gateway.speech.routing import ModelRouter
from gateway.speech.voices import MemoryVoiceStore
from gateway.text import Markup, read_script
from tests.inprocess import ThreadBackend, in_process_app

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

ADMIN_TOKEN = "an-admin-token-of-at-least-32-characters"
ADMIN = {"authorization": f"Bearer {ADMIN_TOKEN}"}
SECONDS_PER_CHAR = 0.001
ALIAS = "y" * 1024
CONFIG: dict[str, Any] = {
    "auth": {"admin_token": ADMIN_TOKEN},
    "engines": {"tones": {"kind": "synthetic", "workers": 1, "options": {"seconds_per_char": SECONDS_PER_CHAR}}},
    "aliases": {"tts-1": ["tones"]},
}


class Tenant:
    def __init__(self, client: AsyncTestClient[Any], key: str, dictionary: str) -> None:
        self.client = client
        self.key = key
        self.dictionary = dictionary

    async def openai(self, text: str) -> Any:
        body = {"model": "tts-1", "voice": "alloy", "input": text, "response_format": "pcm"}
        return await self.client.post("/v1/audio/speech", json=body, headers={"authorization": f"Bearer {self.key}"})

    async def elevenlabs(self, text: str, *, dictionary: bool = True) -> Any:
        body: dict[str, Any] = {"text": text, "model_id": "tts-1"}
        if dictionary:
            body["pronunciation_dictionary_locators"] = [{"pronunciation_dictionary_id": self.dictionary}]
        return await self.client.post(
            "/v1/text-to-speech/alloy?output_format=pcm_24000", json=body, headers={"xi-api-key": self.key}
        )

    async def charged(self) -> int:
        usage = await self.client.get("/v1/usage", headers={"authorization": f"Bearer {self.key}"})
        return int(usage.json()["input_characters"])


async def _tenant(client: AsyncTestClient[Any], name: str, **settings: Any) -> Tenant:
    assert (await client.post("/admin/tenants", json={"name": name, **settings}, headers=ADMIN)).status_code == 201
    key = (await client.post(f"/admin/tenants/{name}/keys", headers=ADMIN)).json()["key"]
    rules = [{"type": "alias", "string_to_replace": "a", "alias": ALIAS}]
    created = await client.post(
        "/v1/pronunciation-dictionaries/add-from-rules",
        json={"name": "long", "rules": rules},
        headers={"xi-api-key": key},
    )
    dictionary = created.json()["id"]
    body = {"name": name, "pronunciation_dictionaries": [dictionary], **settings}
    assert (await client.post("/admin/tenants", json=body, headers=ADMIN)).status_code in {200, 201}
    return Tenant(client, key, dictionary)


@pytest.fixture
async def client() -> AsyncIterator[AsyncTestClient[Any]]:
    async with AsyncTestClient(app=in_process_app(CONFIG)) as test_client:
        yield test_client


@pytest.fixture
async def acme(client: AsyncTestClient[Any]) -> Tenant:
    return await _tenant(client, "acme")


def _seconds(response: Any) -> float:
    return len(response.content) / 2 / 24_000


def test_the_rule() -> None:
    assert charged_characters("Hello there", "Hello there") == 11  # plain text: its length
    assert charged_characters("<speak>Hi</speak>", "Hi") == 17  # markup that says less: as sent
    assert charged_characters("a a", f"{ALIAS} {ALIAS}") == 2049  # expanded: what is spoken
    assert charged_characters("x", "x", 2.5) == 1 + 10  # silences at 4 characters a second
    assert CHARACTERS_PER_SILENT_SECOND * 0.25 == 1  # so at most 0.25 s of silence per charged character


@pytest.fixture(scope="module")
async def planner() -> AsyncIterator[Planner]:
    engine = ThreadBackend("tones", engine_settings(kind="synthetic"))
    await engine.start()
    yield Planner(ModelRouter({"tones": engine}, {}), MemoryVoiceStore())
    await engine.stop()


async def _plan(planner: Planner, text: str) -> Any:
    request = SpeechRequest(model="tones", input=text, voice="alloy")
    script = read_script(text, Markup.SSML)
    principal = Principal(tenant_from_settings(TenantSettings(name="acme")), "key")
    return await planner.plan(principal, request, None if script.text == text else script)


async def test_the_plan_charges_what_it_makes_spoken(planner: Planner) -> None:
    assert (await _plan(planner, "Hello there.")).characters == len("Hello there.")
    digits = '<speak><say-as interpret-as="digits">12345678901234567890</say-as></speak>'
    plan = await _plan(planner, digits)
    assert plan.characters == len(plan.synthesis.text) > len(digits)  # "one two three ...", one span
    breaks = '<speak>One.<break time="10s"/>Two.<break time="10s"/><prosody rate="slow">Three.</prosody></speak>'
    plan = await _plan(planner, breaks)
    assert plan.characters == max(len(breaks), len("One. Two. Three.") + 20 * CHARACTERS_PER_SILENT_SECOND)
    with pytest.raises(InvalidSpeechRequestError) as refused:  # 2,560 characters of markup: 1,280 s of silence
        await _plan(planner, "<speak>" + 'b<break time="10s"/>' * 128 + "</speak>")
    assert as_openai_error(refused.value).status_code == 400


async def test_plain_text_is_charged_its_length(acme: Tenant) -> None:
    text = "Plain words, no rule matches them."
    assert (await acme.openai(text)).status_code == 200
    assert await acme.charged() == len(text)


async def test_a_default_dictionary_is_charged_what_it_makes_spoken_on_openai(acme: Tenant) -> None:
    text = "a a a a a a a a"  # 15 characters the caller sent: 8 aliases of 1,024 characters spoken
    response = await acme.openai(text)
    assert response.status_code == 200, response.text
    spoken = 8 * len(ALIAS) + 7
    assert await acme.charged() == spoken
    assert _seconds(response) == pytest.approx(spoken * SECONDS_PER_CHAR, rel=0.05)  # what was charged was spoken


async def test_a_named_dictionary_is_charged_what_it_makes_spoken_on_elevenlabs(acme: Tenant) -> None:
    response = await acme.elevenlabs("a")
    assert response.status_code == 200, response.text
    assert await acme.charged() == len(ALIAS)
    assert response.headers["x-character-count"] == str(len(ALIAS))  # what it was charged, as ElevenLabs' says
    plain = await acme.elevenlabs("b", dictionary=False)
    assert plain.status_code == 200
    assert await acme.charged() == len(ALIAS) + 1
    assert plain.headers["x-character-count"] == "1"


async def test_a_tenants_characters_per_minute_count_what_is_spoken(client: AsyncTestClient[Any]) -> None:
    tight = await _tenant(client, "tight", limits={"characters_per_minute": 1000})
    refused = await tight.elevenlabs("a")  # 1 character sent, 1,024 to speak: over the minute's 1,000
    assert refused.status_code == 429, refused.text
    openai = await tight.openai("a")  # the same rule on OpenAI's route (its default dictionary)
    assert openai.status_code == 429
    # No wait admits it: said so, and the SDKs (which retry a 429) are told not to.
    for answer, message in (
        (refused, refused.json()["detail"]["message"]),
        (openai, openai.json()["error"]["message"]),
    ):
        assert answer.headers["x-should-retry"] == "false"
        assert message.startswith("Request too large for input characters per minute: limit 1000, requested 1024.")
    assert (await tight.elevenlabs("b", dictionary=False)).status_code == 200
    over = await tight.openai("c" * 1000)  # fits a minute, not what is left of this one: worth a retry
    assert over.status_code == 429
    assert "x-should-retry" not in over.headers
    assert over.json()["error"]["message"].startswith("Rate limit reached for input characters per minute.")


async def test_say_as_digits_are_charged_as_read(acme: Tenant) -> None:
    digits = "1234567890" * 30
    text = f'<speak><say-as interpret-as="digits">{digits}</say-as></speak>'
    response = await acme.openai(text)
    assert response.status_code == 200, response.text
    charged = await acme.charged()
    assert charged > 3 * len(text)  # "one two three ...": what the engine said
    assert _seconds(response) == pytest.approx(charged * SECONDS_PER_CHAR, rel=0.05)


async def test_breaks_are_charged_and_capped(acme: Tenant) -> None:
    pauses = int(MAX_SILENCE_S // 10)
    text = "<speak>" + 'b<break time="10s"/>' * pauses + "b</speak>"
    response = await acme.openai(text)
    assert response.status_code == 200, response.text
    charged = await acme.charged()
    assert charged == (pauses + 1) * 2 - 1 + pauses * 10 * CHARACTERS_PER_SILENT_SECOND
    assert _seconds(response) <= 0.25 * charged  # at most a quarter of a second per charged character
    bomb = "<speak>" + 'b<break time="10s"/>' * 128 + "</speak>"  # 2.6 KB asking for 21 minutes of silence
    refused = await acme.openai(bomb)
    assert (refused.status_code, refused.json()["error"]["param"]) == (400, "input")
    assert "silence" in refused.json()["error"]["message"]


async def test_elevenlabs_break_tags_are_capped_in_its_shape(acme: Tenant) -> None:
    refused = await acme.elevenlabs('b <break time="3s" /> ' * 50, dictionary=False)  # 150 s of silence
    assert refused.status_code == 400
    assert "silence" in refused.json()["detail"]["message"]
    allowed = await acme.elevenlabs('b <break time="3s" /> ' * 10 + "b", dictionary=False)
    assert allowed.status_code == 200, allowed.text
    assert _seconds(allowed) <= 0.25 * await acme.charged()
