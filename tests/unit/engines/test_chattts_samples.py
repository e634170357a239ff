"""Voices from samples with ChatTTS on the tiny random-weight assets: real DVAE codes, the prompt ChatTTS builds for
``spk_smp``/``txt_smp``, generation conditioned on it, and the same through a real batching worker process."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import torch

from engines.base import CancelFlag, EngineInfo, InvalidSynthesisRequestError, SynthesisRequest
from engines.chattts import ChatTTSEngine
from engines.chattts.generation import CodeBatch, CodeRequest
from engines.chattts.voices import SAMPLE_PREFIX, SampleVoice, sample_frames
from engines.espeak import EspeakEngine
from engines.pool import EnginePool
from engines.samples import speaker_from_sample
from engines.settings import local_engine_settings
from tests.chattts_assets import TEST_TOKENS, chattts_engine_options

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

pytestmark = pytest.mark.slow  # runs ChatTTS: left out of `make quick`

RATE = 24000
TRANSCRIPT = "Hello, this is how I sound | and that is all."
TEXT = "Hello there."
SAMPLES_PER_SEGMENT = TEST_TOKENS * 512 - 256


def recording(seconds: float = 3.0, frequency: float = 180.0, rate: int = RATE) -> np.ndarray:
    """A voiced tone with harmonics and a little noise, mono int16."""
    t = np.arange(int(seconds * rate)) / rate
    wave = sum(0.3 / k * np.sin(2 * math.pi * k * frequency * t) for k in range(1, 6))
    wave += np.random.default_rng(int(frequency)).normal(0, 0.02, t.size)
    return (wave * 32767).astype(np.int16)


@pytest.fixture(scope="module")
def loaded() -> tuple[ChatTTSEngine, EngineInfo]:
    engine = ChatTTSEngine(chattts_engine_options(max_sample_s=10))
    info = engine.load()
    assert info.clones_voices
    return engine, info


@pytest.fixture(scope="module")
def engine(loaded: tuple[ChatTTSEngine, EngineInfo]) -> ChatTTSEngine:
    return loaded[0]


@pytest.fixture(scope="module")
def speaker(engine: ChatTTSEngine) -> str:
    return engine.speaker_from_sample(recording(), RATE, TRANSCRIPT)


def speak(engine: ChatTTSEngine, speaker: str | None, seed: int = 7, text: str = TEXT) -> np.ndarray:
    request = SynthesisRequest(text, "alloy" if speaker is None else "voice_x", speaker=speaker, seed=seed)
    return np.concatenate(list(engine.synthesize(request, CancelFlag())))


class RecordingBatch(CodeBatch):
    """The real token loop, keeping every token it samples (the audio codes)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.tokens: list[torch.Tensor] = []

    def _sample(self, hidden: torch.Tensor, rows: Any, logits: torch.Tensor | None = None) -> torch.Tensor:
        tokens = super()._sample(hidden, rows, logits)
        self.tokens.append(tokens.clone())
        return tokens


def code_request(engine: ChatTTSEngine, speaker: str | None, seed: int = 7) -> CodeRequest:
    request = SynthesisRequest(TEXT, "alloy" if speaker is None else "voice_x", speaker=speaker, seed=seed)
    plan = engine._plan(0, request, CancelFlag())
    return engine._code_request(plan)


def audio_codes(engine: ChatTTSEngine, speaker: str | None, seed: int = 7) -> torch.Tensor:
    batch = RecordingBatch(engine._chat, engine._sampling())
    batch.join([code_request(engine, speaker, seed)])
    while batch.size:
        batch.step()
    return torch.cat(batch.tokens)


# ----------------------------------------------------------------- the speaker string
def test_the_speaker_is_chattts_own_prompt_and_the_transcript(engine: ChatTTSEngine, speaker: str) -> None:
    chat = engine._chat
    wav = recording().astype(np.float32) / 32768.0
    assert speaker == f"{SAMPLE_PREFIX}{chat.sample_audio_speaker(wav)}|{TRANSCRIPT}"
    assert engine.speaker_from_sample(recording(), RATE, TRANSCRIPT) == speaker, "the same sample, the same voice"
    assert engine.speaker_from_sample(recording(frequency=260.0), RATE, TRANSCRIPT) != speaker


def test_the_speaker_string_round_trips(engine: ChatTTSEngine, speaker: str) -> None:
    assert engine._voices is not None
    voice = engine._voices.resolve("voice_x", speaker)
    assert isinstance(voice, SampleVoice)
    assert voice.transcript == TRANSCRIPT, "a '|' in the transcript is the transcript's"
    codes = engine._chat.dvae.sample_audio(torch.from_numpy(recording().astype(np.float32) / 32768.0))
    assert torch.equal(voice.codes, codes.t().long())
    frames = (3 * RATE // 256 + 1) // 2  # a mel frame every 256 samples (centred), two to a code
    assert voice.codes.shape == (frames, 4)
    assert frames <= sample_frames(3.0)
    assert engine._voices.sample_speaker(voice.codes.t(), voice.transcript) == speaker


def test_a_sample_at_another_rate_is_resampled(engine: ChatTTSEngine) -> None:
    assert engine._voices is not None
    speaker = engine.speaker_from_sample(recording(rate=16000), 16000, TRANSCRIPT)
    voice = engine._voices.resolve("voice_x", speaker)
    assert isinstance(voice, SampleVoice)
    assert abs(len(voice.codes) - 3.0 * RATE / 512) <= 2


# ----------------------------------------------------------------- the prompt, as ChatTTS builds it
def test_the_prompt_is_the_one_chattts_builds_for_spk_smp(engine: ChatTTSEngine, speaker: str) -> None:
    from engines.chattts.rows import Rows

    chat = engine._chat
    spk_smp = speaker.removeprefix(SAMPLE_PREFIX).partition("|")[0]
    # Words the tokenizer reads whole: a character it cannot read is dropped here (as from the input), not [UNK].
    transcript = "Hello, this is how I sound."
    speaker = f"{SAMPLE_PREFIX}{spk_smp}|{transcript}"
    # ChatTTS 0.2.5's own _infer_code, up to the embeddings it hands GPT.generate (no spk_emb: no speaker.apply).
    texts = chat.speaker.decorate_code_prompts([TEXT], "[speed_5]", transcript, None)
    assert texts == [f"[Stts][empty_spk]{transcript}[speed_5]{TEXT}[Ptts]"]
    input_ids, attention_mask, text_mask = chat.tokenizer.encode(
        texts, chat.config.gpt.num_vq, prompt=chat.speaker.decode_prompt(spk_smp), device=chat.device_gpt
    )
    theirs = chat.embed(input_ids, text_mask)

    request = code_request(engine, speaker)
    assert request.speaker is None
    assert request.prompt_codes is not None
    frames = len(request.prompt_codes)
    assert list(request.token_ids) == input_ids[0, :-frames, 0].tolist()
    assert torch.equal(request.prompt_codes, input_ids[0, -frames:].long())
    rows = Rows(chat, [request])
    assert torch.equal(rows.mask, attention_mask.long())
    assert torch.equal(rows.inputs, theirs)


def test_generation_is_conditioned_on_the_sample(engine: ChatTTSEngine, speaker: str) -> None:
    with_sample = audio_codes(engine, speaker)
    assert with_sample.shape == (TEST_TOKENS, 4)
    assert torch.equal(audio_codes(engine, speaker), with_sample), "the same prompt and seed, the same codes"
    assert not torch.equal(audio_codes(engine, None), with_sample), "without the prompt, other codes"
    other = engine.speaker_from_sample(recording(frequency=260.0), RATE, TRANSCRIPT)
    assert not torch.equal(audio_codes(engine, other), with_sample), "another sample, other codes"
    assert not torch.equal(audio_codes(engine, speaker, seed=8), with_sample)


def test_the_same_sample_and_seed_speak_the_same_audio(engine: ChatTTSEngine, speaker: str) -> None:
    audio = speak(engine, speaker)
    assert len(audio) == SAMPLES_PER_SEGMENT
    assert np.array_equal(speak(engine, speaker), audio)
    assert not np.array_equal(speak(engine, None), audio)


def test_a_sample_voice_batched_with_others_speaks_as_alone(engine: ChatTTSEngine, speaker: str) -> None:
    requests = [
        SynthesisRequest("One. Two.", "voice_x", speaker=speaker, seed=3),
        SynthesisRequest("Another one.", "nova", seed=4),
    ]
    items: dict[int, list[np.ndarray]] = {0: [], 1: []}
    for index, item in engine.synthesize_batch(requests, [CancelFlag(), CancelFlag()]):
        if isinstance(item, np.ndarray):
            items[index].append(item)
    for index, request in enumerate(requests):
        alone = np.concatenate(list(engine.synthesize(request, CancelFlag())))
        # Batched products round differently in the last bits, as for every batched request (test_chattts.py).
        assert np.allclose(np.concatenate(items[index]), alone, atol=2)


# ----------------------------------------------------------------- refusals
def test_a_sample_too_long_or_too_short_is_refused_saying_the_bounds(engine: ChatTTSEngine) -> None:
    for seconds in (10.5, 0.5):
        with pytest.raises(InvalidSynthesisRequestError, match=r"1 to 10 s .*16384 characters") as refused:
            engine.speaker_from_sample(recording(seconds), RATE, TRANSCRIPT)
        assert refused.value.param == "audio_sample"


@pytest.mark.parametrize("transcript", ["", "   ", "\U0001f642\U0001f642", "x" * 2001])
def test_a_transcript_chattts_cannot_read_is_refused(loaded: tuple[ChatTTSEngine, EngineInfo], transcript: str) -> None:
    with pytest.raises(InvalidSynthesisRequestError) as refused:
        speaker_from_sample(*loaded, recording().astype("<i2").tobytes(), RATE, transcript)
    assert refused.value.param == "transcript"


def test_an_engine_that_cannot_clone_refuses() -> None:
    espeak = EspeakEngine()
    info = espeak.load()
    assert not info.clones_voices
    with pytest.raises(InvalidSynthesisRequestError, match="cannot make a voice") as refused:
        speaker_from_sample(espeak, info, recording().astype("<i2").tobytes(), RATE, TRANSCRIPT)
    assert refused.value.param == "audio_sample"


def malformed(engine: ChatTTSEngine, speaker: str) -> list[str]:
    assert engine._voices is not None
    prompt = speaker.removeprefix(SAMPLE_PREFIX).partition("|")[0]
    codes = engine._chat.speaker.decode_prompt(prompt)
    three_rows = engine._chat.speaker.encode_prompt(codes[:3])
    too_long = engine._chat.speaker.encode_prompt(torch.zeros(4, 1000, dtype=torch.int32))
    eos = engine._chat.speaker.encode_prompt(torch.full((4, 10), 625, dtype=torch.int32))
    return [
        "smp:", f"smp:{prompt}", f"smp:{prompt}|", f"smp:{prompt}| ", "smp:garbage|words",
        f"smp:{three_rows}|words", f"smp:{too_long}|words", f"smp:{eos}|words",
    ]  # fmt: skip


def test_a_malformed_sample_speaker_is_an_invalid_request(engine: ChatTTSEngine, speaker: str) -> None:
    for bad in malformed(engine, speaker):
        with pytest.raises(InvalidSynthesisRequestError) as refused:
            speak(engine, bad)
        assert refused.value.param == "voice", bad


# ----------------------------------------------------------------- a real batching worker process
@pytest.fixture(scope="module")
async def pool() -> AsyncIterator[EnginePool]:
    # Long segments (600 tokens each), so that a synthesis is still running when the sample arrives.
    options = chattts_engine_options(max_batch=2, max_new_token=600, min_new_token=600, max_sample_s=10)
    engine_pool = EnginePool("chattts", local_engine_settings(kind="chattts", workers=1, options=options))
    await engine_pool.start()
    assert await engine_pool.wait_ready(120), engine_pool.status().reason
    yield engine_pool
    await engine_pool.stop()


async def test_a_batching_worker_answers_a_sample_while_it_speaks(
    pool: EnginePool, engine: ChatTTSEngine, speaker: str
) -> None:
    request = SynthesisRequest("One sentence. Another one. And a third.", "nova", seed=1)
    async with pool.open_stream(request) as stream:
        chunks = aiter(stream)
        await anext(chunks)  # the batch runs
        made = await pool.speaker_from_sample(recording().astype("<i2").tobytes(), RATE, TRANSCRIPT)
        # Audio still to come: the synthesis was running when the sample was answered. The rest is not waited for
        # (three 600-token sentences): leaving the stream cancels it.
        assert await anext(chunks, None) is not None, "the synthesis ended before the sample was answered"
    assert made == speaker, "the worker's speaker is the engine's"
    assert pool.status().restarts == 0


async def test_a_worker_speaks_a_sample_voice_as_the_engine_does(pool: EnginePool, speaker: str) -> None:
    options = chattts_engine_options(max_new_token=600, min_new_token=600, max_sample_s=10)
    alone = ChatTTSEngine(options)
    alone.load()
    request = SynthesisRequest(TEXT, "voice_x", speaker=speaker, seed=11)
    expected = np.concatenate(list(alone.synthesize(request, CancelFlag())))
    async with pool.open_stream(request) as stream:
        pcm = b"".join([chunk async for chunk in stream])
    got = np.frombuffer(pcm, "<i2")
    # Chunk sizes follow the pace of the consumer, and decoding other windows rounds the last bit differently.
    assert np.allclose(got, expected, atol=2)
    with pytest.raises(InvalidSynthesisRequestError) as refused:
        await pool.speaker_from_sample(recording(11.0).astype("<i2").tobytes(), RATE, TRANSCRIPT)
    assert refused.value.param == "audio_sample"
