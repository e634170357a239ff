# ruff: noqa: PLC0415 - torch, transformers and ChatTTS are imported lazily: the server process never loads them
"""The ChatTTS engine: verified weights, stable voices, sentence segments, incremental streaming, dynamic batching,
and voices from samples (ChatTTS's speaker prompts)."""

from __future__ import annotations

import itertools
import logging
import random
import warnings
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from engines.base import (
    MAX_SPEAKER_CHARS,
    OPENAI_VOICES,
    EngineInfo,
    EngineUnavailableError,
    InvalidSynthesisRequestError,
    VoiceInfo,
)
from engines.chattts.loader import locate_weights
from engines.chattts.normalize import OFF, active_normalizer, normalize_text
from engines.chattts.options import ChatTTSOptions
from engines.chattts.text import (
    ControlTokens,
    control_tags,
    prepare_text,
    speed_tag,
    split_control_tokens,
    split_segments,
)
from engines.chattts.weights import choose_weights
from lifecycle import naming

if TYPE_CHECKING:
    from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
    from concurrent.futures import Future

    import numpy.typing as npt
    import torch

    from engines.base import BatchItem, CancelToken, JobSource, SynthesisRequest
    from engines.chattts.audio_graph import AudioGraph
    from engines.chattts.generation import CodeBatch, CodeRequest, Sampling, StepEvent
    from engines.chattts.loader import WeightsLocation
    from engines.chattts.onnx_step import DecodeGraph
    from engines.chattts.overlap import Audio, DecodeRunner
    from engines.chattts.prefix_cache import PrefixCache
    from engines.chattts.streaming import StreamDecoder
    from engines.chattts.voices import SpeakerBank

__all__ = ["ChatTTSEngine"]

logger = naming.logger("chattts")

SAMPLE_RATE = 24000
NATIVE_SPEED_RANGE = (0.5, 2.0)
_SEED_MODULUS = 2**63
_EMPTY_AUDIO_S = 0.1
_LANGUAGES = frozenset({"en", "zh"})
_MIN_SAMPLE_S = 1.0  # shorter holds too few codes (47 a second) to carry a voice
_MAX_TRANSCRIPT_CHARS = 2000  # about a minute of speech: more than the longest sample says


@dataclass
class _Plan:
    """One request of a batch: its segments still to speak and the decoder of the current one."""

    index: int
    segments: list[list[int]]
    speaker: torch.Tensor | None
    """The speaker embedding (``None`` for a voice from a sample)."""
    codes: torch.Tensor | None
    """A voice sample's audio codes, the end of every segment's prompt."""
    seed: int
    cancel: CancelToken
    spoken: int = 0
    running: bool = False
    """A segment of this request is in the token loop now, or waits for its last chunk's decode."""
    ending: bool = False
    """Its segment's last token came: its last chunk is due (beside the token loop: once its previous one is out)."""
    decoding: bool = False
    """One of its chunks is being decoded (beside the token loop)."""
    decoder: StreamDecoder | None = field(default=None, repr=False)
    shared_prefix: int = 0
    """How many first tokens of every segment's prompt are the voice's own (``CodeRequest.shared_prefix``)."""

    @property
    def done(self) -> bool:
        return self.spoken >= len(self.segments) or self.cancel.is_set()


@dataclass(frozen=True, slots=True)
class _Job:
    """Chunks handed to the streaming decode together, and their audio to come."""

    due: list[tuple[_Plan, bool, StreamDecoder]]
    """Each chunk's request, whether it is its segment's last, and its stream decoder."""
    spoken: list[int]
    """The positions in ``due`` of the windows decoded (a segment may end tokenless)."""
    audio: Future[Audio]


class ChatTTSEngine:
    """ChatTTS 0.2.5 behind the engine protocol, with batching (:class:`engines.base.BatchingEngine`)."""

    def __init__(self, options: ChatTTSOptions | Mapping[str, object] | None = None) -> None:
        self.options = ChatTTSOptions.model_validate(options or {})
        self._chat: Any = None
        self._voices: SpeakerBank | None = None
        self._generated = False
        self._graph: DecodeGraph | None = None
        """The decode step through ONNX Runtime (``decoder``), or ``None``: in torch."""
        self._prefixes: PrefixCache | None = None
        """Sample voices' prompt beginnings, prefilled once per worker (``voice_prefix_cache_mb``)."""
        self._max_batch = self.options.max_batch if isinstance(self.options.max_batch, int) else 1
        self._step_ms: dict[int, float] = {}
        """The decode step per batch size (up to ``max_batch``) as timed at load, in ms: first chunks follow it."""
        self._weights = choose_weights(self.options.weights, onnxruntime_on_cpu=False)  # the graph's, settled at load
        self._decodes: DecodeRunner | None = None
        """The streaming decode, between the token loop's steps or beside them (``stream_decode_overlap``)."""

    # ----------------------------------------------------------------- loading
    def load(self) -> EngineInfo:
        options = self.options
        # The weights are found first, without torch: a worker with none (a volume not mounted yet) then fails in
        # milliseconds rather than after seconds of importing torch, on every retry of its backoff.
        cache_dir = Path(options.cache_dir).expanduser()
        location = locate_weights(options.source, options.path, cache_dir, options.download, options.hub_timeout_s)
        try:
            import torch

            from engines.chattts.loader import load_chat
            from engines.chattts.small_batch import use_small_batch_linear
            from engines.chattts.voices import SpeakerBank
        except ImportError as exc:  # e.g. torchaudio built for CUDA next to a CPU torch: scripts/fix_torchaudio.py
            raise EngineUnavailableError(f"ChatTTS cannot be imported here: {exc}") from exc
        if options.threads:
            torch.set_num_threads(options.threads)
        device = self._device(torch)
        dtype = self._dtype(torch, device)
        self._chat = load_chat(location, device, dtype)
        if device.type == "cpu":  # a few rows per decode step: measured, the faster product for each row count
            use_small_batch_linear(self._chat.gpt.gpt, blocked=options.blocked_weights)
        self._graph = self._decode_graph(location, device)
        prefill = "float32"
        if device.type == "cpu":  # the prefill's products in fewer bits: where asked, or bfloat16 beside 8-bit steps
            from engines.chattts.prefill import use_fast_prefill

            int8_decode = self._graph is not None and self._weights.weights == "int8"
            prefill = use_fast_prefill(self._chat.gpt.gpt, options.prefill_weights, int8_decode=int8_decode,
                                       drop_blocked=self._graph is not None)  # fmt: skip
        batch = self._batch_size()
        from engines.chattts.batch_size import describe_first_chunks
        from engines.chattts.overlap import DecodeRunner

        overlap = self._overlap()
        audio = self._audio_graph(location, device)
        self._decodes = DecodeRunner(overlap=overlap, threads=options.stream_decode_threads, graph=audio,
                                     alone_threads=self._alone_decode_threads())  # fmt: skip
        gpt = self._chat.config.gpt
        self._voices = SpeakerBank(
            self._chat.speaker, num_vq=gpt.num_vq, num_audio_tokens=gpt.num_audio_tokens,
            max_sample_s=options.max_sample_s,
        )  # fmt: skip
        self._generated = location.generated
        if options.voice_prefix_cache_mb:
            from engines.chattts.prefix_cache import PrefixCache

            self._prefixes = PrefixCache(int(options.voice_prefix_cache_mb * 2**20))
        # Random weights ignore [speed_N]: the gateway then time-stretches every speed.
        speed_range = (1.0, 1.0) if location.generated else NATIVE_SPEED_RANGE
        voices = tuple(VoiceInfo(name, "ChatTTS speaker sampled from the voice name") for name in OPENAI_VOICES)
        details = {"weights": location.description, "path": str(location.path), "device": str(device),
                   "dtype": str(dtype).removeprefix("torch."),
                   "text_normalizer": active_normalizer() if options.normalize else OFF,
                   "decoder": "torch" if self._graph is None else "onnxruntime", "max_batch": batch,
                   "decode_weights": self._weights.describe(),
                   "prefill_weights": prefill,
                   "stream_decode": "beside the steps" if overlap else "between the steps",
                   "audio_decoder": "torch" if audio is None else audio.describe(),
                   "first_chunk": describe_first_chunks(self._step_ms, options.stream_first_tokens,
                                                        options.stream_first_tokens_min)}  # fmt: skip
        # Weights without the DVAE's encoder (ChatTTS's own decode-only builds) cannot encode a sample.
        clones = hasattr(self._chat.dvae, "encoder")
        return EngineInfo("chattts", SAMPLE_RATE, voices, speed_range, self._max_batch, details, clones_voices=clones)

    def _decode_graph(self, location: WeightsLocation, device: torch.device) -> DecodeGraph | None:
        """The decode graph where ``decoder`` asks for it (``auto``: on CPU with a float32 backbone), else ``None``
        (torch steps)."""
        import torch

        wanted = self.options.decoder
        on_cpu_in_float32 = device.type == "cpu" and self._chat.gpt.gpt.dtype == torch.float32
        if wanted == "torch" or (wanted == "auto" and not on_cpu_in_float32):
            return None
        from engines.chattts.generation import stacked_audio_heads
        from engines.chattts.onnx_step import graph_key, graph_path, load_decode_graph

        if device.type != "cpu":
            logger.warning("decoder onnxruntime runs on CPU only here (the device is %s): decode steps stay in torch",
                           device)  # fmt: skip
            return None
        dtype, cache_dir = self._chat.gpt.gpt.dtype, Path(self.options.cache_dir).expanduser()
        try:
            path = graph_path(location.path, cache_dir, graph_key(location.hashes, dtype))
            int8_path, choice = None, choose_weights(self.options.weights, onnxruntime_on_cpu=True)
            if choice.weights == "int8":
                int8_path = graph_path(location.path, cache_dir, graph_key(location.hashes, dtype, int8=True))
        except (OSError, ImportError) as exc:
            logger.warning("decoder onnxruntime unavailable, decode steps stay in torch: %s", exc)
            return None
        heads = stacked_audio_heads(self._chat)
        graph = load_decode_graph(self._chat, heads, path, torch.get_num_threads(), int8_path)
        if graph is not None:
            self._weights = choice
            logger.info("decode steps through ONNX Runtime (%s), weights %s", graph.path, choice.describe())
        return graph

    def _audio_graph(self, location: WeightsLocation, device: torch.device) -> AudioGraph | None:
        """The streaming decode's graph where ``audio_decoder`` asks for it (``auto``: beside ONNX Runtime's steps),
        in 8 bits as ``audio_weights`` says; ``None``: the decode runs in torch."""
        wanted = self.options.audio_decoder
        if wanted == "torch" or (wanted == "auto" and self._graph is None):
            return None
        if device.type != "cpu":
            logger.warning("audio_decoder onnxruntime runs on CPU only here (the device is %s): audio decoded in torch",
                           device)  # fmt: skip
            return None
        import torch

        from engines.chattts.audio_graph import load_audio_graph

        weights = self.options.audio_weights
        int8 = weights == "int8" or (weights == "auto" and self._weights.weights == "int8")
        threads = self.options.stream_decode_threads or torch.get_num_threads()
        cache_dir = Path(self.options.cache_dir).expanduser()
        return load_audio_graph(self._chat, location.hashes, location.path, cache_dir, threads, int8=int8,
                                wide_threads=self._alone_decode_threads())  # fmt: skip

    def _alone_decode_threads(self) -> int:
        import torch

        return self.options.stream_decode_threads_alone or torch.get_num_threads()

    def _overlap(self) -> bool:
        """Whether the streaming decode runs beside the token loop (``stream_decode_overlap``): with ``auto``, where
        the decode steps run in ONNX Runtime, whose threads do not spin between steps (torch's OpenMP threads do: a
        decode thread beside them mostly takes turns with them)."""
        if self.options.stream_decode_overlap == "auto":
            return self._graph is not None  # quiet 2 cores: 1.19-1.21x the audio at c=1, 1.08-1.27x at c=4
        return self.options.stream_decode_overlap == "on"

    def _batch_size(self) -> str:
        """Settle ``max_batch`` (measured where ``auto``); returns how it was chosen, for the engine's details."""
        from engines.chattts.batch_size import measure_batch, time_steps_up_to

        if isinstance(self.options.max_batch, int):  # timed too: the first chunks' length follows the batch's step
            self._max_batch = self.options.max_batch
            self._step_ms = time_steps_up_to(self._chat, self._graph, self._max_batch)
            return str(self._max_batch)

        choice = measure_batch(self._chat, self._graph, self.options)
        self._max_batch, self._step_ms = choice.size, choice.step_ms
        logger.info("max_batch %s", choice.describe())
        return choice.describe()

    def _device(self, torch_module: Any) -> torch.device:
        wanted = self.options.device
        if wanted == "cuda" and not torch_module.cuda.is_available():
            raise EngineUnavailableError("device 'cuda' was asked for but torch sees no CUDA device")
        if wanted == "auto":
            wanted = "cuda" if torch_module.cuda.is_available() else "cpu"
        device: torch.device = torch_module.device(wanted)
        return device

    def _dtype(self, torch_module: Any, device: torch.device) -> torch.dtype:
        wanted = self.options.dtype
        if wanted == "auto":
            wanted = "float16" if device.type == "cuda" else "float32"
        if device.type == "cpu" and wanted == "float16":
            logger.warning(
                "dtype float16 on CPU: torch has no fast path for it there (use float32, or bfloat16 "
                "where the CPU supports it)"
            )
        if device.type == "cpu" and wanted == "bfloat16" and not torch_module.ops.mkldnn._is_mkldnn_bf16_supported():
            logger.warning("dtype bfloat16 on a CPU without bfloat16 support in torch: expect it slower than float32")
        dtype: torch.dtype = getattr(torch_module, wanted)
        return dtype

    @property
    def batch_window_ms(self) -> float:
        return self.options.batch_window_ms

    # ----------------------------------------------------------------- synthesis
    def synthesize(
        self, request: SynthesisRequest, cancel: CancelToken
    ) -> Generator[npt.NDArray[np.int16], None, None]:
        for _, item in self.synthesize_batch([request], [cancel]):
            if isinstance(item, InvalidSynthesisRequestError):
                raise item
            if item is None:
                return
            yield item

    def synthesize_batch(
        self,
        requests: Sequence[SynthesisRequest],
        cancels: Sequence[CancelToken],
        arrivals: JobSource | None = None,
    ) -> Generator[BatchItem, None, None]:
        """Speak several requests as one batched generation; see :class:`engines.base.BatchingEngine`.

        Each request speaks its sentence segments one after the other; the segments of different requests share the
        token loop. With ``continuous_batching``, a request's next segment joins the running batch as soon as its
        previous one ends, and so do the requests ``arrivals`` hands over (up to ``max_batch`` requests in all);
        without it, the next segments start together once every running segment has ended, and ``arrivals`` is
        never asked. Each request's audio streams as its own tokens come and ends at its own end.
        """
        if self._chat is None:
            raise EngineUnavailableError("the ChatTTS engine is not loaded")
        from engines.chattts.generation import CodeBatch

        codes = CodeBatch(self._chat, self._sampling(), self.options.prefill_chunk_tokens, self._graph, self._prefixes)
        live: dict[int, _Plan] = {}
        jobs: deque[_Job] = deque()  # the streaming decode's, first handed first
        indices = itertools.count()
        yield from self._admit(zip(requests, cancels, strict=True), indices, live)
        while live:
            if arrivals is not None:  # every step, even when full: the worker answers samples to encode then
                yield from self._admit(arrivals(self._room(live)), indices, live)
            yield from self._end_idle(live)
            events = self._advance(codes, live)
            if events is None:  # no row to step: every running segment waits for a chunk's decode
                yield from self._decode_due([], live, jobs, wait=True)
            else:
                yield from self._deliver(events, live, jobs, stepping=codes.size > 0)

    def _admit(
        self, jobs: Iterable[tuple[SynthesisRequest, CancelToken]], indices: Iterator[int], live: dict[int, _Plan]
    ) -> Generator[BatchItem, None, None]:
        """Plan new requests (numbered from ``indices``) into ``live``; report at once those that will not speak."""
        # ``jobs`` first: zip must not draw an index it will not use.
        for (request, cancel), index in zip(jobs, indices, strict=False):
            try:
                plan = self._plan(index, request, cancel)
            except InvalidSynthesisRequestError as exc:
                yield index, exc
                continue
            if not plan.segments:  # nothing speakable (emoji, punctuation only): a short silence
                yield index, np.zeros(int(SAMPLE_RATE * _EMPTY_AUDIO_S), dtype=np.int16)
                yield index, None
                continue
            live[index] = plan

    def _room(self, live: dict[int, _Plan]) -> int:
        """How many more requests may join the running batch now."""
        return max(0, self._max_batch - len(live)) if self.options.continuous_batching else 0

    @staticmethod
    def _end_idle(live: dict[int, _Plan]) -> Generator[BatchItem, None, None]:
        """End the requests cancelled while none of their segments was in the token loop."""
        for plan in [plan for plan in live.values() if plan.done and (plan.ending or not plan.running)]:
            del live[plan.index]
            yield plan.index, None

    def _advance(self, codes: CodeBatch, live: dict[int, _Plan]) -> list[StepEvent] | None:
        """Hand the segments that may start now to the token loop, then take one step (a forward pass that also
        prefills the waiting prompts); ``None`` when no row may step while a chunk is being decoded."""
        ending = any(plan.ending for plan in live.values())  # a segment whose last chunk is still being decoded
        may_join = self.options.continuous_batching or not (codes.size or ending)  # without: the next ones together
        if may_join and (starting := [plan for plan in live.values() if not plan.running]):
            for plan in starting:
                plan.running, plan.decoder = True, self._stream_decoder()
            codes.join([self._code_request(plan) for plan in starting])
        self._pace_first_chunks(live, codes.size)
        if not codes.size:  # every live request runs a segment, so the token loop cannot be empty
            if ending:  # unless its last token came, and its last chunk is due
                return None
            raise RuntimeError("the token loop lost a running sequence")
        return codes.step()

    def _pace_first_chunks(self, live: dict[int, _Plan], rows: int) -> None:
        """Shorten the coming first chunks to the batch's step (``stream_first_tokens_min``)."""
        coming = [plan.decoder for plan in live.values() if plan.decoder is not None and not plan.decoder.started]
        if not coming or not self._step_ms or not rows:  # most steps: every running request already speaks
            return
        from engines.chattts.batch_size import first_chunk_tokens

        options = self.options
        tokens = first_chunk_tokens(self._step_ms, rows, options.stream_first_tokens, options.stream_first_tokens_min)
        for decoder in coming:
            decoder.first_tokens = tokens

    def _deliver(
        self, events: list[StepEvent], live: dict[int, _Plan], jobs: deque[_Job], *, stepping: bool
    ) -> Generator[BatchItem, None, None]:
        """Feed each request's decoder with its new tokens; yield the audio that is due and the ends (``stepping``:
        rows are left in the token loop)."""
        for index, hidden in events:
            plan = live.get(index)
            if plan is None:
                continue  # already ended (cancelled): the token loop drops its row at its next step
            if plan.cancel.is_set():
                del live[index]  # report it now: the others of the batch go on
                yield index, None
                continue
            assert plan.decoder is not None
            if hidden is None:
                plan.ending = True  # its last decode covers a chunk that fell due at this same step too
            else:
                plan.decoder.add(hidden)
        yield from self._decode_due([index for index, _ in events], live, jobs, stepping=stepping)

    @staticmethod
    def _held(due: dict[int, bool], live: dict[int, _Plan]) -> list[int]:
        """The due later chunks that wait while a request waits for its first audio.

        A decode stops every row's next step for as long as it takes (a chunk's window costs a few steps): a new
        request that must wait out the running rows' decodes before its own first chunk hears it later the bigger the
        batch. So while a segment's first chunk is coming, the others' later chunks wait, within what their listeners
        have left (:meth:`StreamDecoder.may_wait`) and up to ``stream_max_chunk_tokens``; they then leave as one
        bigger chunk, which costs less than two (each chunk decodes its left context again)."""
        if all(plan.decoder is None or plan.decoder.started for plan in live.values() if plan.running):
            return []
        return [
            index for index, ended in due.items()
            if not ended and (decoder := live[index].decoder) is not None and decoder.may_wait()
        ]  # fmt: skip

    def _decode_due(
        self, order: list[int], live: dict[int, _Plan], jobs: deque[_Job], *, wait: bool = False, stepping: bool = False
    ) -> Generator[BatchItem, None, None]:
        """Yield the decoded chunks (``wait``: the first one handed, once decoded), then hand the due chunks to the
        streaming decode, those of the requests in ``order`` first: first chunks first, so that a new request's first
        audio leaves before the others' chunks are decoded (``engines/chattts/chunk_order.py``). First chunks leave
        before the next step; later ones too between the steps, and beside them (``engines/chattts/overlap.py``) at
        the first pass after their decode (``stepping``: rows are left to step meanwhile; where not, the decode is
        alone: ``stream_decode_threads_alone``). A request whose chunk is being decoded hands over no other until it
        is out: its audio stays in order."""
        from engines.chattts.chunk_order import first_chunks_first

        if wait:
            if not jobs:  # nothing steps and nothing is decoded: nothing would ever change
                raise RuntimeError("the token loop lost a running sequence")
            jobs[0].audio.result()
        yield from self._decoded(live, jobs)
        due: dict[int, bool] = {}  # the requests with audio due, and whether their segment ended
        for index in dict.fromkeys(order + list(live)):  # one window in flight per request: its chunks in order
            plan = live.get(index)
            if plan is None or plan.decoding or not plan.running or plan.decoder is None:
                continue
            if plan.ending or plan.decoder.due():
                due[index] = plan.ending
        for index in self._held(due, live):
            del due[index]
        for group in first_chunks_first([(live[index], ended) for index, ended in due.items()],
                                        lambda item: item[0].decoder):  # fmt: skip
            first = not any(plan.decoder is not None and plan.decoder.started for plan, _ in group)
            job = self._hand_over(group, alone=first or not stepping)
            jobs.append(job)
            if first:
                job.audio.result()  # first chunks leave before the next step, as between the steps: first audio as soon
            yield from self._decoded(live, jobs)

    def _hand_over(self, due: list[tuple[_Plan, bool]], *, alone: bool) -> _Job:
        """Hand chunks to the streaming decode together (one call per window length); ``alone``: no step will run
        beside their decode."""
        assert self._decodes is not None
        decoders = [plan.decoder for plan, _ in due if plan.decoder is not None]
        windows = [decoder.window() for decoder in decoders]
        spoken = [position for position, window in enumerate(windows) if len(window)]  # a segment may end tokenless
        for plan, _ in due:
            plan.decoding = True
        audio = self._decodes.submit(self._chat, [windows[position] for position in spoken], alone=alone)
        chunks = [(plan, ended, decoder) for (plan, ended), decoder in zip(due, decoders, strict=True)]
        return _Job(chunks, spoken, audio)

    @staticmethod
    def _decoded(live: dict[int, _Plan], jobs: deque[_Job]) -> Generator[BatchItem, None, None]:
        """Yield the chunks whose decode has ended, first handed first, with the requests' ends."""
        from engines.chattts.streaming import to_int16

        while jobs and jobs[0].audio.done():
            job = jobs.popleft()
            audio = dict(zip(job.spoken, job.audio.result(), strict=True))
            for position, (plan, ended, decoder) in enumerate(job.due):
                if live.get(plan.index) is not plan:
                    continue  # cancelled meanwhile: already ended
                plan.decoding = False
                if plan.cancel.is_set():  # while it was decoded: its audio no longer has a listener
                    del live[plan.index]
                    yield plan.index, None
                    continue
                chunk = decoder.emit(audio[position], ended) if position in audio else None
                if ended:
                    plan.spoken, plan.running, plan.ending = plan.spoken + 1, False, False
                if chunk is not None and chunk.size:
                    yield plan.index, to_int16(chunk)
                if plan.done:
                    del live[plan.index]  # its last segment ended: no need to wait for the rest of the batch
                    yield plan.index, None

    def _stream_decoder(self) -> StreamDecoder:
        from engines.chattts.streaming import StreamDecoder

        options = self.options
        return StreamDecoder(
            first_tokens=options.stream_first_tokens,
            chunk_tokens=options.stream_chunk_tokens,
            left_context=options.stream_left_context,
            max_chunk_tokens=options.stream_max_chunk_tokens,
        )

    def _plan(self, index: int, request: SynthesisRequest, cancel: CancelToken) -> _Plan:
        _check_language(request.language)
        prefix, speaker, codes = self._voice_prompt(request)
        seed = request.seed if request.seed is not None else self.options.seed
        if seed is None:
            seed = random.getrandbits(62)
        suffix = self._tag_ids(["[Ptts]"])
        segments: list[list[int]] = []
        instructions = request.instructions
        if request.control_tokens:  # the refinement tags the caller typed prompt the refinement too
            instructions = (instructions or "") + split_control_tokens(request.text).prompt
        spoken = self._spoken(request.text, control_tokens=request.control_tokens, normalize=request.normalize_text)
        for number, text in enumerate(split_segments(spoken, self.options.max_segment_chars)):
            if cancel.is_set():
                break
            ids = self._text_ids(self._refine(text, instructions, seed + number))
            if ids:
                segments.append(prefix + ids + suffix)
        shared = len(prefix) if codes is not None else 0  # a named voice's prefix is three tokens: not worth it
        return _Plan(index, segments, speaker, codes, seed % _SEED_MODULUS, cancel, shared_prefix=shared)

    def _voice_prompt(self, request: SynthesisRequest) -> tuple[list[int], torch.Tensor | None, torch.Tensor | None]:
        """What each segment's prompt starts with, the speaker embedding, and the sample's codes it ends with.

        A voice from a sample is prompted as ChatTTS's ``_infer_code`` prompts ``spk_smp`` with ``txt_smp``:
        ``[Stts][empty_spk]`` + transcript + ``[speed_N]`` + text + ``[Ptts]`` + the sample's codes
        (``Speaker.decorate_code_prompts``, ``Tokenizer.encode``). The transcript is read as the text is (cleaned,
        and normalized when ``normalize`` is on; characters the tokenizer cannot read dropped where ChatTTS would
        write ``[UNK]``), so that its tokens say what the recording says.
        """
        from engines.chattts.voices import SampleVoice

        assert self._voices is not None
        voice = self._voices.resolve(request.voice, request.speaker)
        typed = split_control_tokens(request.text).speed if request.control_tokens else None
        speed = typed or speed_tag(request.speed)
        if isinstance(voice, SampleVoice):
            transcript = self._text_ids(self._spoken(voice.transcript))
            return self._tag_ids(["[Stts]", "[empty_spk]"]) + transcript + self._tag_ids([speed]), None, voice.codes
        return self._tag_ids(["[Stts]", "[spk_emb]", speed]), voice, None

    def _spoken(self, text: str, *, control_tokens: bool = False, normalize: bool = True) -> str:
        """``text`` as the tokenizer reads it. Brackets are dropped, so a control token a caller typed is read as its
        words; with ``control_tokens`` (the caller opted in) the inline ones (``[laugh]``, ``[uv_break]`` …) stay,
        as the tags they are, and the prompt ones (``[oral_N]``, ``[speed_N]`` …) go to the prompts. Without
        ``normalize`` (the request's ``normalize_text``) digits and symbols are not read as words."""
        if not control_tokens:
            return self._readable(text, normalize=normalize)
        pieces = split_control_tokens(text).pieces
        return " ".join(
            piece if ControlTokens.is_token(piece) else self._readable(piece, normalize=normalize) for piece in pieces
        )

    def _readable(self, text: str, *, normalize: bool = True) -> str:
        spoken = prepare_text(text)
        if normalize and self.options.normalize:  # digits, money, dates and symbols as words: the tokenizer reads
            spoken = normalize_text(spoken)  # only words
        return spoken

    # ----------------------------------------------------------------- voices from samples
    def speaker_from_sample(self, pcm: npt.NDArray[np.int16], sample_rate: int, transcript: str) -> str:
        """``smp:`` + ChatTTS's speaker prompt of the sample (``Chat.sample_audio_speaker``: its DVAE codes) + ``|`` +
        the transcript (``engines/chattts/voices.py``). One DVAE encoder pass: a few tens of milliseconds."""
        import torch

        if self._chat is None or self._voices is None:
            raise EngineUnavailableError("the ChatTTS engine is not loaded")
        self._check_sample(pcm.size / sample_rate, transcript)
        wav = torch.from_numpy(pcm.astype(np.float32) / 32768.0)
        if sample_rate != SAMPLE_RATE:  # the DVAE's mel features are computed at 24 kHz
            import torchaudio.functional  # type: ignore[import-untyped]

            wav = torchaudio.functional.resample(wav, sample_rate, SAMPLE_RATE)
        with torch.inference_mode():
            codes = self._chat.dvae.sample_audio(wav.to(self._chat.device))
        speaker = self._voices.sample_speaker(codes, transcript)
        if len(speaker) > MAX_SPEAKER_CHARS:  # noisy audio compresses worst: about 120 characters a second
            raise InvalidSynthesisRequestError(
                f"This sample's ChatTTS speaker prompt and transcript take {len(speaker)} characters, more than "
                f"{MAX_SPEAKER_CHARS}: send a shorter sample.",
                param="audio_sample",
            )
        return speaker

    def _check_sample(self, seconds: float, transcript: str) -> None:
        longest = self.options.max_sample_s
        if not _MIN_SAMPLE_S <= seconds <= longest:
            raise InvalidSynthesisRequestError(
                f"A ChatTTS voice sample must last {_MIN_SAMPLE_S:g} to {longest:g} s (its audio codes start every "
                f"prompt of the voice and its speaker string must stay within {MAX_SPEAKER_CHARS} characters); this "
                f"one lasts {seconds:.1f} s.",
                param="audio_sample",
            )
        if len(transcript) > _MAX_TRANSCRIPT_CHARS:
            raise InvalidSynthesisRequestError(
                f"The transcript is longer than {_MAX_TRANSCRIPT_CHARS} characters.", param="transcript"
            )
        if not self._text_ids(self._spoken(transcript)):
            raise InvalidSynthesisRequestError(
                "The transcript has no words ChatTTS can read: give the exact words of the sample.", param="transcript"
            )

    def _code_request(self, plan: _Plan) -> CodeRequest:
        from engines.chattts.generation import CodeRequest

        options = self.options
        seed = (plan.seed * 1_000_003 + plan.spoken) % _SEED_MODULUS  # each segment its own, repeatable stream
        return CodeRequest(
            plan.index, plan.segments[plan.spoken], plan.speaker, seed, options.max_new_token,
            options.min_new_token, plan.cancel, plan.codes, plan.shared_prefix,
        )  # fmt: skip

    def _sampling(self) -> Sampling:
        from engines.chattts.generation import Sampling

        options = self.options
        return Sampling(options.temperature, options.top_P, options.top_K, options.repetition_penalty)

    # ----------------------------------------------------------------- text
    def _tag_ids(self, tags: list[str]) -> list[int]:
        ids: list[int] = self._chat.tokenizer._tokenizer.convert_tokens_to_ids(tags)
        return ids

    def _text_ids(self, text: str) -> list[int]:
        tokenizer = self._chat.tokenizer._tokenizer
        encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        ids: list[int] = encoded["input_ids"]
        unknown = tokenizer.unk_token_id
        # Characters the tokenizer does not know are dropped rather than spoken as [UNK]; never silently.
        if unknown in ids and logger.isEnabledFor(logging.DEBUG):
            offsets = zip(ids, encoded["offset_mapping"], strict=True)
            spans = [text[start:end] for i, (start, end) in offsets if i == unknown]
            dropped = _unknown_characters(tokenizer, spans)
            logger.debug("dropped %d character(s) the tokenizer cannot read: %s", dropped.total(), dict(dropped))
        return [i for i in ids if i != unknown]

    def _refine(self, text: str, instructions: str | None, seed: int) -> str:
        """ChatTTS's text refinement (adds ``[uv_break]``-style tags), when configured or asked for by tags."""
        tags = control_tags(instructions)
        if not (self.options.refine_text or tags):
            return text
        chat = self._chat
        params = chat.RefineTextParams(
            prompt=tags, max_new_token=self.options.refine_max_new_token, show_tqdm=False,
            manual_seed=seed % _SEED_MODULUS,
        )  # fmt: skip
        with warnings.catch_warnings():
            # ChatTTS's own GPT.generate passes past_key_values, deprecated in transformers 5 (pinned below 5.40).
            warnings.filterwarnings("ignore", message="`past_key_values` is deprecated", category=FutureWarning)
            refined = chat._refine_text([text], chat.device, params)
        ids = [i[i.less(chat.tokenizer.break_0_ids)] for i in refined.ids]
        result: str = chat.tokenizer.decode(ids)[0]
        refined.destroy()
        return result


def _check_language(language: str | None) -> None:
    """Refuse a language ChatTTS was not trained on: it speaks English and Mandarin, and tells them apart itself.

    Raises:
        InvalidSynthesisRequestError: any other language (``param`` ``language_code``).
    """
    if language is not None and language.lower().replace("_", "-").split("-")[0] not in _LANGUAGES:
        raise InvalidSynthesisRequestError(
            f"ChatTTS cannot speak the language '{language}': it speaks English (en) and Chinese (zh).",
            param="language_code",
        )


def _unknown_characters(tokenizer: Any, spans: list[str]) -> Counter[str]:
    """The characters of the ``[UNK]`` spans that the tokenizer cannot read on their own.

    A WordPiece ``[UNK]`` covers a whole word (``café`` for one ``é``): report the characters, not the word, so that
    the log names what is missing without repeating the input.
    """
    found: Counter[str] = Counter()
    for span in spans:
        unknown = [c for c in span if tokenizer.encode(c, add_special_tokens=False) in ([], [tokenizer.unk_token_id])]
        found.update(unknown or ["<word>"])
    return found
