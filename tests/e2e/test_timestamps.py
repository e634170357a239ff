"""Word timestamps end to end: espeak-ng's marks cross the worker process and come out within 50 ms of espeak-ng's own
word events, in the SSE extension event when a caller asks for it (``word_timestamps``; OpenAI's stream exactly
otherwise), and in the realtime WebSocket's ``audio.words`` events when a session asks for them."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import openai
import pytest
from websockets.asyncio.client import connect

from engines.timing import word_spans
from tests.audio_decode import decode_audio
from tests.espeak_events import TOLERANCE_S, espeak_events, first_events
from tests.realtime_client import Session

if TYPE_CHECKING:
    import httpx

    from harness.gateway_process import GatewayProcess

TEXT = "Timestamps for every word, as espeak speaks them. A second sentence follows the first."


async def test_espeak_words_start_where_espeak_says(http: httpx.AsyncClient) -> None:
    body = {
        "model": "espeak",
        "input": TEXT,
        "voice": "nova",
        "response_format": "pcm",
        "stream_format": "sse",
        "word_timestamps": True,
    }
    async with http.stream("POST", "/v1/audio/speech", json=body) as response:
        assert response.status_code == 200
        events = [json.loads(line[6:]) async for line in response.aiter_lines() if line.startswith("data: ")]
    words = [word for event in events if event["type"] == "speech.audio.timestamps" for word in event["words"]]
    assert {event["kind"] for event in events if event["type"] == "speech.audio.timestamps"} == {"exact"}
    assert [(w["char_start"], w["char_end"]) for w in words] == word_spans(TEXT)
    expected = first_events(TEXT, espeak_events(TEXT, "nova", 1.0))
    assert len(expected) == len(words)
    errors = [abs(words[index]["start"] - seconds) for index, seconds in expected.items()]
    assert max(errors) <= TOLERANCE_S, errors
    pcm = b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta")
    duration = decode_audio(pcm, "pcm").duration
    assert all(w["end"] <= duration + 0.001 for w in words)


def openai_event_validator() -> Any:
    """OpenAI's own schema of the speech stream's events (``CreateSpeechResponseStreamEvent``)."""
    import jsonschema
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT202012

    spec = json.loads((Path(__file__).parents[1] / "data" / "openai-speech-schema.json").read_text())
    registry = Registry().with_resource("urn:openai", Resource.from_contents(spec, default_specification=DRAFT202012))
    schema = {"$ref": "urn:openai#/components/schemas/CreateSpeechResponseStreamEvent"}
    return jsonschema.Draft202012Validator(schema, registry=registry)


def sdk_events(client: openai.OpenAI, text: str, **extra: Any) -> list[Any]:
    with client.audio.speech.with_streaming_response.create(
        model="synthetic", voice="alloy", input=text, response_format="pcm", stream_format="sse", **extra
    ) as response:
        # The SDK's own server-sent-events parser, as it reads every other stream of OpenAI's API.
        return list(openai.Stream(cast_to=object, response=response.http_response, client=client))


def test_the_openai_sdk_reads_only_openais_events_by_default(client: openai.OpenAI, gateway: GatewayProcess) -> None:
    validator = openai_event_validator()
    text = "A client that knows only OpenAI's events reads every one of them."
    events = sdk_events(client, text)
    for event in events:
        validator.validate(event)  # a client dispatching strictly on OpenAI's event types never meets another
    assert [event["type"] for event in events][-1] == "speech.audio.done"
    pcm = b"".join(base64.b64decode(event["audio"]) for event in events if event["type"] == "speech.audio.delta")
    assert decode_audio(pcm, "pcm").duration == pytest.approx(len(text) * 0.02, abs=0.01)


def test_the_timestamps_extension_comes_when_asked(client: openai.OpenAI, gateway: GatewayProcess) -> None:
    validator = openai_event_validator()
    text = "The SDK reads the events it knows and passes over the rest."
    events = sdk_events(client, text, extra_body={"word_timestamps": True})
    kinds = [event["type"] for event in events]
    assert kinds[-1] == "speech.audio.done" and "speech.audio.timestamps" in kinds
    stamps = [event for event in events if event["type"] == "speech.audio.timestamps"]
    assert "".join(c for event in stamps for c in event["alignment"]["characters"]) == text
    known = [event for event in events if event["type"] != "speech.audio.timestamps"]
    for event in known:
        validator.validate(event)  # what OpenAI's clients read is OpenAI's shape, untouched
    pcm = b"".join(base64.b64decode(event["audio"]) for event in known if event["type"] == "speech.audio.delta")
    assert decode_audio(pcm, "pcm").duration == pytest.approx(len(text) * 0.02, abs=0.01)


def test_timestamps_without_events_are_refused(client: openai.OpenAI, gateway: GatewayProcess) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.audio.speech.create(model="synthetic", voice="alloy", input="x", extra_body={"word_timestamps": True})
    assert refused.value.body["param"] == "word_timestamps"  # type: ignore[index]


async def test_realtime_word_events_come_when_a_session_asks(gateway: GatewayProcess) -> None:
    url = gateway.base_url.replace("http://", "ws://") + "/v1/audio/speech/stream"
    async with connect(url) as socket:
        session = Session(socket)
        await session.next("session.created")
        await session.send(type="session.update", session={"model": "espeak", "voice": "nova", "word_timestamps": True})
        assert (await session.next("session.updated"))["session"]["word_timestamps"] is True
        await session.send(type="input.append", text=TEXT)
        await session.send(type="session.close")
        await session.until_closed()
    done = session.of("audio.done")
    assert len(done) == 2  # two sentences, two segments
    for segment in done:
        words = [w for e in session.of("audio.words") if e["segment_id"] == segment["segment_id"] for w in e["words"]]
        text = segment["text"]
        assert [w["text"] for w in words] == [text[a:b] for a, b in word_spans(text)]
        expected = first_events(text, espeak_events(text, "nova", 1.0))
        for index, seconds in expected.items():
            assert abs(words[index]["start_ms"] / 1000 - seconds) <= TOLERANCE_S
        audio_ms = segment["usage"]["output_tokens"] * 20  # 20 ms frames
        assert all(w["start_ms"] <= w["end_ms"] <= audio_ms + 20 for w in words)
    # Each segment's words come before its audio.done.
    order = [(e["type"], e.get("segment_id")) for _, e in session.events if e["type"] in {"audio.words", "audio.done"}]
    for segment in done:
        last_words = max(i for i, item in enumerate(order) if item == ("audio.words", segment["segment_id"]))
        assert last_words < order.index(("audio.done", segment["segment_id"]))


async def test_a_session_that_does_not_ask_gets_no_word_events(gateway: GatewayProcess) -> None:
    url = gateway.base_url.replace("http://", "ws://") + "/v1/audio/speech/stream"
    async with connect(url) as socket:
        session = Session(socket)
        await session.send(type="session.update", session={"model": "espeak", "voice": "nova"})
        await session.send(type="input.append", text="No words asked for.")
        await session.send(type="session.close")
        await session.until_closed()
    assert session.of("audio.done") and not session.of("audio.words")
