"""The ChatTTS engine on tiny random-weight assets: real ChatTTS modules, our loader, voices, streaming and batching."""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from engines.base import CancelFlag, EngineUnavailableError, InvalidSynthesisRequestError, SynthesisRequest
from engines.chattts import ChatTTSEngine
from engines.chattts.assets import HASH_FILE, MARKER_FILE
from engines.chattts.loader import locate_weights, verify_directory
from engines.chattts.options import ChatTTSOptions
from engines.chattts.text import control_tags, speed_tag, split_segments
from tests.chattts_assets import TEST_TOKENS, audio_tolerance, chattts_engine_options, tiny_assets_dir

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

pytestmark = pytest.mark.slow  # runs ChatTTS: left out of `make quick`

SAMPLES_PER_SEGMENT = TEST_TOKENS * 512 - 256  # every segment is exactly TEST_TOKENS tokens long here


@pytest.fixture(scope="module")
def engine() -> ChatTTSEngine:
    loaded = ChatTTSEngine(chattts_engine_options())
    loaded.load()
    return loaded


@pytest.fixture(scope="module", params=["onnxruntime", "torch", "onnxruntime-int8"])
def any_decoder(request: pytest.FixtureRequest, engine: ChatTTSEngine) -> ChatTTSEngine:
    """The engine with each decoder (``engine`` itself steps through ONNX Runtime: ``auto`` on CPU), and with 8-bit
    decode steps (their prefill in 8 bits too, as ``auto`` takes it on CPUs without bfloat16 arithmetic: the other
    engine tests' 8-bit engines take ``auto``'s choice, bfloat16 where the CPU has it)."""
    if request.param == "onnxruntime":
        assert engine._graph is not None
        return engine
    decoder, _, weights = request.param.partition("-")
    extra = {"weights": weights, "prefill_weights": "int8"} if weights else {}
    loaded = ChatTTSEngine(chattts_engine_options(decoder=decoder, **extra))
    loaded.load()
    return loaded


def speak(engine: ChatTTSEngine, text: str, **fields: Any) -> np.ndarray:
    request = SynthesisRequest(text=text, voice=fields.pop("voice", "alloy"), **fields)
    chunks = list(engine.synthesize(request, CancelFlag()))
    return np.concatenate(chunks)


def run_batch(
    engine: ChatTTSEngine,
    requests: list[SynthesisRequest],
    cancels: list[CancelFlag],
) -> dict[int, list[Any]]:
    items: dict[int, list[Any]] = {i: [] for i in range(len(requests))}
    for index, item in engine.synthesize_batch(requests, cancels):
        assert not items[index] or items[index][-1] is not None, "nothing may follow a request's end"
        items[index].append(item)
    return items


# ----------------------------------------------------------------- assets and loading
def copy_assets(tmp_path: Path) -> Path:
    target = tmp_path / "assets"
    shutil.copytree(tiny_assets_dir(), target)
    return target


def test_generated_assets_verify_against_their_own_hashes() -> None:
    location = verify_directory(tiny_assets_dir())
    assert location.generated
    assert "preset tiny" in location.description


def test_a_tampered_file_fails_the_hash_check(tmp_path: Path) -> None:
    assets = copy_assets(tmp_path)
    decoder = assets / "asset" / "Decoder.safetensors"
    data = bytearray(decoder.read_bytes())
    data[-1] ^= 0xFF
    decoder.write_bytes(bytes(data))
    with pytest.raises(EngineUnavailableError, match=r"Decoder\.safetensors does not match its own sha256_map"):
        verify_directory(assets)


def test_a_directory_without_marker_must_match_chattts_published_hashes(tmp_path: Path) -> None:
    assets = copy_assets(tmp_path)
    (assets / MARKER_FILE).unlink()
    with pytest.raises(EngineUnavailableError, match="does not match ChatTTS's published sha256 map"):
        verify_directory(assets)


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    assets = copy_assets(tmp_path)
    (assets / "asset" / "gpt" / "model.safetensors").unlink()
    with pytest.raises(EngineUnavailableError, match=r"asset/gpt/model\.safetensors is missing"):
        verify_directory(assets)


def test_a_cached_hub_snapshot_loads_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    snapshot = tmp_path / "models--2Noise--ChatTTS" / "snapshots" / "0123abcd"
    shutil.copytree(tiny_assets_dir(), snapshot)
    assert locate_weights("hub", None, tmp_path, download=True, timeout_s=1).path == snapshot


def test_no_weights_and_no_hub_is_unavailable_quickly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # the discard port: nothing listens
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    started = time.monotonic()
    with pytest.raises(EngineUnavailableError, match="hub is unreachable"):
        ChatTTSEngine({"cache_dir": str(tmp_path)}).load()
    assert time.monotonic() - started < 5


def test_a_worker_without_weights_fails_before_importing_torch(tmp_path: Path) -> None:
    # A replica whose weights volume is not mounted yet retries with backoff: each try must not cost a torch import.
    script = (
        "import json, sys\n"
        "from engines.base import EngineUnavailableError\n"
        "from engines.chattts import ChatTTSEngine\n"
        f"options = {{'cache_dir': {str(tmp_path)!r}, 'download': False}}\n"
        "try:\n"
        "    ChatTTSEngine(options).load()\n"
        "except EngineUnavailableError as exc:\n"
        "    print(json.dumps([str(exc), 'torch' in sys.modules]))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    reason, torch_imported = json.loads(done.stdout)
    assert "downloading is disabled" in reason
    assert not torch_imported


def test_dir_source_without_path_says_so() -> None:
    with pytest.raises(EngineUnavailableError, match="needs the 'path' option"):
        ChatTTSEngine({"source": "dir"}).load()


@pytest.mark.parametrize(
    "options",
    [
        {"colour": "blue"},
        {"source": "ftp"},
        {"max_batch": 0},
        {"min_new_token": 9, "max_new_token": 8},
        {"stream_chunk_tokens": 48, "stream_max_chunk_tokens": 24},
        {"dtype": "float64"},
        {"half": True},  # replaced by ``dtype``
    ],
)
def test_bad_options_are_rejected(options: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="ChatTTSOptions"):
        ChatTTSOptions.model_validate(options)


def test_the_backbone_runs_in_float32_on_cpu_by_default(engine: ChatTTSEngine) -> None:
    import torch

    assert engine._chat.gpt.gpt.dtype == torch.float32
    info = ChatTTSEngine(chattts_engine_options()).load()
    assert info.details["dtype"] == "float32"


def test_a_bfloat16_backbone_computes_what_float32_does_within_its_precision(engine: ChatTTSEngine) -> None:
    """``dtype: bfloat16``: the backbone's weights are bfloat16, the token loop runs with them, and the first hidden
    state of a prompt (no sampling before it) is float32's to bfloat16's precision; the audio is whole."""
    import torch

    from engines.chattts.generation import CodeBatch, CodeRequest, Sampling

    narrow = ChatTTSEngine(chattts_engine_options(dtype="bfloat16"))
    assert narrow.load().details["dtype"] == "bfloat16"
    assert {p.dtype for p in narrow._chat.gpt.gpt.parameters()} == {torch.bfloat16}

    def first_hidden(loaded: ChatTTSEngine) -> torch.Tensor:
        assert loaded._voices is not None
        prompt = loaded.prompts.named_voice_prompt("one two three")
        batch = CodeBatch(loaded._chat, Sampling())
        batch.join([CodeRequest(0, prompt, loaded._voices.named["alloy"], 1, 4, 4, CancelFlag())])
        (key, hidden), *_ = batch.step()
        assert key == 0 and hidden is not None and hidden.dtype == torch.float32
        return hidden

    wide, narrowed = first_hidden(engine), first_hidden(narrow)
    assert not torch.equal(wide, narrowed)  # it did compute in bfloat16
    torch.testing.assert_close(narrowed, wide, rtol=0.02, atol=0.02 * float(wide.abs().max()))
    audio = speak(narrow, "Short.")
    assert len(audio) == SAMPLES_PER_SEGMENT
    assert np.abs(audio.astype(np.int32)).max() > 0


def test_generated_hash_map_covers_every_weight_file() -> None:
    hashes = json.loads((tiny_assets_dir() / HASH_FILE).read_text())
    assert len(hashes) == 9


#: Token counts of ChatTTS's real tokenizer (BERT's Chinese vocabulary), measured once for these sentences.
_REAL_TOKEN_COUNTS = {
    "Request number twelve is speaking now.": 11,
    "Hello world, this is a test of the speech gateway.": 16,
    "The quick brown fox jumps over the lazy dog.": 12,
    "Please call me back tomorrow morning; I will be in the office after nine.": 19,
    "Good evening, and welcome to the news at six. Our top story tonight concerns the weather.": 26,
}


def test_the_full_preset_reads_english_at_the_real_tokenizers_rate(tmp_path: Path) -> None:
    # The prompt a benchmark prefills costs compute per token: single letters would triple it.
    from transformers import AutoTokenizer

    from engines.chattts.assets import CHATTTS_TAGS, _write_tokenizer

    _write_tokenizer(tmp_path, "full")
    tokenizer = AutoTokenizer.from_pretrained(str(tmp_path))
    counts = {text: len(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in _REAL_TOKEN_COUNTS}
    assert sum(counts.values()) <= 1.2 * sum(_REAL_TOKEN_COUNTS.values()), counts
    for text, count in counts.items():
        assert 0.8 * _REAL_TOKEN_COUNTS[text] <= count <= 1.4 * _REAL_TOKEN_COUNTS[text], text
    assert tokenizer.convert_tokens_to_ids(list(CHATTTS_TAGS[:4])) == [21128, 21129, 21130, 21131]  # the real ids


# ----------------------------------------------------------------- text
def test_long_input_splits_at_sentences_within_the_limit() -> None:
    text = "First one. Second one? " + "word " * 100 + "end."
    segments = split_segments(text, 60)
    assert segments[:2] == ["First one.", "Second one?"]
    assert all(len(s) <= 60 for s in segments)
    assert " ".join(segments).split() == text.split()


@pytest.mark.parametrize(
    ("text", "segments"),
    [
        ("好的。。。", ["好的。。。"]),
        ("Ok。。。。。。。。。。", ["Ok。。。。。。。。。。"]),
        ("。。。你好。再见。", ["。。。你好。", "再见。"]),
        ("Hello. World. ...", ["Hello.", "World...."]),
        ("。" * 4096, ["。" * 60]),  # one generation at most, not 4,096 (65 minutes of babble)
        ("Yes." + "。" * 100, ["Yes." + "。" * 56]),
    ],
)
def test_punctuation_alone_is_never_a_segment_of_its_own(text: str, segments: list[str]) -> None:
    assert split_segments(text, 60) == segments


def test_speed_and_control_tags() -> None:
    assert [speed_tag(s) for s in (0.5, 1.0, 2.0, 4.0)] == ["[speed_1]", "[speed_5]", "[speed_9]", "[speed_9]"]
    assert control_tags("cheerful [oral_3] and [break_9], [laugh_1]") == "[oral_3][laugh_1][break_7]"
    assert control_tags("just be nice") == ""


# ----------------------------------------------------------------- voices and seeds
def test_named_voices_are_stable_and_distinct(engine: ChatTTSEngine) -> None:
    from engines.chattts.voices import SpeakerBank

    assert engine._voices is not None
    again = SpeakerBank(engine._chat.speaker)  # as a restarted worker would build it
    for name, embedding in engine._voices.named.items():
        assert np.array_equal(embedding.numpy(), again.named[name].numpy())
    assert not np.array_equal(engine._voices.named["alloy"].numpy(), engine._voices.named["onyx"].numpy())


def test_a_custom_embedding_round_trips(engine: ChatTTSEngine) -> None:
    assert engine._voices is not None
    custom = engine._voices.sample(1234)
    encoded = engine._voices.encode(custom)
    assert np.array_equal(engine._voices.parse(encoded).numpy(), custom.numpy())
    audio = speak(engine, "Hello there.", voice="custom", speaker=encoded, seed=3)
    assert len(audio) == SAMPLES_PER_SEGMENT


@pytest.mark.parametrize("speaker", ["garbage", "", "seed:x"])
def test_a_malformed_custom_embedding_is_an_invalid_request(engine: ChatTTSEngine, speaker: str) -> None:
    with pytest.raises(InvalidSynthesisRequestError) as raised:
        speak(engine, "Hello.", voice="custom", speaker=speaker)
    assert raised.value.param == "voice"


def test_an_embedding_of_the_wrong_size_is_an_invalid_request(engine: ChatTTSEngine) -> None:
    import torch

    assert engine._voices is not None
    wrong = engine._voices.encode(torch.ones(engine._voices.dim + 8, dtype=torch.float16))
    with pytest.raises(InvalidSynthesisRequestError, match="values; these weights need"):
        speak(engine, "Hello.", voice="custom", speaker=wrong)


def test_same_seed_same_audio_other_seed_other_audio(any_decoder: ChatTTSEngine) -> None:
    first, second = speak(any_decoder, "Hello there.", seed=7), speak(any_decoder, "Hello there.", seed=7)
    assert np.array_equal(first, second)
    assert not np.array_equal(first, speak(any_decoder, "Hello there.", seed=8))


def test_instructions_tags_run_text_refinement(engine: ChatTTSEngine) -> None:
    audio = speak(engine, "Hello there.", instructions="[oral_2][break_4] and anything else", seed=1)
    assert len(audio) == SAMPLES_PER_SEGMENT


def test_control_tokens_typed_by_a_caller_are_words_unless_it_opts_in(engine: ChatTTSEngine) -> None:
    """The token ids the engine sees: ``[laugh]`` and ``[uv_break]`` typed in the text are the words "laugh" and "uv
    break" by default, and the tags themselves once the request opts in; ``[speed_7]`` then sets the rate prompt."""
    text = "Well [laugh] that is [uv_break] funny [speed_7]"
    tags = engine.prompts.tag_ids(["[laugh]", "[uv_break]", "[speed_7]", "[speed_5]"])
    laugh, uv_break, speed_7, speed_5 = tags

    def ids(control_tokens: bool) -> list[int]:
        request = SynthesisRequest(text, "alloy", control_tokens=control_tokens, seed=1)
        (segment,) = engine._plan(0, request, CancelFlag()).segments
        return segment

    plain, opted = ids(False), ids(True)
    assert not {laugh, uv_break, speed_7} & set(plain)
    assert speed_5 in plain  # the request's speed, 1.0
    assert set(engine.prompts.text_ids("laugh")) <= set(plain)
    assert opted.index(laugh) < opted.index(uv_break)  # in place, in order
    assert speed_7 in opted
    assert speed_5 not in opted


def test_structural_tags_stay_words_even_when_opted_in(engine: ChatTTSEngine) -> None:
    request = SynthesisRequest("[spk_emb] [Stts] hi", "alloy", control_tokens=True, seed=1)
    (segment,) = engine._plan(0, request, CancelFlag()).segments
    prefix = engine.prompts.tag_ids(["[Stts]", "[spk_emb]", "[speed_5]"])
    assert segment[: len(prefix)] == prefix
    assert not set(engine.prompts.tag_ids(["[spk_emb]", "[Stts]"])) & set(segment[len(prefix) :])


# ----------------------------------------------------------------- streaming
@pytest.fixture(scope="module")
def hiddens(engine: ChatTTSEngine) -> list[Any]:
    from engines.chattts.generation import CodeRequest, Sampling, generate_codes

    assert engine._voices is not None
    ids = engine.prompts.named_voice_prompt("hello world")
    request = CodeRequest(0, ids, engine._voices.named["alloy"], 11, 300, 300, CancelFlag())
    return [h for events in generate_codes(engine._chat, [request], Sampling()) for _, h in events if h is not None]


def stream(engine: ChatTTSEngine, hiddens: list[Any], decoded: list[int] | None = None) -> list[np.ndarray]:
    from engines.chattts.streaming import StreamDecoder, decode_hiddens

    decoder = StreamDecoder()

    def emit(final: bool) -> np.ndarray:
        window = decoder.window()
        if decoded is not None:
            decoded.append(len(window))
        return decoder.emit(decode_hiddens(engine._chat, window), final)

    chunks = []
    for count, hidden in enumerate(hiddens, start=1):
        if decoder.add(hidden):
            chunks.append((count, emit(final=False)))
    chunks.append((len(hiddens), emit(final=True)))
    assert chunks[0][0] <= 24, "the first audio leaves after at most 24 tokens"
    return [chunk for _, chunk in chunks]


def test_streamed_audio_matches_one_decode(engine: ChatTTSEngine, hiddens: list[Any]) -> None:
    import torch

    from engines.chattts.streaming import decode_hiddens

    whole = decode_hiddens(engine._chat, torch.stack(hiddens))
    streamed = np.concatenate(stream(engine, hiddens))
    assert len(streamed) == len(whole)
    assert np.sqrt(np.mean((streamed - whole) ** 2)) < 0.01 * np.sqrt(np.mean(whole**2))


def test_chunk_boundaries_have_no_discontinuity(engine: ChatTTSEngine, hiddens: list[Any]) -> None:
    chunks = stream(engine, hiddens)
    typical_step = np.percentile(np.abs(np.diff(np.concatenate(chunks))), 99.9)
    for before, after in itertools.pairwise(chunks):
        assert abs(float(after[0]) - float(before[-1])) <= typical_step


def test_windows_decoded_together_equal_each_decoded_alone(engine: ChatTTSEngine, hiddens: list[Any]) -> None:
    import torch

    from engines.chattts.streaming import decode_hiddens, decode_windows

    # Two of one length (one batched call) and one of another, in a mixed order: each comes back in its place.
    windows = [torch.stack(hiddens[0:30]), torch.stack(hiddens[5:25]), torch.stack(hiddens[40:70])]
    together = decode_windows(engine._chat, windows)
    for window, audio in zip(windows, together, strict=True):
        alone = decode_hiddens(engine._chat, window)
        assert audio.shape == alone.shape
        np.testing.assert_allclose(audio, alone, atol=1e-4 * float(np.abs(alone).max()))


def test_windows_decode_on_the_threads_asked_for_and_give_the_same_audio(
    engine: ChatTTSEngine, hiddens: list[Any]
) -> None:
    import torch

    from engines.chattts.streaming import decode_windows

    seen: list[int] = []
    hook = engine._chat.decoder.register_forward_pre_hook(lambda *_: seen.append(torch.get_num_threads()))
    windows = [torch.stack(hiddens[0:30]), torch.stack(hiddens[40:70])]
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        on_two = decode_windows(engine._chat, windows)
        on_one = decode_windows(engine._chat, windows, threads=1)
        assert torch.get_num_threads() == 2  # given back after the decode
    finally:
        torch.set_num_threads(before)
        hook.remove()
    assert seen == [2, 1]
    for two, one in zip(on_two, on_one, strict=True):
        np.testing.assert_allclose(one, two, atol=1e-5 * float(np.abs(two).max()))


def test_a_stream_decodes_on_stream_decode_threads(any_decoder: ChatTTSEngine) -> None:
    import torch

    seen: list[int] = []
    # The inverse STFT runs in torch whichever decodes the network (``audio_decoder``).
    hook = any_decoder._chat.vocos.head.istft.register_forward_pre_hook(lambda *_: seen.append(torch.get_num_threads()))
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        request = SynthesisRequest("One sentence.", "alloy", seed=1)
        items = list(any_decoder.synthesize_batch([request], [CancelFlag()]))
    finally:
        torch.set_num_threads(before)
        hook.remove()
    assert any(isinstance(item, np.ndarray) and item.size for _, item in items)
    assert seen and set(seen) == {any_decoder.options.stream_decode_threads} == {1}
    assert any_decoder._decodes is not None
    if (graph := any_decoder._decodes.graph) is not None:
        assert graph._session.get_session_options().intra_op_num_threads == 1


def test_decoding_cost_is_linear(engine: ChatTTSEngine, hiddens: list[Any]) -> None:
    decoded: list[int] = []
    stream(engine, hiddens, decoded)
    # A re-decode of the whole prefix per chunk would decode ~n^2/48 tokens (1875 here).
    assert sum(decoded) < 3.5 * len(hiddens)


# ----------------------------------------------------------------- batching
def test_batched_requests_get_their_own_audio(any_decoder: ChatTTSEngine) -> None:
    requests = [
        SynthesisRequest("One sentence.", "alloy", seed=1),
        SynthesisRequest("Three sentences. Here they are. Really.", "nova", seed=2),
        SynthesisRequest("Two sentences. Yes.", "onyx", seed=3),
    ]
    items = run_batch(any_decoder, requests, [CancelFlag() for _ in requests])
    for index, segments in enumerate((1, 3, 2)):
        assert items[index][-1] is None
        audio = np.concatenate(items[index][:-1])
        assert len(audio) == segments * SAMPLES_PER_SEGMENT
        alone = speak(any_decoder, requests[index].text, voice=requests[index].voice, seed=requests[index].seed)
        tolerance = audio_tolerance(any_decoder, alone)
        assert np.allclose(audio, alone, atol=tolerance), "batching must not change a seeded request's audio"


def test_a_cancelled_request_does_not_disturb_the_others(any_decoder: ChatTTSEngine) -> None:
    voices = ("echo", "sage", "verse")
    requests = [SynthesisRequest("First sentence. Second one.", voice, seed=i) for i, voice in enumerate(voices)]
    reference = run_batch(any_decoder, requests, [CancelFlag() for _ in requests])
    cancels = [CancelFlag() for _ in requests]
    items: dict[int, list[Any]] = {i: [] for i in range(3)}
    for index, item in any_decoder.synthesize_batch(requests, cancels):
        items[index].append(item)
        if index == 1 and len(items[1]) == 1:
            cancels[1].set()
            cancelled_at = time.monotonic()
        if index == 1 and item is None:
            assert time.monotonic() - cancelled_at < 1.0
    assert items[1][-1] is None
    assert sum(len(c) for c in items[1][:-1]) < SAMPLES_PER_SEGMENT
    for index in (0, 2):
        expected = np.concatenate(reference[index][:-1])
        assert np.allclose(np.concatenate(items[index][:-1]), expected, atol=audio_tolerance(any_decoder, expected))


def test_an_invalid_request_in_a_batch_fails_alone(engine: ChatTTSEngine) -> None:
    requests = [SynthesisRequest("Hello.", "alloy", speaker="not a speaker"), SynthesisRequest("Hello.", "alloy")]
    items = run_batch(engine, requests, [CancelFlag(), CancelFlag()])
    assert isinstance(items[0][0], InvalidSynthesisRequestError)
    assert len(items[0]) == 1
    assert items[1][-1] is None
    assert sum(len(c) for c in items[1][:-1]) == SAMPLES_PER_SEGMENT


# ----------------------------------------------------------------- through a worker process
@pytest.fixture
async def pool() -> AsyncIterator[Any]:
    from engines.pool import EnginePool
    from engines.settings import local_engine_settings

    settings = local_engine_settings(kind="chattts", options=chattts_engine_options(max_batch=4, batch_window_ms=50))
    engine_pool = EnginePool("chattts", settings)
    await engine_pool.start()
    assert await engine_pool.wait_ready(60), engine_pool.status().reason
    yield engine_pool
    await engine_pool.stop()


async def collect(engine_pool: Any, request: SynthesisRequest) -> bytes:
    async with engine_pool.open_stream(request) as chunks:
        return b"".join([chunk async for chunk in chunks])


async def test_worker_batches_concurrent_requests(pool: Any) -> None:
    import asyncio

    texts = ["One.", "One. Two.", "One. Two. Three.", "One. Two. Three. Four."]
    results = await asyncio.gather(*(collect(pool, SynthesisRequest(t, "alloy", seed=5)) for t in texts))
    for segments, pcm in enumerate(results, start=1):
        assert len(pcm) == 2 * segments * SAMPLES_PER_SEGMENT
    with pytest.raises(InvalidSynthesisRequestError):
        await collect(pool, SynthesisRequest("Hello.", "alloy", speaker="garbage"))
    assert len(await collect(pool, SynthesisRequest("Still fine.", "alloy"))) == 2 * SAMPLES_PER_SEGMENT


async def test_a_worker_serves_a_seeded_request_the_same_bytes_alone_and_beside_another(pool: Any) -> None:
    """A request's own seed repeats its bytes in a worker, alone or batched with a request sent at the same time
    (``test_seeded_repeats.py`` checks it at the engine over every decoder and weight type)."""
    import asyncio

    seeded = SynthesisRequest("The same words with the same seed.", "nova", seed=41)
    reference = await collect(pool, seeded)
    together, _ = await asyncio.gather(collect(pool, seeded), collect(pool, SynthesisRequest("Meanwhile.", "onyx")))
    assert together == reference
