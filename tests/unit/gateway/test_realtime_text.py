"""The realtime endpoint's pure parts: cutting streamed text into sentences, and validating client messages."""

from __future__ import annotations

import json

import pytest

from gateway.native.protocol import parse_client_event
from gateway.sessions.segmenter import SentenceBuffer
from gateway.sessions.stream_events import (
    InputAppend,
    ProtocolError,
    SessionConfig,
    SessionUpdate,
)


def feed(buffer: SentenceBuffer, text: str, size: int) -> list[str]:
    """``text`` appended ``size`` characters at a time, as an LLM streams tokens; the segments it completed."""
    segments: list[str] = []
    for start in range(0, len(text), size):
        segments += buffer.append(text[start : start + size])
    return segments


@pytest.mark.parametrize("size", [1, 3, 7, 1000])
def test_sentences_come_out_as_soon_as_they_end_whatever_the_fragment_size(size: int) -> None:
    text = "Hello there. Dr. Smith paid 3.5 dollars! Did he? (Yes.) Then: “quoted.” And an unfinished one"
    buffer = SentenceBuffer(max_chars=300)

    segments = feed(buffer, text, size)

    assert segments == ["Hello there.", "Dr. Smith paid 3.5 dollars!", "Did he?", "(Yes.)", "Then: “quoted.”"]
    assert buffer.flush() == ["And an unfinished one"]
    assert buffer.pending_chars == 0


def test_a_sentence_end_waits_for_the_next_character() -> None:
    buffer = SentenceBuffer(max_chars=300)
    assert buffer.append("It costs 3.") == []  # "3.5" or the end? only the next character tells
    assert buffer.append("5 now. ") == ["It costs 3.5 now."]


def test_cjk_full_stops_need_no_space_and_newlines_end_segments() -> None:
    buffer = SentenceBuffer(max_chars=300)
    assert buffer.append("你好。再见\uff01第三") == ["你好。", "再见\uff01"]  # a fullwidth exclamation mark
    assert buffer.append("句\nnext line") == ["第三句"]
    assert buffer.flush() == ["next line"]


def test_long_runs_without_punctuation_are_cut_at_clauses_then_words_within_the_limit() -> None:
    buffer = SentenceBuffer(max_chars=40)
    clause = "one two three four five, six seven eight nine ten eleven twelve"
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa"

    cut_clause = buffer.append(clause)
    buffer.clear()
    cut_words = buffer.append(words)

    assert cut_clause == ["one two three four five,"]
    assert all(len(segment) <= 40 for segment in cut_words)
    assert cut_words[0] == "alpha beta gamma delta epsilon zeta eta"
    assert " ".join([*cut_words, *buffer.flush()]) == words


def test_segments_without_anything_to_say_are_dropped() -> None:
    buffer = SentenceBuffer(max_chars=300)
    assert buffer.append("... !? \n\n") == []
    assert buffer.flush() == []


def test_cancel_clears_what_was_not_segmented() -> None:
    buffer = SentenceBuffer(max_chars=300)
    buffer.append("half a sent")
    buffer.clear()
    assert buffer.flush() == []


def test_granularity_none_holds_everything_until_a_flush_and_hands_it_out_whole() -> None:
    buffer = SentenceBuffer(max_chars=20, granularity="none")
    text = "First sentence here. Second one, longer than twenty characters. Third"

    assert feed(buffer, text, 5) == []
    assert buffer.flush() == [text]
    assert buffer.pending_chars == 0


def test_granularity_clause_cuts_at_clause_breaks_too() -> None:
    buffer = SentenceBuffer(max_chars=300, granularity="clause")
    assert feed(buffer, "Well, this is it; I think. Or", 3) == ["Well,", "this is it;", "I think."]
    assert buffer.flush() == ["Or"]


def test_client_events_parse_into_their_types() -> None:
    update = parse_client_event(json.dumps({"type": "session.update", "session": {"voice": "nova", "speed": 1.5}}))
    append = parse_client_event('{"type": "input.append", "text": "Hi", "event_id": "e7"}')

    assert isinstance(update, SessionUpdate)
    config = update.apply(SessionConfig())
    assert (config.voice, config.speed, config.model) == ("nova", 1.5, "tts-1")
    assert update.changes(SessionConfig()) == {"voice", "speed"}
    assert isinstance(append, InputAppend)
    assert (append.text, append.event_id) == ("Hi", "e7")


@pytest.mark.parametrize(
    ("message", "code", "param"),
    [
        ("nope", "invalid_json", None),
        ("[]", "invalid_event", None),
        ('{"type": "input.shout"}', "unknown_event", "type"),
        ('{"type": "input.append", "text": 5}', "invalid_value", "text"),
        ('{"type": "input.append", "text": "%s"}' % ("x" * 4097), "string_above_max_length", "text"),
        ('{"type": "input.flush", "extra": 1}', "invalid_value", "extra"),
        (
            '{"type": "session.update", "session": {"response_format": "ogg"}}',
            "invalid_value",
            "session.response_format",
        ),
        ('{"type": "session.update", "session": {"speed": 0.1}}', "invalid_value", "session.speed"),
    ],
)
def test_bad_client_events_are_refused_with_a_code_and_param(message: str, code: str, param: str | None) -> None:
    with pytest.raises(ProtocolError) as refused:
        parse_client_event(message)
    assert (refused.value.code, refused.value.param) == (code, param)
    assert refused.value.message
