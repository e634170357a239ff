"""What each engine kind says of a custom voice's speaker when the voice is made (``engines.registry.check_speaker``):
ChatTTS speaker strings written by ChatTTS's own encoders against the tiny generated weights' dimensions, and the
kinds that take any printable speaker or none."""

from __future__ import annotations

import lzma
import time
from typing import TYPE_CHECKING

import pybase16384 as b14  # type: ignore[import-untyped]
import pytest
import torch
from ChatTTS.config import Config
from ChatTTS.model.speaker import Speaker

from engines.base import InvalidSynthesisRequestError
from engines.chattts.options import ChatTTSOptions
from engines.chattts.speaker_strings import PUBLISHED_SHAPE, speaker_shape
from engines.espeak.options import EspeakOptions
from engines.registry import ENGINE_KINDS, SPEAKER_CHECKS, check_speaker
from engines.synthetic import SyntheticOptions
from tests.chattts_assets import chattts_engine_options

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

pytestmark = pytest.mark.slow  # ChatTTS's encoders import torch

TINY_DIM = 32  # the tiny preset's hidden size (engines/chattts/assets.py)


@pytest.fixture(scope="module")
def tiny() -> ChatTTSOptions:
    return ChatTTSOptions.model_validate(chattts_engine_options())


def embedding(values: object) -> str:
    """A ``spk_emb`` as ChatTTS writes one (``Chat.sample_random_speaker``)."""
    encoded: str = Speaker._encode(torch.tensor(values, dtype=torch.float16))
    return encoded


def sample(codes: object, transcript: str = "Hello there.") -> str:
    """A sample speaker as the engine writes one: ChatTTS's speaker prompt of ``codes`` and the transcript."""
    return f"smp:{Speaker.encode_prompt(torch.tensor(codes))}|{transcript}"


def refusal(kind: str, options: object, speaker: str) -> InvalidSynthesisRequestError:
    with pytest.raises(InvalidSynthesisRequestError) as refused:
        check_speaker(kind, options, speaker)  # type: ignore[arg-type]
    return refused.value


def lzma_bomb() -> str:
    """1.7 KB of base16384 that would decompress to 20 MB of zeros."""
    filters = [{"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME}]
    encoded: str = b14.encode_to_string(lzma.compress(bytes(20_000_000), format=lzma.FORMAT_RAW, filters=filters))
    return encoded


def test_every_engine_kind_says_what_its_speakers_are() -> None:
    assert set(SPEAKER_CHECKS) == set(ENGINE_KINDS)


def test_the_published_shape_is_chattts_own_configuration() -> None:
    config = Config()
    assert (PUBLISHED_SHAPE.dim, PUBLISHED_SHAPE.num_vq, PUBLISHED_SHAPE.num_audio_tokens) == (
        config.gpt.hidden_size,
        config.gpt.num_vq,
        config.gpt.num_audio_tokens,
    )


def test_the_shape_comes_from_the_weights_the_options_name(tiny: ChatTTSOptions, tmp_path: Path) -> None:
    assert speaker_shape(tiny).dim == TINY_DIM
    assert speaker_shape(ChatTTSOptions(source="hub", cache_dir=str(tmp_path))).dim == PUBLISHED_SHAPE.dim
    assert speaker_shape(ChatTTSOptions(source="dir", path=f"{tmp_path}/not-there")).dim is None


@pytest.mark.parametrize(
    "speaker",
    [
        lambda: embedding([0.5] * TINY_DIM),
        lambda: "seed:7",
        lambda: "seed:-12",
        lambda: sample([[1, 2, 3]] * 4),
        lambda: sample([[624] * 900] * 4, "Any text | at all."),
    ],
    ids=["spk_emb", "seed", "negative-seed", "sample", "long-sample"],
)
def test_what_the_tiny_weights_can_speak_with_is_let_through(tiny: ChatTTSOptions, speaker: Callable[[], str]) -> None:
    check_speaker("chattts", tiny, speaker())


BAD_CHATTTS = {
    "garbage": (lambda: "garbage", "not a valid spk_emb string"),
    "not-base16384": (lambda: "\ud800", "not a valid spk_emb string"),
    "cut-short": (lambda: embedding([0.5] * TINY_DIM)[:-3], "not a valid spk_emb string"),
    "lzma-bomb": (lzma_bomb, "more than 1048576 bytes"),
    "too-many-values": (lambda: embedding([0.5] * (TINY_DIM + 8)), "has 40 values; these weights need 32"),
    "published-size": (lambda: embedding([0.5] * 768), "has 768 values; these weights need 32"),
    "nan": (lambda: embedding([float("nan")] * TINY_DIM), "not finite and non-zero"),
    "infinity": (lambda: embedding([0.5] * (TINY_DIM - 1) + [float("inf")]), "not finite and non-zero"),
    "zeros": (lambda: embedding([0.0] * TINY_DIM), "not finite and non-zero"),
    "seed-not-a-number": (lambda: "seed:seven", "needs an integer"),
    "sample-without-transcript": (lambda: sample([[1, 2]] * 4, " "), "both non-empty"),
    "sample-garbage": (lambda: "smp:garbage|Hello.", "not a valid spk_smp string"),
    "sample-three-rows": (lambda: sample([[1, 2]] * 3), "must be 4 by 1 to"),
    "sample-too-long": (lambda: sample([[1] * 1500] * 4), "must be 4 by 1 to 1408 codes"),
    "sample-end-of-speech": (lambda: sample([[1, 625]] * 4), "out of range"),
}


@pytest.mark.parametrize(("speaker", "message"), BAD_CHATTTS.values(), ids=BAD_CHATTTS.keys())
def test_a_chattts_speaker_the_weights_cannot_use_is_refused_naming_it(
    tiny: ChatTTSOptions, speaker: Callable[[], str], message: str
) -> None:
    bad = speaker()
    started = time.monotonic()
    refused = refusal("chattts", tiny, bad)
    assert time.monotonic() - started < 0.5  # nothing is decompressed beyond a mebibyte
    assert refused.param == "speaker"
    assert message in str(refused)


def test_without_weights_any_count_passes_but_not_what_is_no_embedding(tmp_path: Path) -> None:
    unknown = ChatTTSOptions(source="dir", path=f"{tmp_path}/not-there")
    check_speaker("chattts", unknown, embedding([0.5] * 768))
    assert refusal("chattts", unknown, embedding([float("nan")] * 768)).param == "speaker"


@pytest.mark.parametrize("speaker", ["seed:7", "anything"])
def test_espeak_takes_no_custom_voice_naming_the_model(speaker: str) -> None:
    refused = refusal("espeak", EspeakOptions(), speaker)
    assert refused.param == "model"
    assert "espeak-ng takes no custom voices" in str(refused)


def test_the_synthetic_engine_takes_any_printable_speaker() -> None:
    check_speaker("synthetic", SyntheticOptions(), "seed:7")
    check_speaker("synthetic", SyntheticOptions(), "\u4e00" * 16384)
    assert refusal("synthetic", SyntheticOptions(), "bell\x07").param == "speaker"
