# ruff: noqa: PLC0415 - torch, transformers and ChatTTS are imported lazily: the server process never loads them
"""The ChatTTS engine: verified weights, stable voices, sentence segments, incremental streaming, dynamic batching,
and voices from samples (ChatTTS's speaker prompts)."""

from __future__ import annotations

import itertools
import random
from collections import deque
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
from engines.chattts.normalize import OFF, active_normalizer
from engines.chattts.options import ChatTTSOptions
from engines.chattts.placement import (
    alone_decode_threads,
    choose_device,
    choose_dtype,
    step_graph,
    stream_decode_graph,
)
from engines.chattts.prompts import SEED_MODULUS, Prompts, VoicePrompt
from engines.chattts.weights import choose_weights
from lifecycle import naming

if TYPE_CHECKING:
    from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
    from concurrent.futures import Future

    import numpy.typing as npt

    from engines.base import BatchItem, CancelToken, JobSource, SynthesisRequest
    from engines.chattts.batches import CodeBatches
    from engines.chattts.generation import CodeRequest, Sampling, StepEvent
    from engines.chattts.onnx_step import DecodeGraph
    from engines.chattts.overlap import Audio, DecodeRunner
    from engines.chattts.prefix_cache import PrefixCache
    from engines.chattts.streaming import StreamDecoder
    from engines.chattts.voices import SpeakerBank

__all__ = ["ChatTTSEngine"]

logger = naming.logger("chattts")

SAMPLE_RATE = 24000
NATIVE_SPEED_RANGE = (0.5, 2.0)
_EMPTY_AUDIO_S = 0.1


@dataclass
class _Plan:
    """One request of a batch: its segments still to speak and the decoder of the current one."""

    index: int
    segments: list[list[int]]
    voice: VoicePrompt
    """What its voice puts in every segment's prompt."""
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
    repeatable: bool = False
    """The request carries a seed: its audio repeats byte for byte, whatever else the engine does. Its segments run
    in batches of their own (``engines/chattts/batches.py``), its chunks are cut at fixed token counts
    (``StreamDecoder.fixed_chunks``), each decoded in a call of its own on one session."""

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
        self._prompts: Prompts | None = None
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
        device = choose_device(options, torch)
        dtype = choose_dtype(options, torch, device)
        self._chat = load_chat(location, device, dtype)
        if device.type == "cpu":  # a few rows per decode step: measured, the faster product for each row count
            use_small_batch_linear(self._chat.gpt.gpt, blocked=options.blocked_weights)
        steps = step_graph(self._chat, options, location, device)
        if steps is not None:
            self._graph, self._weights = steps
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
        audio = stream_decode_graph(self._chat, options, location, device, None if steps is None else steps[1])
        self._decodes = DecodeRunner(overlap=overlap, threads=options.stream_decode_threads, graph=audio,
                                     alone_threads=alone_decode_threads(options))  # fmt: skip
        gpt = self._chat.config.gpt
        self._voices = SpeakerBank(
            self._chat.speaker, num_vq=gpt.num_vq, num_audio_tokens=gpt.num_audio_tokens,
            max_sample_s=options.max_sample_s,
        )  # fmt: skip
        self._prompts = Prompts(self._chat, self._voices, options)
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

    @property
    def prompts(self) -> Prompts:
        """Token ids of texts, tags and whole prompts, as the loaded engine reads them."""
        if self._prompts is None:
            raise EngineUnavailableError("the ChatTTS engine is not loaded")
        return self._prompts

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
        from engines.chattts.batches import CodeBatches
        from engines.chattts.generation import CodeBatch

        shared = CodeBatch(self._chat, self._sampling(), self.options.prefill_chunk_tokens, self._graph, self._prefixes)
        codes = CodeBatches(shared)
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

    def _advance(self, codes: CodeBatches, live: dict[int, _Plan]) -> list[StepEvent] | None:
        """Hand the segments that may start now to the token loop, then take one step (a forward pass that also
        prefills the waiting prompts); ``None`` when no row may step while a chunk is being decoded."""
        ending = any(plan.ending for plan in live.values())  # a segment whose last chunk is still being decoded
        may_join = self.options.continuous_batching or not (codes.size or ending)  # without: the next ones together
        if may_join and (starting := [plan for plan in live.values() if not plan.running]):
            for plan in starting:
                plan.running, plan.decoder = True, self._stream_decoder(fixed_chunks=plan.repeatable)
            codes.join([self._code_request(plan) for plan in starting])
        self._pace_first_chunks(live, codes.size)
        if not codes.size:  # every live request runs a segment, so the token loop cannot be empty
            if ending:  # unless its last token came, and its last chunk is due
                return None
            raise RuntimeError("the token loop lost a running sequence")
        return codes.step()

    def _pace_first_chunks(self, live: dict[int, _Plan], rows: int) -> None:
        """Shorten the coming first chunks to the batch's step (``stream_first_tokens_min``)."""
        coming = [
            plan.decoder for plan in live.values()
            if plan.decoder is not None and not plan.decoder.started and not plan.decoder.fixed_chunks
        ]  # fmt: skip
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

        waited = wait and bool(jobs)
        if waited:
            jobs[0].audio.result()
        yield from self._decoded(live, jobs)
        due = self._due(order, live)
        if wait and not waited and not due:  # nothing steps, is decoded or is due: nothing would ever change
            raise RuntimeError("the token loop lost a running sequence")
        for index in self._held(due, live):
            del due[index]
        rounds = first_chunks_first(
            [(live[index], ended) for index, ended in due.items()], lambda item: item[0].decoder,
            apart=lambda item: item[0].repeatable,
        )  # fmt: skip
        for group in rounds:
            first = not any(plan.decoder is not None and plan.decoder.started for plan, _ in group)
            job = self._hand_over(group, alone=first or not stepping)
            jobs.append(job)
            if first:
                job.audio.result()  # first chunks leave before the next step, as between the steps: first audio as soon
            yield from self._decoded(live, jobs)

    @staticmethod
    def _due(order: list[int], live: dict[int, _Plan]) -> dict[int, bool]:
        """The requests with a chunk due, those in ``order`` first, and whether it is their segment's last."""
        due: dict[int, bool] = {}
        for index in dict.fromkeys(order + list(live)):  # one window in flight per request: its chunks in order
            plan = live.get(index)
            if plan is None or plan.decoding or not plan.running or plan.decoder is None:
                continue
            chunk_due = plan.decoder.due()
            if plan.ending or chunk_due:
                # Fixed chunks: every chunk its tokens reached leaves before the last, however late the end was seen.
                due[index] = plan.ending and not (plan.decoder.fixed_chunks and chunk_due)
        return due

    def _hand_over(self, due: list[tuple[_Plan, bool]], *, alone: bool) -> _Job:
        """Hand chunks to the streaming decode together (one call per window length); ``alone``: no step will run
        beside their decode."""
        assert self._decodes is not None
        chunks = [(plan, ended, plan.decoder) for plan, ended in due if plan.decoder is not None]
        windows = [decoder.window(final=ended) for _, ended, decoder in chunks]
        spoken = [position for position, window in enumerate(windows) if len(window)]  # a segment may end tokenless
        for plan, _ in due:
            plan.decoding = True
        repeatable = any(plan.repeatable for plan, _ in due)  # then alone in its round: first_chunks_first's apart
        audio = self._decodes.submit(
            self._chat, [windows[position] for position in spoken], alone=alone, repeatable=repeatable
        )
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

    def _stream_decoder(self, *, fixed_chunks: bool) -> StreamDecoder:
        from engines.chattts.streaming import StreamDecoder

        options = self.options
        return StreamDecoder(
            first_tokens=options.stream_first_tokens,
            chunk_tokens=options.stream_chunk_tokens,
            left_context=options.stream_left_context,
            max_chunk_tokens=options.stream_max_chunk_tokens,
            fixed_chunks=fixed_chunks,
        )

    def _plan(self, index: int, request: SynthesisRequest, cancel: CancelToken) -> _Plan:
        seed = request.seed if request.seed is not None else self.options.seed
        if seed is None:
            seed = random.getrandbits(62)
        voice, segments = self.prompts.segments(request, seed, cancel)
        # Only a request's own seed costs it its batch: the engine's ``seed`` seeds all of them, and would unbatch all.
        return _Plan(index, segments, voice, seed % SEED_MODULUS, cancel, repeatable=request.seed is not None)

    # ----------------------------------------------------------------- voices from samples
    def speaker_from_sample(self, pcm: npt.NDArray[np.int16], sample_rate: int, transcript: str) -> str:
        """``smp:`` + ChatTTS's speaker prompt of the sample (``Chat.sample_audio_speaker``: its DVAE codes) + ``|`` +
        the transcript (``engines/chattts/voices.py``). One DVAE encoder pass: a few tens of milliseconds."""
        import torch

        if self._chat is None or self._voices is None:
            raise EngineUnavailableError("the ChatTTS engine is not loaded")
        self.prompts.check_sample(pcm.size / sample_rate, transcript)
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

    def _code_request(self, plan: _Plan) -> CodeRequest:
        from engines.chattts.generation import CodeRequest

        options = self.options
        seed = (plan.seed * 1_000_003 + plan.spoken) % SEED_MODULUS  # each segment its own, repeatable stream
        return CodeRequest(
            plan.index, plan.segments[plan.spoken], plan.voice.speaker, seed, options.max_new_token,
            options.min_new_token, plan.cancel, plan.voice.codes, plan.voice.shared_prefix, plan.repeatable,
        )  # fmt: skip

    def _sampling(self) -> Sampling:
        from engines.chattts.generation import Sampling

        options = self.options
        return Sampling(options.temperature, options.top_P, options.top_K, options.repetition_penalty)
