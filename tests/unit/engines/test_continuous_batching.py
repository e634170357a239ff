"""Continuous batching in the ChatTTS engine and its worker, on tiny random-weight assets: requests that arrive while a
batch generates join it at the next step and still get exactly their own audio."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pytest

from engines.base import CancelFlag, EngineInfo, SynthesisRequest
from engines.chattts import ChatTTSEngine
from engines.messages import BatchStarted, EncodeSample, JobChunk, JobEnded, SampleEncoded, StartJob
from engines.timing import word_spans
from tests.chattts_assets import TEST_TOKENS, chattts_engine_options

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from engines.base import CancelToken

pytestmark = pytest.mark.slow  # runs ChatTTS: left out of `make quick`

SAMPLES_PER_SEGMENT = TEST_TOKENS * 512 - 256  # every segment is exactly TEST_TOKENS tokens long here
TOLERANCE = 2
"""int16 steps: the batching tests of test_chattts.py allow this much between batched and alone (left padding)."""

LONG = SynthesisRequest("The first sentence. The second one. And a third.", "nova", seed=21)
LATE = SynthesisRequest("Another voice, later. It says two things.", "onyx", seed=22)
LATER = SynthesisRequest("A third request.", "echo", seed=23)

Events = list[tuple[int, str]]


@pytest.fixture(scope="module")
def engine() -> ChatTTSEngine:
    loaded = ChatTTSEngine(chattts_engine_options(max_batch=4))
    loaded.load()
    return loaded


def alone(engine: ChatTTSEngine, request: SynthesisRequest) -> np.ndarray:
    return np.concatenate(list(engine.synthesize(request, CancelFlag())))


class Arrivals:
    """A job source that hands over each request once the engine has polled it ``after`` times (that is, after
    ``after - 1`` forward passes of the running batch): a deterministic "arrives mid-batch"."""

    def __init__(self, schedule: dict[int, SynthesisRequest]) -> None:
        self.schedule = dict(schedule)
        self.cancels = {after: CancelFlag() for after in schedule}
        self.polls = 0
        self.limits: list[int] = []

    def __call__(self, limit: int) -> Sequence[tuple[SynthesisRequest, CancelToken]]:
        self.polls += 1
        self.limits.append(limit)
        if limit == 0:  # nothing may join now; the engine polls anyway (its worker answers samples then)
            return []
        if (request := self.schedule.pop(self.polls, None)) is None:
            return []
        assert limit >= 1
        return [(request, self.cancels[self.polls])]


def run(
    engine: ChatTTSEngine,
    arrivals: Arrivals,
    first: SynthesisRequest = LONG,
    on_item: Callable[[int, Any], None] | None = None,
) -> tuple[dict[int, list[np.ndarray]], Events]:
    """Each request's chunks (by its index in the batch) and the order of events: ``(index, "chunk" | "end")``."""
    audio: dict[int, list[np.ndarray]] = {}
    events: Events = []
    for index, item in engine.synthesize_batch([first], [CancelFlag()], arrivals):
        assert not events or (index, "end") not in events, "nothing may follow a request's end"
        assert not isinstance(item, Exception)
        events.append((index, "end" if item is None else "chunk"))
        if item is not None:
            audio.setdefault(index, []).append(item)
        if on_item is not None:
            on_item(index, item)
    return audio, events


def assert_same_audio(chunks: list[np.ndarray], reference: np.ndarray) -> None:
    audio = np.concatenate(chunks)
    assert len(audio) == len(reference)
    assert np.allclose(audio, reference, atol=TOLERANCE), "joining a batch must not change a seeded request's audio"


def test_a_request_that_joins_mid_segment_gets_its_own_audio(engine: ChatTTSEngine) -> None:
    # It joins 9 steps into the long request's first segment; later the long request's next segments join while
    # it is mid-segment: both sides get padded on the left at some point.
    audio, events = run(engine, Arrivals({10: LATE}))
    assert sorted(index for index, kind in events if kind == "end") == [0, 1]
    assert_same_audio(audio[0], alone(engine, LONG))
    assert_same_audio(audio[1], alone(engine, LATE))
    assert len(audio[1]) > 1, "the joined request streams in several chunks"


def test_a_late_request_speaks_before_the_long_one_ends(engine: ChatTTSEngine) -> None:
    _, events = run(engine, Arrivals({10: LATER}))
    assert events.index((1, "chunk")) < events.index((0, "end")), "it joined the batch instead of queueing behind it"
    assert events.index((1, "end")) < events.index((0, "end"))


def test_the_next_sentence_of_a_request_joins_while_others_run(engine: ChatTTSEngine) -> None:
    # LATE joins at step 10: the long request's second segment starts while LATE is still mid-segment.
    _, events = run(engine, Arrivals({10: LATE}))
    chunks_of_long = [position for position, event in enumerate(events) if event == (0, "chunk")]
    first_of_late, end_of_late = events.index((1, "chunk")), events.index((1, "end"))
    assert len([p for p in chunks_of_long if first_of_late < p < end_of_late]) >= 2


def test_cancelling_a_joined_request_leaves_the_others_unchanged(engine: ChatTTSEngine) -> None:
    arrivals = Arrivals({5: LATE, 12: LATER})
    late_cancel = arrivals.cancels[5]

    def cancel_late_after_its_first_chunk(index: int, item: Any) -> None:
        if index == 1 and item is not None:
            late_cancel.set()

    audio, events = run(engine, arrivals, on_item=cancel_late_after_its_first_chunk)
    assert sum(len(chunk) for chunk in audio[1]) < SAMPLES_PER_SEGMENT
    assert (1, "end") in events
    assert_same_audio(audio[0], alone(engine, LONG))
    assert_same_audio(audio[2], alone(engine, LATER))


def test_no_more_than_max_batch_requests_run_together(engine: ChatTTSEngine) -> None:
    limits: list[int] = []
    pending = [SynthesisRequest(f"Request {n}.", "alloy", seed=n) for n in range(6)]

    def arrivals(limit: int) -> list[tuple[SynthesisRequest, CancelToken]]:
        limits.append(limit)
        taken, pending[:] = pending[:limit], pending[limit:]
        return [(request, CancelFlag()) for request in taken]

    ended = [index for index, item in engine.synthesize_batch([LONG], [CancelFlag()], arrivals) if item is None]
    assert sorted(ended) == list(range(7)), "every request taken in is spoken and ended"
    assert limits[0] == 3, "the long request takes one of the 4 places"
    assert all(limit <= 3 for limit in limits)


def test_without_continuous_batching_no_request_joins() -> None:
    engine = ChatTTSEngine(chattts_engine_options(max_batch=4, continuous_batching=False))
    engine.load()
    arrivals = Arrivals({1: LATE})
    audio, _ = run(engine, arrivals)
    assert arrivals.polls > 0, "polled between steps all the same"
    assert set(arrivals.limits) == {0}, "but never offered a place"
    assert list(audio) == [0]
    assert_same_audio(audio[0], alone(engine, LONG))


# ----------------------------------------------------------------- the worker's batching loop, in process
INFO = EngineInfo("chattts", 24000, (), max_batch=4, clones_voices=True)
SAMPLE = (np.sin(np.arange(48000) / 20) * 8000).astype("<i2").tobytes()  # 2 s


class RecordingConnection:
    """Stands in for the worker's pipe to the server: records what the worker sends and reacts to it."""

    def __init__(self, react: Callable[[object], None]) -> None:
        self.sent: list[object] = []
        self._react = react

    def send(self, message: object) -> None:
        self.sent.append(message)
        self._react(message)


def test_the_worker_lets_a_job_join_its_running_batch(engine: ChatTTSEngine) -> None:
    from engines.worker import _Inbox, _Outbox, _serve_batches

    cancels: dict[int, CancelFlag] = {}
    samples: list[EncodeSample] = []

    def submit(job: StartJob | EncodeSample | None) -> None:
        if isinstance(job, StartJob):
            cancels[job.job_id] = CancelFlag()  # as the worker's reader thread does, before queueing
        if isinstance(job, EncodeSample):
            samples.append(job)
        jobs.put(job)

    def react(message: object) -> None:
        # The late job, then a sample, arrive as the long one streams; the worker stops once both jobs have ended.
        if isinstance(message, JobChunk) and message.job_id == 1 and 2 not in cancels:
            submit(StartJob(2, LATE))
        elif isinstance(message, JobChunk) and message.job_id == 2 and not samples:
            submit(EncodeSample(7, SAMPLE, 24000, "Hello there."))
        if isinstance(message, JobEnded) and {1, 2} <= {m.job_id for m in conn.sent if isinstance(m, JobEnded)}:
            submit(None)

    conn = RecordingConnection(react)
    outbox = _Outbox(conn)  # type: ignore[arg-type]
    jobs = _Inbox(engine, INFO, outbox)
    submit(StartJob(1, LONG))
    _serve_batches(engine, 4, jobs, cancels, outbox)
    sent = conn.sent
    assert [m for m in sent if isinstance(m, BatchStarted)] == [BatchStarted(1)], "one batch: the late job joined it"
    first_late = next(n for n, m in enumerate(sent) if isinstance(m, JobChunk) and m.job_id == 2)
    end_long = next(n for n, m in enumerate(sent) if isinstance(m, JobEnded) and m.job_id == 1)
    assert first_late < end_long
    answer = next(n for n, m in enumerate(sent) if isinstance(m, SampleEncoded))
    assert answer < end_long, "the sample is answered between the steps of the running batch"
    assert cast("SampleEncoded", sent[answer]).speaker == engine.speaker_from_sample(
        np.frombuffer(SAMPLE, "<i2"), 24000, "Hello there."
    )
    ended = [m for m in sent if isinstance(m, JobEnded)]
    assert [(m.job_id, m.error) for m in ended] == [(2, None), (1, None)]
    for end in ended:  # the words of each job's text, estimated from its own audio, come with its end
        text = (LATE if end.job_id == 2 else LONG).text
        assert [(m.char_start, m.char_end) for m in end.marks] == word_spans(text)
    for job_id, request in ((1, LONG), (2, LATE)):
        pcm = b"".join(m.pcm for m in sent if isinstance(m, JobChunk) and m.job_id == job_id)
        assert_same_audio([np.frombuffer(pcm, dtype="<i2")], alone(engine, request))
    assert not cancels, "the worker forgets the cancel flags of the jobs it ended"


# ----------------------------------------------------------------- the token loop
def code_request(engine: ChatTTSEngine, key: int, text: str, voice: str, tokens: int) -> Any:
    from engines.chattts.generation import CodeRequest

    assert engine._voices is not None
    prompt = engine.prompts.named_voice_prompt(text)
    return CodeRequest(key, prompt, engine._voices.named[voice], 100 + key, tokens, tokens, CancelFlag())


def hiddens_by_key(batches: Any) -> dict[int, list[Any]]:
    found: dict[int, list[Any]] = {}
    for events in batches:
        for key, hidden in events:
            if hidden is not None:
                found.setdefault(key, []).append(hidden)
    return found


@pytest.mark.parametrize(
    ("prefill_chunk_tokens", "decoder"), [(None, "torch"), (16, "torch"), (3, "torch"), (None, "onnxruntime")]
)
def test_joined_sequences_compute_what_they_would_alone(
    engine: ChatTTSEngine, prefill_chunk_tokens: int | None, decoder: str
) -> None:
    # Hidden states are far more sensitive than audio on random weights: this checks the packed passes, the chunked
    # prefill (3 tokens a step: each prompt over several steps, two prompts in one step) and the cache merge.
    import torch

    from engines.chattts.generation import CodeBatch, Sampling

    requests = [
        code_request(engine, 0, "a long first sequence of many words", "alloy", 40),
        code_request(engine, 1, "short", "nova", 30),  # joins with a shorter prompt: its side is padded
        code_request(engine, 2, "a much much longer prompt than the others have, by far", "onyx", 12),
    ]
    graph = engine._graph if decoder == "onnxruntime" else None  # the engine's own: ``decoder: auto`` on CPU
    assert decoder == "torch" or graph is not None
    batch = CodeBatch(engine._chat, Sampling(), prefill_chunk_tokens, graph)
    batch.join(requests[:1])
    steps = [batch.step() for _ in range(6)]
    batch.join(requests[1:])
    while batch.size:
        steps.append(batch.step())
    together = hiddens_by_key(steps)
    for request in requests:
        expected = transformers_hiddens(engine, request)
        assert len(together[request.key]) == len(expected) == request.max_new_token
        torch.testing.assert_close(torch.stack(together[request.key]), torch.stack(expected), rtol=1e-5, atol=1e-5)


def transformers_hiddens(engine: ChatTTSEngine, request: Any) -> list[Any]:
    """The request's hidden states as transformers' own Llama forward computes them, alone, a token at a time after
    its prompt, sampling as the token loop does (the reference the packed passes must match)."""
    import inspect

    import torch
    from transformers import DynamicCache

    from engines.chattts.generation import CodeBatch, Sampling
    from engines.chattts.rows import Rows

    chat = engine._chat
    backbone = chat.gpt.gpt
    keyword = "cache" if "cache" in inspect.signature(backbone.forward).parameters else "past_key_values"
    sampler, rows = CodeBatch(chat, Sampling()), Rows(chat, [request])  # the prompt's embeddings, the seeded sampler
    cache = DynamicCache(config=backbone.config)
    inputs, position = rows.inputs, 0
    found = []
    with torch.inference_mode():
        for _ in range(request.max_new_token):
            positions = torch.arange(position, position + inputs.size(1)).unsqueeze(0)
            outputs = backbone(inputs_embeds=inputs, position_ids=positions, use_cache=True, **{keyword: cache})
            position += inputs.size(1)
            hidden = outputs.last_hidden_state[:, -1].float()
            found.append(hidden[0])
            tokens = sampler._sample(hidden, rows)
            rows.history = torch.cat([rows.history[:, 1:], tokens.unsqueeze(1)], dim=1)  # for the repetition penalty
            rows.steps = [rows.steps[0] + 1]
            codes = [chat.embed.emb_code[q](tokens[:, q]) for q in range(tokens.size(1))]
            inputs = torch.stack(codes, 2).sum(2).unsqueeze(1)
    return found


def test_running_sequences_keep_stepping_while_a_joiner_prefills(engine: ChatTTSEngine) -> None:
    from engines.chattts.generation import CodeBatch, Sampling

    running = code_request(engine, 0, "a long first sequence of many words", "alloy", 40)
    joiner = code_request(engine, 1, "a much much longer prompt than the others have, by far", "onyx", 12)
    batch = CodeBatch(engine._chat, Sampling(), prefill_chunk_tokens=4)
    batch.join([running])
    batch.step()  # nothing else runs: the first prompt is prefilled whole and samples its first token
    batch.join([joiner])
    prefilling = -(-len(joiner.token_ids) // 4)  # passes to prefill the joiner's prompt, 4 tokens each
    steps = [batch.step() for _ in range(prefilling)]
    assert all(any(key == 0 and hidden is not None for key, hidden in events) for events in steps)
    assert [key for key, _ in steps[-1]] == [0, 1], "the joiner's first token comes with its prompt's last chunk"
    assert not any(key == 1 for events in steps[:-1] for key, _ in events)
    assert batch.size == 2


def test_a_joiner_cancelled_while_prefilling_ends_without_a_token(engine: ChatTTSEngine) -> None:
    from engines.chattts.generation import CodeBatch, Sampling

    running = code_request(engine, 0, "a long first sequence of many words", "alloy", 40)
    joiner = code_request(engine, 1, "a much much longer prompt than the others have, by far", "onyx", 12)
    batch = CodeBatch(engine._chat, Sampling(), prefill_chunk_tokens=2)
    batch.join([running])
    batch.step()
    batch.join([joiner])
    batch.step()  # part of its prompt is in its cache now
    joiner.cancel.set()
    events = batch.step()
    assert (1, None) in events
    assert [key for key, hidden in events if hidden is not None] == [0]
    assert batch.size == 1


def test_the_stacked_audio_heads_give_chattts_own_logits(engine: ChatTTSEngine) -> None:
    import torch

    from engines.chattts.generation import CodeBatch, Sampling

    chat = engine._chat
    hidden = torch.randn(3, chat.config.gpt.hidden_size)
    heads = CodeBatch(chat, Sampling())._heads
    with torch.inference_mode():
        theirs = torch.stack([head(hidden) for head in chat.embed.head_code], 1)
        ours = torch.nn.functional.linear(hidden, heads).view(3, len(chat.embed.head_code), -1)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)


def sampled_tokens(engine: ChatTTSEngine, first: Sequence[Any], joining: Sequence[Any] = ()) -> dict[int, list[Any]]:
    """The audio tokens each sequence sampled, by key: ``first`` as one batch, ``joining`` joining it at its second
    step. Read by a subclass of the real batch, which records what the real sampler returned."""
    from engines.chattts.generation import CodeBatch, Sampling

    tokens: dict[int, list[list[int]]] = {}

    class Recording(CodeBatch):
        def _sample(self, hidden: Any, rows: Any, logits: Any = None) -> Any:
            sampled = super()._sample(hidden, rows, logits)
            for request, row in zip(rows.requests, sampled.tolist(), strict=True):
                tokens.setdefault(request.key, []).append(row)
            return sampled

    batch = Recording(engine._chat, Sampling())
    batch.join(first)
    batch.step()
    batch.join(joining)
    while batch.size:
        batch.step()
    return tokens


def test_a_seeded_sequence_samples_the_same_tokens_alone_and_in_a_batch(engine: ChatTTSEngine) -> None:
    """Each row samples with a generator of its own, seeded by its request: neighbours, their prompt lengths and a
    late joiner change nothing (``manual_seed`` would have reseeded one generator that every row draws from)."""
    seeded = code_request(engine, 0, "the same words with the same seed", "alloy", 24)
    others = [code_request(engine, 1, "a longer prompt that pads the first one on the left", "onyx", 30),
              code_request(engine, 2, "short", "echo", 12)]  # fmt: skip
    joiner = code_request(engine, 3, "one who arrives late", "nova", 20)

    alone = sampled_tokens(engine, [seeded])[0]
    in_a_batch = sampled_tokens(engine, [others[0], seeded, others[1]], [joiner])

    assert len(alone) == 24
    assert in_a_batch[0] == alone
    assert in_a_batch[1] != alone[: len(in_a_batch[1])], "other seeds sample other tokens"
