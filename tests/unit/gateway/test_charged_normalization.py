"""Every charged character buys bounded work (issue #47), numbers read as words too: ChatTTS reads "123456789012" as
"one hundred twenty-three billion ... twelve" (105 characters for 12), in its worker, where no limit saw it. So 194
characters of digits made 9.1 s of audio where the same 194 read as written made 1.0 s, both charged 194. The plan reads
the text as the engine will (``gateway/speech/plan.py``), charges that in usage, the per-minute limit and ElevenLabs'
``x-character-count``, and bounds it as every expansion is bounded.

The real app in process, the real ChatTTS engine on the tiny random-weight assets in a thread: each sentence segment
is exactly ``TEST_TOKENS`` tokens long, so the audio counts the segments the engine made of what it read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from litestar.testing import AsyncTestClient

from auth.keys import generate_api_key, hash_api_key
from engines.chattts.normalize import normalize_builtin
from gateway.speech.plan import SPOKEN_CHARS_PER_INPUT_CHAR
from tests.chattts_assets import chattts_engine_options
from tests.inprocess import in_process_app

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

pytestmark = pytest.mark.slow  # runs ChatTTS: left out of `make quick`

KEYS = {name: generate_api_key() for name in ("acme", "tight")}
CHARACTERS_PER_MINUTE = 1000
DIGITS = ("123456789012 " * 15).strip()
"""194 characters, which ChatTTS reads as 1,589."""
CONFIG: dict[str, Any] = {
    "auth": {
        "tenants": [
            {"name": "acme", "api_key_sha256": [hash_api_key(KEYS["acme"])]},
            {
                "name": "tight",
                "api_key_sha256": [hash_api_key(KEYS["tight"])],
                "limits": {"characters_per_minute": CHARACTERS_PER_MINUTE},
            },
        ]
    },
    "engines": {"chattts": {"kind": "chattts", "workers": 1, "options": chattts_engine_options()}, "espeak": None},
    "aliases": {"tts-1": ["chattts"]},
}


@pytest.fixture(scope="module")
async def client() -> AsyncIterator[AsyncTestClient[Any]]:
    async with AsyncTestClient(app=in_process_app(CONFIG)) as test_client:  # the engine loads as the app starts
        yield test_client


async def _charged(client: AsyncTestClient[Any], tenant: str = "acme") -> int:
    usage = await client.get("/v1/usage", headers={"authorization": f"Bearer {KEYS[tenant]}"})
    return int(usage.json()["input_characters"])


async def _openai(client: AsyncTestClient[Any], text: str, *, normalize: bool = True, tenant: str = "acme") -> Any:
    body = {"model": "tts-1", "voice": "alloy", "input": text, "response_format": "pcm", "normalize_text": normalize}
    return await client.post("/v1/audio/speech", json=body, headers={"authorization": f"Bearer {KEYS[tenant]}"})


async def _spoken(client: AsyncTestClient[Any], text: str, *, normalize: bool) -> tuple[int, float]:
    """What ``text`` was charged, and the seconds of audio it made."""
    before = await _charged(client)
    response = await _openai(client, text, normalize=normalize)
    assert response.status_code == 200, response.text
    return await _charged(client) - before, len(response.content) / 2 / 24_000


def _as_chattts_reads(text: str) -> str:
    """``text`` as ChatTTS's rules read it (``engines/chattts/normalize``)."""
    return normalize_builtin(text)


async def test_numbers_read_as_words_are_charged_what_the_engine_reads(client: AsyncTestClient[Any]) -> None:
    as_written, written_s = await _spoken(client, DIGITS, normalize=False)
    as_words, words_s = await _spoken(client, DIGITS, normalize=True)
    assert as_written == len(DIGITS)
    assert as_words == len(_as_chattts_reads(DIGITS)) > 8 * len(DIGITS)
    assert words_s > 8 * written_s  # the engine did read them as words: 9 segments, not 1
    # So each charged character buys as much audio either way (within a segment's rounding).
    assert words_s / as_words == pytest.approx(written_s / as_written, rel=0.25)


async def test_a_script_is_charged_its_numbers_as_read(client: AsyncTestClient[Any]) -> None:
    ssml = f'<speak>{DIGITS}<break time="1s"/>Done.</speak>'
    charged, _ = await _spoken(client, ssml, normalize=True)
    assert charged >= len(_as_chattts_reads(DIGITS)) > len(ssml)


async def test_elevenlabs_counts_them_in_x_character_count(client: AsyncTestClient[Any]) -> None:
    for normalization, count in (("on", len(_as_chattts_reads(DIGITS))), ("off", len(DIGITS))):
        response = await client.post(
            "/v1/text-to-speech/alloy?output_format=pcm_24000",
            json={"text": DIGITS, "model_id": "tts-1", "apply_text_normalization": normalization},
            headers={"xi-api-key": KEYS["acme"]},
        )
        assert response.status_code == 200, response.text
        assert response.headers["x-character-count"] == str(count)


async def test_the_per_minute_limit_counts_them(client: AsyncTestClient[Any]) -> None:
    refused = await _openai(client, DIGITS, tenant="tight")  # 194 sent, 1,589 to read: over the minute's 1,000
    assert refused.status_code == 429, refused.text
    message = refused.json()["error"]["message"]
    assert message.startswith(f"Request too large for input characters per minute: limit {CHARACTERS_PER_MINUTE},")
    assert (await _openai(client, DIGITS, normalize=False, tenant="tight")).status_code == 200


async def test_what_they_are_read_as_is_bounded(client: AsyncTestClient[Any]) -> None:
    digits = ("777 " * 1024).strip()  # 4,095 characters read as 28,670: 7 times as long
    bound = SPOKEN_CHARS_PER_INPUT_CHAR * 4096
    refused = await _openai(client, digits)
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["param"] == "input"
    assert error["message"] == (
        f"The text becomes {len(_as_chattts_reads(digits))} characters once its numbers and symbols are read as "
        f"words; at most {bound} may be spoken in this request (turn text normalization off to have them read as "
        "written)."
    )
    assert (await _openai(client, digits[:400])).status_code == 200  # within the bound


async def test_text_a_rule_cannot_read_is_spoken_not_a_server_error(client: AsyncTestClient[Any]) -> None:
    # A score rule matched "82.8-2" and its int() failed on "82.8": the plan (which reads the text as the engine will)
    # answered 500, and the engine would have failed the segment every time it was sent.
    spoken = await _openai(client, "The score was 82.8-2 at half time.")
    assert spoken.status_code == 200, spoken.text
    assert len(spoken.content) > 0
