"""The ChatTTS engine's options: the ``options`` of a ``kind: chattts`` engine, validated when the settings load.

A pydantic model so that a value from an environment variable (always a string) is coerced, and a typo or an
out-of-range value stops the start with a message naming the option, before any worker process exists.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["ChatTTSOptions"]

Source = Literal["hub", "dir"]
Device = Literal["auto", "cpu", "cuda"]
Dtype = Literal["auto", "float32", "float16", "bfloat16"]
Decoder = Literal["auto", "torch", "onnxruntime"]
Weights = Literal["auto", "float32", "int8"]
PrefillWeights = Literal["auto", "float32", "int8", "bfloat16"]
Overlap = Literal["auto", "on", "off"]
AudioDecoder = Literal["auto", "torch", "onnxruntime"]


class ChatTTSOptions(BaseModel):
    """Options of the ``chattts`` engine kind (docs/configuration.md). Unknown keys are rejected."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: Source = "hub"
    """``hub``: the 2Noise/ChatTTS snapshot in ``cache_dir``, downloaded on first start when the hub is reachable;
    ``dir``: a directory the user provides (``path``), holding ``asset/``."""
    path: str | None = None
    """The model directory for ``source: dir`` (holding ``asset/``)."""
    cache_dir: str = "~/.cache/tts-gateway/huggingface"
    """Where hub snapshots are kept (``models--2Noise--ChatTTS/snapshots/<rev>``); existing ones load offline."""
    download: bool = True
    """Allow downloading the hub snapshot when none is cached."""
    hub_timeout_s: float = Field(default=3.0, gt=0)
    """How long the reachability probe of the hub may take before the engine reports itself unavailable."""
    device: Device = "auto"
    """``auto`` (CUDA when available), ``cpu`` or ``cuda``."""
    dtype: Dtype = "auto"
    """The GPT backbone's number type: ``auto`` (float16 on CUDA, float32 on CPU), ``float32``, ``float16`` or
    ``bfloat16``. On a CPU with bfloat16 arithmetic (``lscpu`` lists ``avx512_bf16`` or ``amx_bf16``) ``bfloat16``
    made decode steps 1.2 to 1.9x (batch 1 to 8) and prefill 2.2x faster, and served 1.19x the audio at concurrency 4
    with 345 MiB less per worker ([BENCHMARKS.md](../BENCHMARKS.md#the-backbone-in-bfloat16-dtype)). On other CPUs
    torch has no fast path for it, nor for ``float16`` on any CPU: the engine logs a warning at load. The decoder and
    vocoder stay float32."""
    decoder: Decoder = "auto"
    """What runs the decode steps (one new token per running sequence): ``torch``, or ``onnxruntime`` (the backbone
    with its KV cache and the audio heads as one ONNX graph, exported from the loaded weights on first use and kept
    beside them: ``engines/chattts/onnx_step.py``; 1.16-1.9x faster at batch 1 on 2 CPU cores, BENCHMARKS.md). ``auto``:
    onnxruntime on CPU with a float32 backbone, torch otherwise. Where the graph cannot be exported or run, the
    engine logs why and steps in torch. Prefill, sampling and everything else run in torch on both."""
    weights: Weights = "auto"
    """The decode graph's weights (``onnxruntime`` decoder): ``int8`` stores its weight matrices in 8 bits (ONNX
    Runtime's ``MatMulNBits``, blocks of 256 with a scale each), reading a quarter of the bytes per step: on 2 CPU cores
    one stream then keeps up with playback, where float32 cannot (BENCHMARKS.md, issue #51). Its tokens differ from
    float32's (98.1 % agree over 512 steps; the audio 0.20 dB apart) and its audio has not been judged by ear.
    ``auto``: ``int8`` where the steps run in ONNX Runtime on a CPU with the instructions its 8-bit products use
    (AVX2 and FMA, or ARM's dot product), ``float32`` otherwise (torch steps, CUDA); ``/readyz``'s ``decode_weights``
    detail says which and why (``engines/chattts/weights.py``). ``float32``: the exact steps. Prefill runs in
    torch, its products as ``prefill_weights`` says."""
    prefill_weights: PrefillWeights = "auto"
    """The number type of the prefill's weight products (a prompt's positions at once, in torch, on CPU): ``float32``,
    ``bfloat16`` (oneDNN on a copy of the weights, half their size; fast only where the CPU has bfloat16 arithmetic)
    or ``int8`` (torch's dynamic 8-bit product, FBGEMM, on a copy a quarter their size; each row at its own scale, so
    a sequence's tokens never depend on what shares its pass). ``auto``: with ``weights: int8``, ``bfloat16`` where
    the CPU has bfloat16 arithmetic (``avx512_bf16`` or ``amx_bf16``), else ``int8`` where it has AVX2, else float32;
    float32 otherwise (``engines/chattts/prefill.py``, docs/engines.md)."""
    threads: int | None = Field(default=None, ge=1, le=256)
    """Torch CPU threads per worker (unset: torch's choice); ONNX Runtime's decode steps use as many."""
    blocked_weights: bool = True
    """On CPU, let the backbone's products use oneDNN on a second copy of its weights laid out for it, where measured
    faster at load (``engines/chattts/small_batch.py``); ``false`` saves that copy's memory (0.76 GB per worker for
    the full model in float32)."""
    temperature: float = Field(default=0.3, gt=0)
    """Sampling."""
    top_P: float = Field(default=0.7, gt=0, le=1)  # noqa: N815 - ChatTTS's name
    """Sampling."""
    top_K: int = Field(default=20, ge=1)  # noqa: N815 - ChatTTS's name
    """Sampling."""
    repetition_penalty: float = Field(default=1.05, gt=0)
    """Sampling."""
    max_new_token: int = Field(default=2048, ge=1, le=4096)
    """Most audio tokens per sentence segment (one token is about 21 ms of audio)."""
    min_new_token: int = Field(default=0, ge=0)
    """Fewest audio tokens per segment (equal to ``max_new_token`` gives exact lengths: benchmarks, tests)."""
    refine_text: bool = False
    """Run ChatTTS's text-refinement pass before speaking (adds latency); also runs when the instructions carry
    ``[oral_N]``, ``[laugh_N]`` or ``[break_N]``."""
    refine_max_new_token: int = Field(default=384, ge=1)
    """Token budget of that pass."""
    # The bounds on the number only: on the whole union pydantic applied them to "auto" as well (a TypeError at start).
    max_batch: Annotated[int, Field(ge=1, le=64)] | Literal["auto"] = "auto"
    """Requests one worker generates together (dynamic batching). ``auto``: measured at load, the decode step timed
    at 1, 2, 4, 8 and 16 rows, and the largest taken whose step keeps up with playback (``auto_batch_realtime_share``)
    or costs at most ``auto_batch_max_slowdown`` times one row's, within the memory the rows' KV caches may need
    (``engines/chattts/batch_size.py``); the choice is logged and shown in the engine's details (``/readyz``)."""
    auto_batch_realtime_share: float = Field(default=1.0, gt=0)
    """``max_batch: auto`` admits a batch whose decode step takes at most this share of the audio one token makes
    (21.3 ms): every sequence of it generates at least as fast as it plays (at 1.0)."""
    auto_batch_max_slowdown: float = Field(default=2.5, ge=1)
    """``max_batch: auto`` also admits a batch whose step takes at most this many times a one-row step (each of its
    sequences then generates at least 40 % as fast as alone at 2.5): what decides on a machine that keeps up with
    playback at no batch size. A request beyond ``max_batch`` waits for a whole request to end, so a larger batch,
    slower per row, still gives most callers their first audio sooner (2 cores, 8-bit steps: 8 rows at 1.9-2.0x one
    row's step served 1.24-1.28x the audio of 4 rows at concurrency 8, first audio 5x sooner)."""
    batch_window_ms: float = Field(default=10.0, ge=0)
    """How long an idle worker waits for more requests before it starts a batch."""
    continuous_batching: bool = True
    """Requests, and the next sentences of running ones, join a generating batch at its next step (up to
    ``max_batch``): their prompts are prefilled in the same forward pass as the running sequences' next token, so the
    weights are read once for both; ``false``: they wait until the whole batch has ended."""
    prefill_chunk_tokens: int | None = Field(default=None, ge=1)
    """Most prompt tokens of joining sequences one decode step prefills beside the running ones (a longer prompt is
    prefilled over several steps, each holding the running sequences less long); default: every waiting prompt
    whole, in the next step."""
    seed: int | None = None
    """Sampling seed for requests that carry none (default: random per request). Such requests are batched and
    chunked as unseeded ones, so their audio repeats only within a batch's rounding (with 8-bit weights their tokens
    may differ too); a request's own ``seed`` repeats its audio byte for byte, in a batch of its own (README, "Seeds
    and sample rates")."""
    normalize: bool = True
    """Speak numbers, money, dates, times, units, abbreviations, e-mail addresses and URLs as words before ChatTTS
    reads the text (``engines/chattts/normalize``): its tokenizer reads only words."""
    max_segment_chars: int = Field(default=200, ge=20)
    """Long input is spoken sentence by sentence; longer sentences are split at this many characters."""
    stream_first_tokens: int = Field(default=24, ge=8)
    """Tokens generated before the first audio chunk leaves. A first chunk is decoded, and leaves, before the other
    requests' chunks due at the same step are decoded: a joining request does not wait for their decode."""
    stream_first_tokens_min: int = Field(default=12, ge=8)
    """A first chunk in a batch whose step is slower than one row's (the steps timed at load at each batch size up to
    ``max_batch``) comes after fewer tokens: as many as take the time ``stream_first_tokens`` one-row steps take, at
    least this many (and never more than ``stream_first_tokens``), so that first audio stays near its one-row time as
    the batch grows. Such a first chunk carries less audio (12 tokens: 0.13 s before the next chunk). Equal to
    ``stream_first_tokens``: every first chunk that long, as a request's with a seed of its own always is."""
    stream_chunk_tokens: int = Field(default=24, ge=8)
    """Tokens of the smallest later chunk (later chunks double up to ``stream_max_chunk_tokens`` while the listener
    has audio enough, or while generation is slower than real time). A request with a seed of its own takes chunks of
    this size alone, cut at token counts whatever its timing and its batch, so that its audio repeats byte for byte
    (docs/engines.md, "Seeded requests")."""
    stream_max_chunk_tokens: int = Field(default=96, ge=8)
    """Later chunks double up to this size while the listener has audio enough to wait for them, or while generation
    is slower than real time (each chunk decodes ``stream_left_context`` tokens again, so bigger chunks cost less);
    equal to ``stream_chunk_tokens``: fixed-size chunks. While another request's first chunk is coming, a due later
    chunk also waits, up to this size and within what its listener has left: each decode stops every request's next
    token, so that a request joining a big batch does not wait out the others' decodes."""
    stream_left_context: int = Field(default=40, ge=0)
    """Tokens of already-spoken context decoded again with each chunk (the decoder's receptive field)."""
    stream_decode_threads: int | None = Field(default=1, ge=1, le=256)
    """Torch threads that turn tokens into audio (the DVAE decoder and Vocos: small convolutions and products); unset:
    the worker's ``threads``. On a busy 2-core machine one thread cost a streamed request's decode 1.7x less CPU and
    1.9x less wall time than two (BENCHMARKS.md, issue #51): on two, each small op waits for the other, busy core and
    leaves torch's OpenMP threads spinning on the cores the next decode step needs."""
    stream_decode_threads_alone: int | None = Field(default=None, ge=1, le=256)
    """Threads of a decode through the audio graph (``audio_decoder: onnxruntime``) that nothing runs beside: a first
    chunk, which the token loop waits for, a last chunk with no other row in the loop, and every chunk decoded between
    the steps; and every chunk of a request with a seed of its own, wherever it is decoded (a session's threads round an
    8-bit product's sums, and its audio must repeat byte for byte); unset: the worker's ``threads``. ONNX Runtime's
    threads do not spin, so the other cores are the decode's while the loop waits: on 2 quiet cores 8-bit windows of
    24 / 54 / 102 tokens decoded in 18 / 39 / 68 ms on two threads against 26 / 61 / 113 on one, the same audio
    (BENCHMARKS.md, issue #51). The graph keeps a second session for it (a worker's resident memory the same within
    noise); 1: one session, every decode on ``stream_decode_threads``."""
    stream_decode_overlap: Overlap = "auto"
    """Where a streamed request's later chunks are decoded (the DVAE decoder and Vocos): ``on``, in a thread of its own
    beside the token loop, whose next steps go on meanwhile (the chunk leaves at the first step after its decode;
    each request's chunks in order); ``off``, between the steps (every request's next token waits for each decode).
    First chunks are decoded before the next step either way: a new listener hears them as soon. ``auto``: ``on``
    where the decode steps run in ONNX Runtime (on the CPU), ``off`` with torch's steps. On 2 quiet CPU cores with
    8-bit ONNX Runtime steps, ``on`` served 1.19-1.21x the audio of ``off`` at concurrency 1 and 1.08-1.27x at 4, first
    audio level; with other work filling the cores, 0.9-1.1x (issue #51, BENCHMARKS.md,
    docs/engineering/benchmark-history.md; ``engines/chattts/overlap.py``, docs/engines.md)."""
    audio_decoder: AudioDecoder = "auto"
    """What turns tokens into audio in a stream (the DVAE decoder and Vocos' network; the inverse STFT stays in torch):
    ``torch``, or ``onnxruntime`` (one graph exported from the loaded weights on first use and kept beside them, its
    products in ``audio_weights``: ``engines/chattts/audio_graph.py``). ``auto``: ``onnxruntime`` where the decode
    steps run in ONNX Runtime (on the CPU), ``torch`` otherwise. Where the graph cannot be built or run, the engine
    logs why and decodes in torch; ``/readyz``'s ``audio_decoder`` detail says which runs."""
    audio_weights: Weights = "auto"
    """The audio graph's products (``audio_decoder: onnxruntime``): ``float32`` (torch's audio within 1e-5, 1.2-1.4x its
    speed on one thread) or ``int8`` (``MatMulNBits`` with int8 compute, as the 8-bit decode steps: blocks of 256
    weights to a scale, each frame's activations quantized on their own; on one AVX-512 VNNI core a 64-token window
    decoded 2.2x faster than torch, its audio 0.19 dB from float32's by log spectral distance, on random weights no
    one can judge by ear: BENCHMARKS.md, issue #51). ``auto``: ``int8`` where the decode steps' weights are 8-bit
    (``weights``), ``float32`` otherwise."""
    max_sample_s: float = Field(default=30.0, ge=1.0, le=60.0)
    """Longest voice sample a voice is made from (``POST /v1/audio/voices``). Its audio codes are the end of every
    prompt spoken with that voice (about 47 positions a second, prefilled with each sentence), and its speaker string
    must stay within 16384 characters: 60 s is about 4,000 characters at full size, 30 s leaves most of the model's
    4,096 positions to the text and the new audio."""
    voice_prefix_cache_mb: float = Field(default=64.0, ge=0)
    """Memory per worker for the keys and values of voice prompts' shared beginnings (``[Stts][empty_spk]`` +
    transcript + ``[speed_N]`` of a voice from a sample), computed at the voice's first sentence and reused by every
    later one, which then prefills only its own text and the sample's codes; least recently used out first
    (``engines/chattts/prefix_cache.py``). About 120 KiB a token at full size in float32 (a 40-token transcript:
    5 MiB); 0 turns it off."""

    @model_validator(mode="after")
    def _lower_bounds_within_upper(self) -> ChatTTSOptions:
        if self.min_new_token > self.max_new_token:
            raise ValueError("min_new_token must not exceed max_new_token")
        if self.stream_max_chunk_tokens < self.stream_chunk_tokens:
            raise ValueError("stream_max_chunk_tokens must not be below stream_chunk_tokens")
        return self
