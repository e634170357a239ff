"""Per-tenant pronunciation dictionaries (issue #35) against one real gateway on a real redis-server, driven by the
official ``elevenlabs`` SDK (its ``pronunciation_dictionaries`` client, unchanged but for its base URL), the OpenAI SDK
and httpx.

espeak speaks the same text as nearly the same PCM (samples correlated at 0.998 here, not bit for bit), so "a
dictionary alias sounds like the alias" is measured: the audio of a text with a grapheme in it, spoken with the
dictionary, lasts as long as the text with the alias written out (within 8 %) and its loudness follows the same
course (energy envelopes correlated at 0.9 or more), while the text read as written does not.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import uuid
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np
import openai
import pytest
from elevenlabs import ElevenLabs
from elevenlabs.core.api_error import ApiError
from elevenlabs.types import PronunciationDictionaryVersionLocator
from websockets.asyncio.client import connect

from auth.keys import generate_api_key, hash_api_key
from gateway.text.pls import RuleCaps, read_pls
from harness.gateway_process import GatewayProcess
from tests.tenancy import ADMIN_TOKEN, Admin

if TYPE_CHECKING:
    from collections.abc import Iterator

    import numpy.typing as npt
    from openai.types.realtime import RealtimeConversationItemUserMessageParam, RealtimeResponseCreateParamsParam

    from tests.redis_server import RedisServer

KEYS = {name: generate_api_key() for name in ("acme", "beta")}
MAX_DICTIONARIES = 5
MAX_RULES = 5
MAX_FILE_BYTES = 2048
RATE = 24_000
TEXT = "Welcome to GW, the speech service."
SPOKEN = "Welcome to gateway, the speech service."
TOMATO = "təˈmeɪtoʊ"  # noqa: RUF001 - IPA
GEE = "dʒiː"  # noqa: RUF001 - IPA


def _pls(*lexemes: str) -> bytes:
    body = "".join(f"<lexeme>{lexeme}</lexeme>" for lexeme in lexemes)
    return (
        '<?xml version="1.0" encoding="UTF-8"?><lexicon version="1.0" '
        'xmlns="http://www.w3.org/2005/01/pronunciation-lexicon" alphabet="ipa" xml:lang="en-US">'
        f"{body}</lexicon>"
    ).encode()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer) -> Iterator[GatewayProcess]:
    config: dict[str, Any] = {
        "redis_url": redis_server.url,
        "auth": {
            "admin_token": ADMIN_TOKEN,
            "tenants": [{"name": name, "api_key_sha256": [hash_api_key(key)]} for name, key in KEYS.items()],
        },
        "engines": {"espeak": {"kind": "espeak"}},
        "aliases": {"eleven_multilingual_v2": ["espeak"], "tts-1": ["espeak"], "gpt-realtime-2.1-mini": ["espeak"]},
        "pronunciation": {
            "max_dictionaries_per_tenant": MAX_DICTIONARIES,
            "max_rules_per_dictionary": MAX_RULES,
            "max_file_bytes": MAX_FILE_BYTES,
        },
    }
    with GatewayProcess(config, tmp_path_factory.mktemp("pronunciation")) as process:
        yield process


def _sdk(gateway: GatewayProcess, tenant: str) -> Iterator[ElevenLabs]:
    """The SDK never closes an HTTP client it makes itself: it is given one, closed here."""
    with httpx.Client(timeout=30) as http:
        yield ElevenLabs(api_key=KEYS[tenant], base_url=gateway.base_url, httpx_client=http)


@pytest.fixture(scope="module")
def acme(gateway: GatewayProcess) -> Iterator[ElevenLabs]:
    yield from _sdk(gateway, "acme")


@pytest.fixture(scope="module")
def beta(gateway: GatewayProcess) -> Iterator[ElevenLabs]:
    yield from _sdk(gateway, "beta")


@pytest.fixture(scope="module")
def gw_dictionary(acme: ElevenLabs) -> Any:
    """acme's dictionary saying "GW" as "gateway"."""
    return acme.pronunciation_dictionaries.create_from_rules(
        name="brand", rules=[{"type": "alias", "string_to_replace": "GW", "alias": "gateway"}]
    )


def _pcm(client: ElevenLabs, text: str, **fields: Any) -> npt.NDArray[np.float64]:
    audio = b"".join(client.text_to_speech.convert("alloy", text=text, output_format="pcm_24000", **fields))
    return np.frombuffer(audio, dtype="<i2").astype(np.float64) / 32768


def _envelope(pcm: npt.NDArray[np.float64], frame: int = RATE // 50) -> npt.NDArray[np.float64]:
    frames = pcm[: pcm.size - pcm.size % frame].reshape(-1, frame)
    envelope: npt.NDArray[np.float64] = np.sqrt(np.mean(frames * frames, axis=1))
    return envelope


def _sounds_alike(a: npt.NDArray[np.float64], b: npt.NDArray[np.float64]) -> bool:
    """Durations within 8 % and energy envelopes correlated at 0.9 or more (over the shorter one)."""
    if abs(a.size - b.size) > 0.08 * max(a.size, b.size):
        return False
    left, right = _envelope(a), _envelope(b)
    size = min(left.size, right.size)
    return float(np.corrcoef(left[:size], right[:size])[0, 1]) >= 0.9


def _locator(dictionary: Any, *, pinned: bool = True) -> list[PronunciationDictionaryVersionLocator]:
    version = dictionary.version_id if pinned else None
    return [PronunciationDictionaryVersionLocator(pronunciation_dictionary_id=dictionary.id, version_id=version)]


def test_the_sdk_creates_lists_changes_and_downloads_dictionaries(acme: ElevenLabs) -> None:
    dictionaries = acme.pronunciation_dictionaries
    created = dictionaries.create_from_rules(
        name="sdk",
        description="made by the SDK",
        rules=[
            {"type": "alias", "string_to_replace": "TTS", "alias": "text to speech"},
            {"type": "phoneme", "string_to_replace": "tomato", "phoneme": TOMATO, "alphabet": "ipa"},
        ],
    )
    assert (created.name, created.version_rules_num, created.description) == ("sdk", 2, "made by the SDK")
    shown = dictionaries.get(created.id)
    assert shown.latest_version_id == created.version_id
    assert [(rule.type, rule.string_to_replace) for rule in shown.rules] == [("alias", "TTS"), ("phoneme", "tomato")]

    added = dictionaries.rules.add(created.id, rules=[{"type": "alias", "string_to_replace": "GW", "alias": "gw"}])
    removed = dictionaries.rules.remove(created.id, rule_strings=["tomato"])
    assert len({created.version_id, added.version_id, removed.version_id}) == 3  # every change a new version
    assert (added.version_rules_num, removed.version_rules_num) == (3, 2)

    older = b"".join(dictionaries.download(created.id, added.version_id))
    assert [rule.grapheme for rule in read_pls(older, RuleCaps(max_rules=10))] == ["TTS", "tomato", "GW"]
    latest = read_pls(b"".join(dictionaries.download(created.id, removed.version_id)), RuleCaps(max_rules=10))
    assert [(rule.grapheme, rule.alias) for rule in latest] == [("TTS", "text to speech"), ("GW", "gw")]

    from_file = dictionaries.create_from_file(
        name="from a file",
        file=("lexicon.pls", io.BytesIO(older), "application/pls+xml"),
    )
    assert from_file.version_rules_num == 3

    seen: list[str] = []
    cursor = None
    while True:  # pages of one, following ElevenLabs' cursor
        page = dictionaries.list(page_size=1, cursor=cursor)
        seen += [item.id for item in page.pronunciation_dictionaries]
        if not page.has_more:
            break
        cursor = page.next_cursor
    assert {created.id, from_file.id} <= set(seen) and len(seen) == len(set(seen))


def test_an_alias_sounds_like_the_alias_for_its_tenant_only(
    acme: ElevenLabs, beta: ElevenLabs, gw_dictionary: Any
) -> None:
    with_dictionary = _pcm(acme, TEXT, pronunciation_dictionary_locators=_locator(gw_dictionary))
    written_out = _pcm(beta, SPOKEN)
    as_written = _pcm(beta, TEXT)
    assert _sounds_alike(with_dictionary, written_out)
    assert not _sounds_alike(with_dictionary, as_written)  # the test can fail: "GW" read as letters differs
    assert _sounds_alike(_pcm(acme, TEXT), as_written)  # applied only where named (acme has no defaults here)

    with pytest.raises(ApiError) as refused:  # another tenant's dictionary is not found, whatever its id
        _pcm(beta, TEXT, pronunciation_dictionary_locators=_locator(gw_dictionary))
    assert refused.value.status_code == 404


def test_a_script_of_several_parts_is_respelled_span_by_span(acme: ElevenLabs, gw_dictionary: Any) -> None:
    # A break tag makes the text a script of two spans and a silence (docs/ssml.md): each span meets the dictionary.
    pause = '<break time="0.4s"/>'
    with_dictionary = _pcm(acme, f"{TEXT} {pause} {TEXT}", pronunciation_dictionary_locators=_locator(gw_dictionary))
    written_out = _pcm(acme, f"{SPOKEN} {pause} {SPOKEN}")
    assert _sounds_alike(with_dictionary, written_out)
    assert not _sounds_alike(with_dictionary, _pcm(acme, f"{TEXT} {pause} {TEXT}"))


async def _realtime_pcm(gateway: GatewayProcess, text: str) -> npt.NDArray[np.float64]:
    """``text`` spoken by OpenAI's Realtime API as acme, as a speech caller migrating to it writes it."""
    ws_base = gateway.base_url.replace("http://", "ws://") + "/v1"
    client = openai.AsyncOpenAI(api_key=KEYS["acme"], base_url=f"{gateway.base_url}/v1", websocket_base_url=ws_base)
    message: RealtimeConversationItemUserMessageParam = {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": text}],
    }
    response: RealtimeResponseCreateParamsParam = {
        "conversation": "none",
        "input": [message],
        "audio": {"output": {"voice": "alloy"}},
    }
    audio = bytearray()
    async with client.realtime.connect(model="gpt-realtime-2.1-mini") as connection:
        await connection.response.create(response=response)
        async with asyncio.timeout(10):
            while (event := await connection.recv()).type != "response.done":
                if event.type == "response.output_audio.delta":
                    audio += base64.b64decode(event.delta)
    await client.close()
    return np.frombuffer(bytes(audio), dtype="<i2").astype(np.float64) / 32768


async def test_openai_callers_get_their_tenants_default_dictionaries(
    gateway: GatewayProcess, beta: ElevenLabs, gw_dictionary: Any
) -> None:
    admin = Admin(gateway.base_url)
    try:
        set_default = admin.http.post(
            "/admin/tenants", json={"name": "acme", "pronunciation_dictionaries": [gw_dictionary.id]}
        )
        assert set_default.status_code == 201, set_default.text
        assert set_default.json()["pronunciation_dictionaries"] == [gw_dictionary.id]
        foreign = admin.http.post(
            "/admin/tenants", json={"name": "beta", "pronunciation_dictionaries": [gw_dictionary.id]}
        )
        assert foreign.status_code == 400  # not beta's
        with openai.OpenAI(api_key=KEYS["acme"], base_url=f"{gateway.base_url}/v1", max_retries=0) as client:
            pcm = client.audio.speech.create(model="tts-1", voice="alloy", input=TEXT, response_format="pcm").content
        spoken = np.frombuffer(pcm, dtype="<i2").astype(np.float64) / 32768
        assert _sounds_alike(spoken, _pcm(beta, SPOKEN))
        assert _sounds_alike(await _realtime_pcm(gateway, TEXT), _pcm(beta, SPOKEN))  # the realtime API too
    finally:
        admin.http.post("/admin/tenants", json={"name": "acme"})  # no defaults again
        admin.close()


def test_a_new_version_is_never_served_from_the_cache(gateway: GatewayProcess, acme: ElevenLabs) -> None:
    dictionary = acme.pronunciation_dictionaries.create_from_rules(
        name="changing", rules=[{"type": "alias", "string_to_replace": "GW", "alias": "gateway"}]
    )
    body = {"text": TEXT, "pronunciation_dictionary_locators": [{"pronunciation_dictionary_id": dictionary.id}]}
    url = f"{gateway.base_url}/v1/text-to-speech/alloy?output_format=pcm_24000"
    headers = {"xi-api-key": KEYS["acme"]}
    first, again = (httpx.post(url, json=body, headers=headers, timeout=30) for _ in range(2))
    assert (first.headers["x-cache"], again.headers["x-cache"]) == ("miss", "hit")
    acme.pronunciation_dictionaries.rules.add(
        dictionary.id, rules=[{"type": "alias", "string_to_replace": "GW", "alias": "the great gateway of the north"}]
    )
    changed = httpx.post(url, json=body, headers=headers, timeout=30)
    assert changed.headers["x-cache"] == "miss"
    assert len(changed.content) > len(first.content) * 1.2  # the new alias is heard


async def test_the_websocket_applies_a_contexts_dictionaries(
    gateway: GatewayProcess, beta: ElevenLabs, gw_dictionary: Any
) -> None:
    """ElevenLabs' multi-stream-input: a context's first message names the dictionaries its text is spoken with."""
    url = gateway.base_url.replace("http://", "ws://") + "/v1/text-to-speech/alloy/multi-stream-input"
    locators = [{"pronunciation_dictionary_id": gw_dictionary.id}]
    audio = bytearray()
    characters = []
    async with connect(f"{url}?output_format=pcm_24000", additional_headers={"xi-api-key": KEYS["acme"]}) as socket:
        await socket.send(json.dumps({"text": " ", "context_id": "c", "pronunciation_dictionary_locators": locators}))
        await socket.send(json.dumps({"text": TEXT, "context_id": "c", "flush": True}))
        await socket.send(json.dumps({"context_id": "c", "close_context": True}))
        async with asyncio.timeout(10):
            while not (message := json.loads(await socket.recv())).get("isFinal"):
                audio += base64.b64decode(message.get("audio") or "")
                characters += (message.get("alignment") or {}).get("chars", [])
    spoken = np.frombuffer(bytes(audio), dtype="<i2").astype(np.float64) / 32768
    assert _sounds_alike(spoken, _pcm(beta, SPOKEN))
    assert "".join(characters) == TEXT + " "  # the caller's characters, not the alias's


def test_a_text_respelled_too_long_is_refused(acme: ElevenLabs) -> None:
    dictionary = acme.pronunciation_dictionaries.create_from_rules(
        name="long", rules=[{"type": "alias", "string_to_replace": "x", "alias": "y" * 1024}]
    )
    with pytest.raises(ApiError) as refused:  # 2,000 characters become over 2 million: engine time is bounded
        _pcm(acme, "x " * 1000, pronunciation_dictionary_locators=_locator(dictionary))
    assert refused.value.status_code == 400
    assert "respell" in refused.value.body["detail"]["message"]


def test_timestamps_name_the_callers_characters(acme: ElevenLabs, gw_dictionary: Any) -> None:
    timed = acme.text_to_speech.convert_with_timestamps(
        "alloy", text=TEXT, output_format="pcm_24000", pronunciation_dictionary_locators=_locator(gw_dictionary)
    )
    assert timed.alignment is not None
    assert "".join(timed.alignment.characters) == TEXT
    starts = timed.alignment.character_start_times_seconds
    assert starts == sorted(starts)
    gw = TEXT.index("GW")  # "gateway" takes longer than a letter: the grapheme's characters carry its time
    assert timed.alignment.character_end_times_seconds[gw + 1] - starts[gw] > 0.2


def test_caps_and_bad_input_are_clear_4xx(gateway: GatewayProcess, acme: ElevenLabs, beta: ElevenLabs) -> None:
    http = httpx.Client(base_url=gateway.base_url, headers={"xi-api-key": KEYS["beta"]}, timeout=10)
    rule = {"type": "alias", "string_to_replace": "x", "alias": "y"}
    too_many = http.post(
        "/v1/pronunciation-dictionaries/add-from-rules",
        json={"name": "big", "rules": [rule | {"string_to_replace": f"w{i}"} for i in range(MAX_RULES + 1)]},
    )
    assert too_many.status_code == 400 and "rules" in too_many.json()["detail"]["message"]

    def upload(document: bytes) -> httpx.Response:
        return http.post(
            "/v1/pronunciation-dictionaries/add-from-file",
            data={"name": "file"},
            files={"file": ("x.pls", document, "application/pls+xml")},
        )

    assert upload(_pls("<grapheme>a</grapheme><alias>b</alias>") * 60).status_code == 400  # over max_file_bytes
    assert upload(b"<lexicon><lexeme>").json()["detail"]["status"] == "invalid_pls"
    laughs = b'<?xml version="1.0"?><!DOCTYPE l [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;">]><l>&b;</l>'
    assert upload(laughs).status_code == 400
    assert upload(_pls("<grapheme>a</grapheme>")).status_code == 400  # no pronunciation

    made = [
        http.post("/v1/pronunciation-dictionaries/add-from-rules", json={"name": f"d{i}", "rules": [rule]})
        for i in range(MAX_DICTIONARIES + 1)
    ]
    statuses = [response.status_code for response in made]
    assert statuses.count(400) >= 1 and set(statuses) == {200, 400}
    assert made[-1].json()["detail"]["status"] == "pronunciation_dictionary_limit_reached"

    mine = made[0].json()["id"]
    acme_http = httpx.Client(base_url=gateway.base_url, headers={"xi-api-key": KEYS["acme"]}, timeout=10)
    for method, path, body in (
        ("GET", f"/v1/pronunciation-dictionaries/{mine}", None),
        ("POST", f"/v1/pronunciation-dictionaries/{mine}/add-rules", {"rules": [rule]}),
        ("POST", f"/v1/pronunciation-dictionaries/{mine}/remove-rules", {"rule_strings": ["x"]}),
        ("GET", f"/v1/pronunciation-dictionaries/{mine}/{made[0].json()['version_id']}/download", None),
        ("GET", f"/v1/pronunciation-dictionaries/pd_{uuid.uuid4().hex}", None),
    ):
        assert acme_http.request(method, path, json=body).status_code == 404  # another tenant's, or nobody's

    phoneme = http.post(
        f"/v1/pronunciation-dictionaries/{mine}/set-rules",
        json={"rules": [{"type": "phoneme", "string_to_replace": "GW", "phoneme": GEE, "alphabet": "ipa"}]},
    )
    assert phoneme.status_code == 200
    with pytest.raises(ApiError) as refused:  # no engine here says IPA, and the rule has no alias
        _pcm(
            beta,
            TEXT,
            pronunciation_dictionary_locators=[PronunciationDictionaryVersionLocator(pronunciation_dictionary_id=mine)],
        )
    assert refused.value.status_code == 400
    assert refused.value.body["detail"]["status"] == "phoneme_not_supported"
    http.close()
    acme_http.close()


def _usage(gateway: GatewayProcess, tenant: str) -> dict[str, Any]:
    response = httpx.get(f"{gateway.base_url}/v1/usage", headers={"authorization": f"Bearer {KEYS[tenant]}"})
    body: dict[str, Any] = response.json()
    return body


async def _socket_usage(gateway: GatewayProcess, text: str) -> dict[str, Any]:
    """The usage the gateway's own speech socket reports for ``text``, spoken as acme."""
    url = gateway.base_url.replace("http://", "ws://") + "/v1/audio/speech/stream"
    async with connect(url, additional_headers={"Authorization": f"Bearer {KEYS['acme']}"}) as socket:
        await socket.send(json.dumps({"type": "input.append", "text": text}))
        await socket.send(json.dumps({"type": "input.flush"}))
        async with asyncio.timeout(10):
            while (event := json.loads(await socket.recv()))["type"] != "audio.done":
                pass
    usage: dict[str, Any] = event["usage"]
    return usage


async def _realtime_usage(gateway: GatewayProcess, text: str) -> int:
    """The input tokens OpenAI's Realtime API reports in ``response.done`` for ``text``, spoken as acme."""
    ws_base = gateway.base_url.replace("http://", "ws://") + "/v1"
    client = openai.AsyncOpenAI(api_key=KEYS["acme"], base_url=f"{gateway.base_url}/v1", websocket_base_url=ws_base)
    message: RealtimeConversationItemUserMessageParam = {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": text}],
    }
    response: RealtimeResponseCreateParamsParam = {"conversation": "none", "input": [message]}
    async with client.realtime.connect(model="gpt-realtime-2.1-mini") as connection:
        await connection.response.create(response=response)
        async with asyncio.timeout(10):
            while (event := await connection.recv()).type != "response.done":
                pass
    await client.close()
    assert event.response.usage is not None
    return int(event.response.usage.input_tokens or 0)


async def test_jobs_and_sockets_report_what_their_dictionaries_made_the_engine_say(
    gateway: GatewayProcess, gw_dictionary: Any
) -> None:
    """A job is charged, and a socket's usage events report, the characters the engine was asked to say (the alias in
    place of "GW"), as every other request is: they used to count the caller's text."""
    admin = Admin(gateway.base_url)
    try:
        set_default = admin.http.post(
            "/admin/tenants", json={"name": "acme", "pronunciation_dictionaries": [gw_dictionary.id]}
        )
        assert set_default.status_code == 201, set_default.text
        assert (await _socket_usage(gateway, TEXT))["input_tokens"] == len(SPOKEN)
        assert await _realtime_usage(gateway, TEXT) == len(SPOKEN)
        before = _usage(gateway, "acme")
        headers = {"authorization": f"Bearer {KEYS['acme']}"}
        body = {"model": "tts-1", "voice": "alloy", "input": TEXT, "response_format": "pcm"}
        created = httpx.post(f"{gateway.base_url}/v1/audio/speech/jobs", json=body, headers=headers, timeout=30)
        assert created.status_code == 202, created.text
        content = httpx.get(f"{gateway.base_url}/v1/audio/speech/jobs/{created.json()['id']}/content", headers=headers)
        assert content.status_code == 200  # follows the job to its end
        after = before
        for _ in range(100):  # the ledger writes in the background
            after = _usage(gateway, "acme")
            if after["requests"] > before["requests"]:
                break
            await asyncio.sleep(0.05)
        assert after["input_characters"] - before["input_characters"] == len(SPOKEN)
    finally:
        admin.http.post("/admin/tenants", json={"name": "acme"})  # no defaults again
        admin.close()
