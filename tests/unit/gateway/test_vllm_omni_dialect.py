"""vLLM-Omni's dialect of the realtime session, without a socket: which first message chooses it, how its messages
become the session's events, and how what the session does becomes its frames."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.audio.formats import AudioFormat
from gateway.http.errors import OpenAIError
from gateway.native.dialect import NativeDialect
from gateway.realtime.choice import dialect_for
from gateway.schemas import SpeechUsage
from gateway.sessions.session_errors import SessionError
from gateway.sessions.stream_events import InputAppend, InputFlush, ProtocolError, SessionClose, SessionConfig
from gateway.vllm_omni.dialect import VllmOmniDialect

USAGE = SpeechUsage(input_tokens=1, output_tokens=1, total_tokens=2)
MAX_WHOLE_S = 600.0


def parse(dialect: VllmOmniDialect, **message: Any) -> Any:
    return dialect.parse(json.dumps(message), max_depth=32)


@pytest.mark.parametrize(
    ("first", "kind"),
    [
        ('{"type": "session.config", "voice": "nova"}', VllmOmniDialect),
        ('{"type": "session.update", "session": {}}', NativeDialect),
        ('{"type": "input.text", "text": "hi"}', NativeDialect),  # vLLM-Omni's only after its session.config
        ("not json", NativeDialect),
        ("[" * 100 + "]" * 100, NativeDialect),
        (None, NativeDialect),
    ],
)
def test_the_first_message_chooses_the_dialect(first: str | None, kind: type) -> None:
    assert isinstance(dialect_for(first, max_whole_audio_s=MAX_WHOLE_S), kind)


def test_session_config_replaces_every_setting_and_ignores_unknown_fields() -> None:
    dialect = VllmOmniDialect(max_whole_audio_s=MAX_WHOLE_S)
    event = parse(dialect, type="session.config", speaker="echo", speed=2, language="Auto", request_id="r1")

    changed = SessionConfig(model="tones", voice="nova", response_format=AudioFormat.PCM, instructions="calm")
    config = event.apply(changed)

    assert config == SessionConfig(voice="echo", response_format=AudioFormat.WAV, speed=2.0)
    assert dialect.session_updated("s", config, event) == []
    assert (dialect.granularity, dialect.ends_on_error) == ("none", False)


@pytest.mark.parametrize(("seed", "sampled"), [(7, 7), (0, 0), (2**32 + 5, 5), (-1, 2**32 - 1), (None, None)])
def test_session_config_seeds_every_sentence(seed: int | None, sampled: int | None) -> None:
    """vLLM-Omni takes any integer: the same one seeds the same way here, within the speech request's bound."""
    event = parse(VllmOmniDialect(max_whole_audio_s=MAX_WHOLE_S), type="session.config", voice="echo", seed=seed)

    config = event.apply(SessionConfig(seed=3))

    assert config.seed == sampled
    assert config.speech_request("Hi.").seed == sampled


def test_text_messages_map_onto_the_sessions_events() -> None:
    dialect = VllmOmniDialect(max_whole_audio_s=MAX_WHOLE_S)
    assert isinstance(parse(dialect, type="input.text", text="Hi."), InputAppend)
    with pytest.raises(ProtocolError, match="utterance is in progress"):
        parse(dialect, type="session.config")
    assert isinstance(parse(dialect, type="input.done"), InputFlush)
    parse(dialect, type="session.config")  # between utterances it is accepted again
    assert isinstance(parse(dialect, type="session.close"), SessionClose)


@pytest.mark.parametrize(
    ("message", "says"),
    [
        ({"type": "session.config", "stream_audio": True}, "requires response_format='pcm'"),
        ({"type": "session.config", "ref_audio": "https://example.com/a.wav"}, "'ref_audio' is not supported"),
        ({"type": "session.config", "task_type": "VoiceDesign"}, "task_type 'VoiceDesign' is not supported"),
        ({"type": "session.config", "split_granularity": "word"}, "Invalid session config: 'split_granularity'"),
        ({"type": "input.text", "text": None}, "input.text requires a string value"),
        ({"type": "input.flush"}, "Unknown message type: input.flush"),
    ],
)
def test_refused_messages_say_why_as_vllm_omni_does(message: dict[str, Any], says: str) -> None:
    with pytest.raises(ProtocolError) as refused:
        parse(VllmOmniDialect(max_whole_audio_s=MAX_WHOLE_S), **message)
    assert says in refused.value.message


def configured(max_whole_audio_s: float = MAX_WHOLE_S, **config: Any) -> VllmOmniDialect:
    dialect = VllmOmniDialect(max_whole_audio_s=max_whole_audio_s)
    dialect.session_updated("s", SessionConfig(), parse(dialect, type="session.config", **config))
    return dialect


def test_a_sentence_not_streamed_is_one_frame_sent_when_it_is_complete() -> None:
    dialect = configured()
    start = json.loads(str(dialect.segment_started("seg_1", "Hi.", AudioFormat.WAV)[0]))

    held = dialect.audio("seg_1", b"RIFF") + dialect.audio("seg_1", b"data")
    done = dialect.segment_done("seg_1", "Hi.", "completed", USAGE)

    assert start == {
        "type": "audio.start",
        "utterance_index": 0,
        "sentence_index": 0,
        "sentence_text": "Hi.",
        "format": "wav",
    }
    assert held == []
    assert done[0] == b"RIFFdata"
    assert json.loads(str(done[1])) == {
        "type": "audio.done",
        "utterance_index": 0,
        "sentence_index": 0,
        "total_bytes": 8,
        "error": False,
    }
    assert [json.loads(str(f)) for f in dialect.utterance_done()] == [
        {"type": "session.done", "utterance_index": 0, "total_sentences": 1}
    ]


def test_a_streamed_sentence_that_fails_says_its_audio_is_partial() -> None:
    dialect = configured(response_format="pcm", stream_audio=True, split_granularity="sentence")
    dialect.segment_started("seg_1", "One.", AudioFormat.PCM)
    dialect.segment_done("seg_1", "One.", "completed", USAGE)
    start = json.loads(str(dialect.segment_started("seg_2", "Two.", AudioFormat.PCM)[0]))

    assert dialect.audio("seg_2", b"\x01\x00") == [b"\x01\x00"]
    error = json.loads(dialect.error(OpenAIError(500, "engine crashed"), segment_id="seg_2"))
    done = json.loads(str(dialect.segment_done("seg_2", "Two.", "failed", USAGE)[0]))

    assert (start["sentence_index"], start["sample_rate"], start["channels"]) == (1, 24000, 1)
    assert error == {
        "type": "error",
        "message": "Generation failed for utterance 0, sentence 1: engine crashed",
        "partial_audio": True,
        "action": "discard",
    }
    assert (done["total_bytes"], done["error"]) == (2, True)
    assert json.loads(dialect.error(OpenAIError(408, "idle"))) == {"type": "error", "message": "idle"}


def test_a_segment_dropped_before_it_began_is_no_sentence() -> None:
    dialect = configured()
    assert dialect.segment_done("seg_9", "Never spoken.", "cancelled", USAGE) == []
    assert json.loads(str(dialect.utterance_done()[0]))["total_sentences"] == 0


def test_a_sentence_held_past_the_whole_audio_bound_fails_and_holds_nothing() -> None:
    """What a second of WAV takes at 24 kHz (its header included) is held; a byte more fails the sentence with
    vLLM-Omni's error, the encoder's tail after it is dropped, and the next sentence is held afresh."""
    dialect = configured(max_whole_audio_s=1.0)
    dialect.segment_started("seg_1", "Long.", AudioFormat.WAV)
    second = 44 + 24000 * 2

    assert dialect.audio("seg_1", bytes(second)) == []
    with pytest.raises(SessionError) as outgrown:
        dialect.audio("seg_1", b"\x00")
    assert dialect.audio("seg_1", b"tail") == []
    error = json.loads(dialect.error(outgrown.value, segment_id="seg_1"))
    done = dialect.segment_done("seg_1", "Long.", "failed", USAGE)

    assert (outgrown.value.status_code, outgrown.value.code) == (400, "audio_too_long")
    assert error == {"type": "error", "message": f"Generation failed for utterance 0, sentence 0: {outgrown.value}"}
    assert "1 s a sentence sent as one file" in error["message"]
    assert [json.loads(str(frame)) for frame in done] == [
        {"type": "audio.done", "utterance_index": 0, "sentence_index": 0, "total_bytes": 0, "error": True}
    ]
    dialect.segment_started("seg_2", "Short.", AudioFormat.WAV)
    assert dialect.audio("seg_2", bytes(second)) == []
    assert dialect.segment_done("seg_2", "Short.", "completed", USAGE)[0] == bytes(second)
