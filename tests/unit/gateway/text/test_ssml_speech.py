"""SSML, ElevenLabs' break tags and dialogue spoken end to end in process (``tests/inprocess.py``): the real app, its
error tables and speech service, espeak in a thread. espeak says the same text with the same PCM, so a script's audio
can be compared with its parts spoken apart, sample for sample."""

from __future__ import annotations

import base64
import json
import time
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
import pytest
from elevenlabs.client import AsyncElevenLabs
from elevenlabs.types import DialogueInput
from litestar.testing import AsyncTestClient

from tests.audio_decode import DURATION_TOLERANCE_S, decode_audio
from tests.inprocess import in_process_app

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    import numpy.typing as npt
    from litestar import Litestar

RATE = 24_000
CONFIG: dict[str, Any] = {
    "engines": {"chattts": None, "espeak": {"kind": "espeak"}},
    "aliases": {"tts-1": ["espeak"], "eleven_multilingual_v2": ["espeak"], "eleven_v3": ["espeak"]},
}
Client: TypeAlias = "AsyncTestClient[Litestar]"


@pytest.fixture(scope="module")
async def http() -> AsyncIterator[Client]:
    async with AsyncTestClient(app=in_process_app(CONFIG, capacity=2)) as client:
        yield client


async def speak(http: Client, text: str, voice: str = "alloy", **fields: Any) -> npt.NDArray[np.int16]:
    body = {"model": "espeak", "voice": voice, "input": text, "response_format": "pcm", **fields}
    response = await http.post("/v1/audio/speech", json=body)
    assert response.status_code == 200, response.text
    return np.frombuffer(response.content, np.int16)


def seconds(pcm: npt.NDArray[np.int16]) -> float:
    return len(pcm) / RATE


def envelope_correlation(a: npt.NDArray[np.int16], b: npt.NDArray[np.int16]) -> float:
    """How alike two recordings' loudness goes: the 10 ms RMS envelopes, brought to one length, correlated."""

    def envelope(pcm: npt.NDArray[np.int16]) -> npt.NDArray[np.float64]:
        frames = pcm[: len(pcm) // 240 * 240].astype(np.float64).reshape(-1, 240)
        rms: npt.NDArray[np.float64] = np.sqrt((frames**2).mean(axis=1))
        return rms

    ea, eb = envelope(a), envelope(b)
    grid = np.linspace(0, 1, 200)
    ea = np.interp(grid, np.linspace(0, 1, len(ea)), ea)
    eb = np.interp(grid, np.linspace(0, 1, len(eb)), eb)
    return float(np.corrcoef(ea, eb)[0, 1])


def sounds_like(a: npt.NDArray[np.int16], b: npt.NDArray[np.int16]) -> bool:
    return abs(seconds(a) - seconds(b)) <= 0.08 * seconds(b) and envelope_correlation(a, b) >= 0.9


def is_made_of(whole: npt.NDArray[np.int16], parts: list[npt.NDArray[np.int16]]) -> bool:
    """Whether ``whole`` is ``parts`` one after the other, each stretch of it sounding as its part: the same length
    (within the few samples that resampling espeak's 22,050 Hz to 24 kHz moves at each boundary) and the same
    spectrogram (magnitudes: a fraction of a sample's shift moves only the phases)."""
    if abs(len(whole) - sum(map(len, parts))) > 24 * len(parts):
        return False
    start = 0
    for part in parts:
        piece = whole[start : start + len(part)]
        if part.any() and _spectrogram_correlation(piece, part) < 0.85:  # another voice: about 0.6
            return False
        start += len(part)
    return True


def _spectrogram_correlation(a: npt.NDArray[np.int16], b: npt.NDArray[np.int16]) -> float:
    def spectrogram(pcm: npt.NDArray[np.int16]) -> npt.NDArray[np.float64]:
        frames = pcm[: len(pcm) // 512 * 512].astype(np.float64).reshape(-1, 512) * np.hanning(512)
        magnitudes: npt.NDArray[np.float64] = np.log1p(np.abs(np.fft.rfft(frames, axis=1)))
        return magnitudes

    sa, sb = spectrogram(a), spectrogram(b)
    rows = min(len(sa), len(sb))
    return float(np.corrcoef(sa[:rows].ravel(), sb[:rows].ravel())[0, 1])


async def test_a_break_of_1500_ms_is_that_much_silence_between_the_parts(http: Client) -> None:
    one, two = await speak(http, "One."), await speak(http, "Two.")
    spoken = await speak(http, '<speak>One.<break time="1500ms"/>Two.</speak>')
    assert abs(seconds(spoken) - seconds(one) - seconds(two) - 1.5) <= 0.05
    assert is_made_of(spoken, [one, np.zeros(RATE * 3 // 2, np.int16), two])
    middle = spoken[len(one) : len(one) + RATE * 3 // 2 - 24]
    assert not middle.any()  # exact zeros, not an engine's near-silence


async def test_a_leading_break_goes_out_with_the_first_audio(http: Client) -> None:
    hi = await speak(http, "Hi.")
    spoken = await speak(http, '<speak><break time="500ms"/>Hi.</speak>')
    assert is_made_of(spoken, [np.zeros(RATE // 2, np.int16), hi])


async def test_the_words_after_a_break_are_timed_after_it(http: Client) -> None:
    body = {
        "model": "espeak", "voice": "alloy", "input": '<speak>One.<break time="1500ms"/>Two.</speak>',
        "response_format": "pcm", "stream_format": "sse", "word_timestamps": True,
    }  # fmt: skip
    response = await http.post("/v1/audio/speech", json=body)
    events = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]
    words = [w for e in events if e["type"] == "speech.audio.timestamps" for w in e["words"]]
    assert [w["word"] for w in words] == ["One", "Two"]
    assert words[1]["start"] >= words[0]["end"] + 1.5
    audio = b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta")
    assert words[1]["end"] <= len(audio) / 2 / RATE + 0.01


async def test_sub_sounds_like_its_alias(http: Client) -> None:
    alias = await speak(http, "The World Wide Web Consortium rules.")
    spoken = await speak(http, '<speak>The <sub alias="World Wide Web Consortium">W3C</sub> rules.</speak>')
    written = await speak(http, "The W3C rules.")
    assert sounds_like(spoken, alias)
    assert not sounds_like(written, alias)


@pytest.mark.parametrize(
    ("element", "words"),
    [
        ('<say-as interpret-as="characters">GW</say-as>', "G W"),
        ('<say-as interpret-as="cardinal">1234</say-as>', "one thousand two hundred thirty-four"),
        ('<say-as interpret-as="ordinal">21</say-as>', "twenty-first"),
        ('<say-as interpret-as="digits">2048</say-as>', "two zero four eight"),
        ('<say-as interpret-as="date" format="dmy">3/12/2026</say-as>', "December third twenty twenty-six"),
        ('<say-as interpret-as="time">10:30am</say-as>', "ten thirty A M"),
        ('<say-as interpret-as="telephone">555-0123</say-as>', "five five five, zero one two three"),
    ],
)
async def test_say_as_sounds_like_its_spelled_out_text(http: Client, element: str, words: str) -> None:
    assert sounds_like(await speak(http, f"<speak>Say {element}.</speak>"), await speak(http, f"Say {words}."))


async def test_a_voice_span_is_spoken_in_its_voice(http: Client) -> None:
    first, second = await speak(http, "Hello there."), await speak(http, "General Kenobi.", voice="onyx")
    spoken = await speak(http, '<speak>Hello there. <voice name="onyx">General Kenobi.</voice></speak>')
    assert is_made_of(spoken, [first, second])
    assert not is_made_of(spoken, [first, await speak(http, "General Kenobi.")])


async def test_prosody_rate_changes_the_spans_speed(http: Client) -> None:
    normal = await speak(http, "This sentence is spoken slowly.")
    slow = await speak(http, '<speak><prosody rate="slow">This sentence is spoken slowly.</prosody></speak>')
    assert 1.15 < seconds(slow) / seconds(normal) < 1.5  # 0.75 times the rate


async def test_the_cache_keys_the_script_not_the_text(http: Client) -> None:
    body = {"model": "espeak", "voice": "alloy", "response_format": "pcm"}
    first = await http.post("/v1/audio/speech", json={**body, "input": '<speak>A<break time="700ms"/>B</speak>'})
    again = await http.post("/v1/audio/speech", json={**body, "input": '<speak>A<break time="700ms"/>B</speak>'})
    other = await http.post("/v1/audio/speech", json={**body, "input": '<speak>A<break time="300ms"/>B</speak>'})
    assert (first.headers["x-cache"], again.headers["x-cache"], other.headers["x-cache"]) == ("miss", "hit", "miss")
    assert again.content == first.content
    assert abs(len(first.content) - len(other.content) - 0.4 * RATE * 2) <= 2


async def test_plain_text_with_angle_brackets_is_spoken_as_text(http: Client) -> None:
    assert seconds(await speak(http, "Is 3 < 4 and <b> bold?")) > 0.5


HOSTILE = {
    "billion laughs": '<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;">'
    '<!ENTITY lol3 "&lol2;&lol2;&lol2;">]><speak>&lol3;</speak>',
    "external entity": '<!DOCTYPE speak [<!ENTITY xxe SYSTEM "file:///etc/passwd">]><speak>&xxe;</speak>',
    "malformed": "<speak>One <break time='1s'>Two</speak>",
    "10,000 deep": "<speak>" + "<s>" * 10_000 + "x" + "</s>" * 10_000 + "</speak>",
}


@pytest.mark.parametrize("document", HOSTILE.values(), ids=HOSTILE.keys())
async def test_hostile_ssml_is_a_400_in_openais_shape_within_100_ms(http: Client, document: str) -> None:
    started = time.perf_counter()
    response = await http.post("/v1/audio/speech", json={"model": "espeak", "voice": "alloy", "input": document})
    assert time.perf_counter() - started < 0.1
    if len(document) > 64 * 1024:  # 10,000 levels: the body cap answers before anything reads it
        assert response.status_code == 413
        return
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "input"
    assert response.json()["error"]["code"] == "invalid_ssml"


async def test_a_megabyte_of_ssml_is_refused_at_once(http: Client) -> None:
    started = time.perf_counter()
    document = "<speak>" + "word " * 200_000 + "</speak>"
    response = await http.post("/v1/audio/speech", json={"model": "espeak", "voice": "alloy", "input": document})
    assert time.perf_counter() - started < 0.1
    assert response.status_code == 413  # the body cap answers before anything reads it


# ---------------------------------------------------------------------------------------------------- ElevenLabs
async def eleven(http: Client, text: str, voice: str = "alloy", **query: Any) -> Any:
    params = {"output_format": "pcm_24000", **query}
    return await http.post(f"/v1/text-to-speech/{voice}", json={"text": text}, params=params)


async def test_elevenlabs_honours_break_tags_always_and_the_rest_only_when_asked(http: Client) -> None:
    one, two = await speak(http, "One."), await speak(http, "Two.")
    broken = await eleven(http, 'One. <break time="1.5s" /> Two.')
    assert is_made_of(np.frombuffer(broken.content, np.int16), [one, np.zeros(36_000, np.int16), two])
    marked = 'Say <sub alias="gateway">GW</sub>.'
    as_text = np.frombuffer((await eleven(http, marked)).content, np.int16)
    parsed = np.frombuffer((await eleven(http, marked, enable_ssml_parsing="true")).content, np.int16)
    assert np.array_equal(parsed, await speak(http, "Say gateway."))
    assert not sounds_like(as_text, parsed)


BREAK_ALONE = '<break time="1s"/>'


@pytest.mark.parametrize("ssml", ["false", "true"])
async def test_elevenlabs_a_text_of_a_break_alone_is_that_much_silence_with_no_characters(
    http: Client, ssml: str
) -> None:
    """Never read aloud (it was: "less-than break time equals one s", 2.3 s), with ``enable_ssml_parsing`` or
    without: a second of silence in the format asked for, charged its characters as sent; markup has no characters
    in the alignment."""
    response = await http.post(
        "/v1/text-to-speech/nova/with-timestamps",
        json={"text": BREAK_ALONE},
        params={"output_format": "mp3_44100_128", "enable_ssml_parsing": ssml},
    )
    assert response.status_code == 200, response.text
    assert response.headers["x-character-count"] == str(len(BREAK_ALONE))
    body = response.json()
    audio = decode_audio(base64.b64decode(body["audio_base64"]), "mp3")
    assert (audio.codec, audio.sample_rate) == ("mp3float", 44_100)
    assert audio.duration == pytest.approx(1.0, abs=DURATION_TOLERANCE_S)
    assert audio.rms < 1e-4
    assert body["alignment"]["characters"] == body["normalized_alignment"]["characters"] == []


async def test_a_text_of_a_break_alone_is_the_same_silence_in_ssml_and_in_a_dialogue(http: Client) -> None:
    silence = np.zeros(RATE, np.int16)
    assert np.array_equal(await speak(http, f"<speak>{BREAK_ALONE}</speak>"), silence)
    alone = await http.post("/v1/text-to-dialogue", json={"inputs": [{"text": BREAK_ALONE, "voice_id": "onyx"}]},
                            params={"output_format": "pcm_24000"})  # fmt: skip
    assert np.array_equal(np.frombuffer(alone.content, np.int16), silence)
    hi = await speak(http, "Hi.")
    turns = [{"text": "Hi.", "voice_id": "alloy"}, {"text": BREAK_ALONE, "voice_id": "onyx"}]
    dialogue = await http.post(
        "/v1/text-to-dialogue/with-timestamps", json={"inputs": turns}, params={"output_format": "pcm_24000"}
    )
    body = dialogue.json()
    assert is_made_of(np.frombuffer(base64.b64decode(body["audio_base64"]), np.int16), [hi, silence])
    assert "".join(body["alignment"]["characters"]) == "Hi."
    assert [segment["dialogue_input_index"] for segment in body["voice_segments"]] == [0]


ZERO = '<break time="0s"/>'
ZERO_BREAKS: dict[str, dict[str, Any]] = {
    "text": {"text": ZERO},
    "ssml": {"text": ZERO, "enable_ssml_parsing": "true"},
    "dialogue": {"inputs": [{"text": ZERO, "voice_id": "alloy"}, {"text": ZERO, "voice_id": "onyx"}]},
}


@pytest.mark.parametrize("body", ZERO_BREAKS.values(), ids=ZERO_BREAKS.keys())
async def test_elevenlabs_breaks_alone_that_last_no_time_are_a_400_however_read(
    http: Client, body: dict[str, Any]
) -> None:
    """Nothing to say and no silence to keep, as a blank text: not an empty audio file."""
    if "inputs" in body:
        response = await http.post("/v1/text-to-dialogue", json=body)
    else:
        response = await eleven(http, **body)
    assert response.status_code == 400
    assert response.json()["detail"]["status"] == "invalid_ssml"
    assert "no text to speak, nor a break that lasts" in response.json()["detail"]["message"]


async def test_elevenlabs_malformed_ssml_is_a_400_in_its_shape(http: Client) -> None:
    response = await eleven(http, "One <break time='soon'/> two", enable_ssml_parsing="true")
    assert response.status_code == 400
    detail = response.json()["detail"]
    assert detail["status"] == "invalid_ssml"
    assert "line 1, column 5" in detail["message"]


async def test_elevenlabs_timestamps_are_of_the_text_spoken(http: Client) -> None:
    response = await http.post(
        "/v1/text-to-speech/alloy/with-timestamps",
        json={"text": 'Say <sub alias="gateway">GW</sub>.'},
        params={"output_format": "pcm_24000", "enable_ssml_parsing": "true"},
    )
    alignment = response.json()["alignment"]
    assert "".join(alignment["characters"]) == "Say gateway."


async def test_a_dialogue_is_its_turns_each_in_its_voice_in_order(http: Client) -> None:
    sdk = AsyncElevenLabs(base_url=str(http.base_url), api_key="anything", httpx_client=http)
    turns = [("Hello there.", "alloy"), ("General Kenobi.", "onyx"), ("You are a bold one.", "coral")]
    inputs = [DialogueInput(text=text, voice_id=voice) for text, voice in turns]
    whole = b"".join([c async for c in sdk.text_to_dialogue.convert(inputs=inputs, output_format="pcm_24000")])
    streamed = b"".join([c async for c in sdk.text_to_dialogue.stream(inputs=inputs, output_format="pcm_24000")])
    apart = [await speak(http, text, voice) for text, voice in turns]
    dialogue = np.frombuffer(whole, np.int16)
    assert abs(seconds(dialogue) - sum(map(seconds, apart))) <= 0.15 * sum(map(seconds, apart))
    assert is_made_of(dialogue, apart)  # each turn in its own voice, in order
    assert streamed == whole
    assert not is_made_of(dialogue, [apart[0], await speak(http, "General Kenobi."), apart[2]])


async def test_a_dialogue_with_an_unknown_voice_is_elevenlabs_404(http: Client) -> None:
    body = {"inputs": [{"text": "Hi.", "voice_id": "alloy"}, {"text": "Who?", "voice_id": "nobody"}]}
    response = await http.post("/v1/text-to-dialogue", json=body)
    assert response.status_code == 404
    assert response.json()["detail"]["status"] == "voice_not_found"


async def test_opting_in_to_control_tokens_is_a_cache_entry_of_its_own(http: Client) -> None:
    body = {"model": "espeak", "voice": "alloy", "input": "Ha [laugh] ha.", "response_format": "pcm"}
    plain = await http.post("/v1/audio/speech", json=body)
    opted = await http.post("/v1/audio/speech", json={**body, "control_tokens": True})
    assert (plain.headers["x-cache"], opted.headers["x-cache"]) == ("miss", "miss")
