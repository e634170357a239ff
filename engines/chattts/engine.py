# ruff: noqa: PLC0415 - torch, transformers and ChatTTS are imported lazily: the server process never loads them
"""The ChatTTS engine: verified weights, stable voices, sentence segments, incremental streaming, dynamic batching."""

from __future__ import annotations

import random
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from engines.base import OPENAI_VOICES, EngineInfo, EngineUnavailableError, InvalidSynthesisRequestError, VoiceInfo
from engines.chattts.options import ChatTTSOptions
from engines.chattts.text import control_tags, prepare_text, speed_tag, split_segments

if TYPE_CHECKING:
    from collections.abc import Generator, Mapping, Sequence

    import numpy.typing as npt
    import torch

    from engines.base import BatchItem, CancelToken, SynthesisRequest
    from engines.chattts.generation import CodeRequest, Sampling
    from engines.chattts.streaming import StreamDecoder
    from engines.chattts.voices import SpeakerBank

__all__ = ["ChatTTSEngine"]

SAMPLE_RATE = 24000
NATIVE_SPEED_RANGE = (0.5, 2.0)
_SEED_MODULUS = 2**63
_EMPTY_AUDIO_S = 0.1


@dataclass
class _Plan:
    """One request of a batch: its segments still to speak and the decoder of the current one."""

    index: int
    segments: list[list[int]]
    speaker: torch.Tensor
    seed: int
    cancel: CancelToken
    spoken: int = 0
    ended: bool = False
    """The end of this request has been reported."""
    decoder: StreamDecoder | None = field(default=None, repr=False)

    @property
    def done(self) -> bool:
        return self.spoken >= len(self.segments) or self.cancel.is_set()


class ChatTTSEngine:
    """ChatTTS 0.2.5 behind the engine protocol, with batching (:class:`engines.base.BatchingEngine`)."""

    def __init__(self, options: Mapping[str, object] | None = None) -> None:
        self.options = ChatTTSOptions.parse(options)
        self._chat: Any = None
        self._voices: SpeakerBank | None = None
        self._generated = False

    # ----------------------------------------------------------------- loading
    def load(self) -> EngineInfo:
        options = self.options
        try:
            import torch

            from engines.chattts.loader import load_chat, locate_weights
            from engines.chattts.voices import SpeakerBank
        except ImportError as exc:  # e.g. torchaudio built for CUDA next to a CPU torch: scripts/fix_torchaudio.py
            raise EngineUnavailableError(f"ChatTTS cannot be imported here: {exc}") from exc
        if options.threads:
            torch.set_num_threads(options.threads)
        device = self._device(torch)
        half = options.half if options.half is not None else device.type == "cuda"
        cache_dir = Path(options.cache_dir).expanduser()
        location = locate_weights(options.source, options.path, cache_dir, options.download, options.hub_timeout_s)
        self._chat = load_chat(location, device, half)
        self._voices = SpeakerBank(self._chat.speaker)
        self._generated = location.generated
        # Random weights ignore [speed_N]: the gateway then time-stretches every speed.
        speed_range = (1.0, 1.0) if location.generated else NATIVE_SPEED_RANGE
        voices = tuple(VoiceInfo(name, "ChatTTS speaker sampled from the voice name") for name in OPENAI_VOICES)
        details = {"weights": location.description, "path": str(location.path), "device": str(device),
                   "dtype": "float16" if half else "float32"}  # fmt: skip
        return EngineInfo("chattts", SAMPLE_RATE, voices, speed_range, options.max_batch, details)

    def _device(self, torch_module: Any) -> torch.device:
        wanted = self.options.device
        if wanted == "cuda" and not torch_module.cuda.is_available():
            raise EngineUnavailableError("device 'cuda' was asked for but torch sees no CUDA device")
        if wanted == "auto":
            wanted = "cuda" if torch_module.cuda.is_available() else "cpu"
        device: torch.device = torch_module.device(wanted)
        return device

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
        self, requests: Sequence[SynthesisRequest], cancels: Sequence[CancelToken]
    ) -> Generator[BatchItem, None, None]:
        """Speak several requests as one batched generation; see :class:`engines.base.BatchingEngine`.

        Round by round, the next sentence segment of every unfinished request is generated in one batch; each
        request's audio streams as its own tokens come and ends at its own end.
        """
        if self._chat is None:
            raise EngineUnavailableError("the ChatTTS engine is not loaded")
        plans: dict[int, _Plan] = {}
        for index, (request, cancel) in enumerate(zip(requests, cancels, strict=True)):
            try:
                plans[index] = self._plan(index, request, cancel)
            except InvalidSynthesisRequestError as exc:
                yield index, exc
                continue
            if not plans[index].segments:  # nothing speakable (emoji, punctuation only): a short silence
                del plans[index]
                yield index, np.zeros(int(SAMPLE_RATE * _EMPTY_AUDIO_S), dtype=np.int16)
                yield index, None
        while active := [plan for plan in plans.values() if not plan.ended]:
            if running := [plan for plan in active if not plan.done]:
                yield from self._round(running)
            for plan in active:
                if plan.done and not plan.ended:
                    plan.ended = True
                    yield plan.index, None

    def _round(self, plans: list[_Plan]) -> Generator[BatchItem, None, None]:
        from engines.chattts.generation import generate_codes
        from engines.chattts.streaming import StreamDecoder, decode_hiddens, to_int16

        by_index = {plan.index: plan for plan in plans}
        for plan in plans:
            plan.decoder = StreamDecoder(
                lambda hiddens: decode_hiddens(self._chat, hiddens), self.options.stream_first_tokens,
                self.options.stream_chunk_tokens, self.options.stream_left_context,
            )  # fmt: skip
        for events in generate_codes(self._chat, [self._code_request(p) for p in plans], self._sampling()):
            for index, hidden in events:
                plan = by_index[index]
                assert plan.decoder is not None
                if plan.ended:
                    continue
                if plan.cancel.is_set():
                    plan.ended = True  # report it now: the others of the batch go on
                    yield index, None
                    continue
                if hidden is not None:
                    chunk = plan.decoder.push(hidden)
                else:
                    chunk = plan.decoder.finish()
                    plan.spoken += 1
                if chunk is not None and chunk.size:
                    yield index, to_int16(chunk)
                if plan.done and not plan.ended:
                    plan.ended = True  # its last segment ended: no need to wait for the rest of the batch
                    yield index, None

    def _plan(self, index: int, request: SynthesisRequest, cancel: CancelToken) -> _Plan:
        assert self._voices is not None
        speaker = self._voices.resolve(request.voice, request.speaker)
        seed = request.seed if request.seed is not None else self.options.seed
        if seed is None:
            seed = random.getrandbits(62)
        prefix = self._tag_ids(["[Stts]", "[spk_emb]", speed_tag(request.speed)])
        suffix = self._tag_ids(["[Ptts]"])
        segments: list[list[int]] = []
        for number, text in enumerate(split_segments(prepare_text(request.text), self.options.max_segment_chars)):
            if cancel.is_set():
                break
            ids = self._text_ids(self._refine(text, request.instructions, seed + number))
            if ids:
                segments.append(prefix + ids + suffix)
        return _Plan(index, segments, speaker, seed % _SEED_MODULUS, cancel)

    def _code_request(self, plan: _Plan) -> CodeRequest:
        from engines.chattts.generation import CodeRequest

        options = self.options
        seed = (plan.seed * 1_000_003 + plan.spoken) % _SEED_MODULUS  # each segment its own, repeatable stream
        return CodeRequest(
            plan.index, plan.segments[plan.spoken], plan.speaker, seed, options.max_new_token,
            options.min_new_token, plan.cancel,
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
        ids: list[int] = tokenizer.encode(text, add_special_tokens=False)
        # Characters the tokenizer does not know are dropped rather than spoken as [UNK].
        return [i for i in ids if i != tokenizer.unk_token_id]

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
