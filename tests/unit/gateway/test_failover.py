"""The failover layer (``gateway/speech/failover.py``) with real engines: synthetic engines in threads of the test
process (``tests/inprocess.py``) for the routing rules, and real worker pools where a worker has to die.

The alias settings (list and mapping forms) and the breaker's view from the router are here too.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
from contextlib import asynccontextmanager, contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pytest
from prometheus_client import CollectorRegistry, Counter
from pydantic import ValidationError

from auth import ANONYMOUS, Principal
from engines.base import InvalidSynthesisRequestError
from engines.breaker import CircuitBreaker
from engines.errors import EngineNotReadyError, EngineOverloadedError, SynthesisFailedError
from engines.pool import EnginePool
from engines.settings import engine_settings, local_engine_settings
from gateway.schemas import SpeechRequest
from gateway.settings import AliasSettings, FailoverSettings, Settings
from gateway.speech.errors import FailoverExhaustedError
from gateway.speech.failover import Failover, FirstAudioTimeoutError, retry_reason
from gateway.speech.plan import Planner, Voice
from gateway.speech.routing import ModelRouter
from gateway.speech.voices import MemoryVoiceStore
from tests.inprocess import ThreadBackend
from tests.waiting import wait_for

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from engines.backend import EngineBackend
    from gateway.speech.failover import SpokenStream
    from gateway.speech.plan import SpeechPlan

pytestmark = pytest.mark.slow  # starts engine worker processes: left out of `make quick`

PRINCIPAL = Principal(ANONYMOUS, "open")


@contextmanager
def gave_up(error: type[Exception], match: str | None = None) -> Iterator[None]:
    """The block's request ends with failover giving up, on an engine error of type ``error`` (matching ``match``)."""
    with pytest.raises(FailoverExhaustedError) as exhausted:
        yield
    assert isinstance(exhausted.value.error, error)
    assert exhausted.value.__cause__ is exhausted.value.error
    assert match is None or re.search(match, str(exhausted.value.error))


class FakeClock:
    """A clock the breaker reads, moved by the test (the breaker's own collaborator, not the thing under test)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Gateway:
    """The failover over real engines: a router, a planner and a retries counter of its own registry."""

    def __init__(self, engines: dict[str, EngineBackend], aliases: dict[str, Any], **failover: Any) -> None:
        self.registry = CollectorRegistry()
        self.retries = Counter("tts_engine_retries", "test", ["engine", "reason"], registry=self.registry)
        self.router = ModelRouter(engines, aliases, FailoverSettings(**failover))
        self.planner = Planner(self.router, MemoryVoiceStore())
        self.failover = Failover(self.router, self.retries)

    async def plan(self, model: str, text: str = "x" * 10, voice: str = "nova") -> SpeechPlan:
        return await self.planner.plan(PRINCIPAL, SpeechRequest(model=model, input=text, voice=voice))

    def stream(self, plan: SpeechPlan) -> Any:
        return self.failover.open_stream(plan, _open)

    async def speak(self, plan: SpeechPlan) -> tuple[SpokenStream, bytes]:
        async with self.stream(plan) as spoken:
            return spoken, b"".join([chunk async for chunk in spoken])

    def retried(self, engine: str, reason: str) -> float:
        value = self.registry.get_sample_value("tts_engine_retries_total", {"engine": engine, "reason": reason})
        return value or 0.0


def _open(plan: SpeechPlan) -> Any:
    return plan.pool.open_stream(plan.synthesis)


async def thread_engine(
    name: str, capacity: int = 4, breaker: dict[str, Any] | None = None, **options: Any
) -> ThreadBackend:
    settings = engine_settings(
        kind="synthetic", options={"seconds_per_char": 0.01, **options}, **({"breaker": breaker} if breaker else {})
    )
    engine = ThreadBackend(name, settings, capacity=capacity)
    await engine.start()
    return engine


# ----------------------------------------------------------------- routing rules


async def test_an_engine_that_fails_before_its_first_audio_hands_the_request_to_the_next_of_the_alias() -> None:
    broken, backup = await thread_engine("broken", fail_after_chunks=0), await thread_engine("backup")
    gateway = Gateway({"broken": broken, "backup": backup}, {"voice": ["broken", "backup"]})
    spoken, pcm = await gateway.speak(await gateway.plan("voice"))
    assert spoken.plan.pool is backup
    assert len(pcm) == 10 * 0.01 * 24000 * 2
    assert spoken.retries == 2  # both tries on `broken` (same_engine_attempts), then `backup`
    assert (broken.served, backup.served) == (2, 1)
    assert gateway.retried("broken", "failed") == 2


async def test_tries_on_one_engine_are_bounded_and_the_last_error_is_answered() -> None:
    broken = await thread_engine("broken", fail_after_chunks=0)
    gateway = Gateway({"broken": broken}, {}, same_engine_attempts=3)
    with gave_up(SynthesisFailedError, match="injected failure"):
        await gateway.speak(await gateway.plan("broken"))
    assert broken.served == 3
    assert gateway.retried("broken", "failed") == 2  # three tries are two retries


async def test_overload_spills_to_the_next_engine_only_where_the_alias_allows_it() -> None:
    full, backup = await thread_engine("full", capacity=0), await thread_engine("backup")
    aliases = {
        "strict": ["full", "backup"],
        "spilling": AliasSettings(engines=["full", "backup"], spill_on_overload=True),
    }
    gateway = Gateway({"full": full, "backup": backup}, aliases)
    with pytest.raises(EngineOverloadedError):
        await gateway.speak(await gateway.plan("strict"))
    assert backup.served == 0
    spoken, _ = await gateway.speak(await gateway.plan("spilling"))
    assert spoken.plan.pool is backup
    assert spoken.retries == 1  # overload moves on at once: no second try on the full engine
    assert gateway.retried("full", "overloaded") == 1


async def test_a_request_the_engine_rejects_is_never_retried() -> None:
    first, backup = await thread_engine("first"), await thread_engine("backup")
    gateway = Gateway({"first": first, "backup": backup}, {"voice": ["first", "backup"]})
    plan = await gateway.plan("voice")
    rejected = replace(plan, synthesis=replace(plan.synthesis, speaker="not\x00printable"))
    with pytest.raises(InvalidSynthesisRequestError):
        await gateway.speak(rejected)
    assert (first.served, backup.served) == (1, 0)


async def test_a_failure_after_the_first_audio_ends_the_stream_without_a_retry() -> None:
    first, backup = await thread_engine("first", fail_after_chunks=2), await thread_engine("backup")
    gateway = Gateway({"first": first, "backup": backup}, {"voice": ["first", "backup"]})
    received: list[bytes] = []
    with pytest.raises(SynthesisFailedError, match="after 2 chunks"):
        async with gateway.stream(await gateway.plan("voice", "x" * 50)) as spoken:
            async for chunk in spoken:
                received.append(chunk)
    assert len(received) == 2
    assert (first.served, backup.served) == (1, 0)


async def test_a_custom_voice_stays_on_its_engine() -> None:
    broken, backup = await thread_engine("broken", fail_after_chunks=0), await thread_engine("backup")
    gateway = Gateway({"broken": broken, "backup": backup}, {"voice": ["broken", "backup"]})
    plan = await gateway.plan("voice")
    custom = replace(
        plan,
        voice=Voice("voice_1", "seed:7", "sha"),
        synthesis=replace(plan.synthesis, voice="voice_1", speaker="seed:7"),
    )
    with gave_up(SynthesisFailedError):
        await gateway.speak(custom)
    assert (broken.served, backup.served) == (2, 0)


async def test_an_engine_is_replanned_for_its_own_voices_and_speeds() -> None:
    native = await thread_engine("native", native_speed=True, fail_after_chunks=0)
    plain = await thread_engine("plain")
    gateway = Gateway({"native": native, "plain": plain}, {"voice": ["native", "plain"]})
    request = SpeechRequest(model="voice", input="x" * 10, voice="nova", speed=2.0)
    plan = await gateway.planner.plan(PRINCIPAL, request)
    assert (plan.synthesis.speed, plan.tempo) == (2.0, 1.0)  # `native` renders the speed itself
    spoken, _ = await gateway.speak(plan)
    assert spoken.plan.pool is plain
    assert (spoken.plan.synthesis.speed, spoken.plan.tempo) == (1.0, 2.0)  # `plain` leaves it to the time-stretch
    assert spoken.plan.synthesis.text == plan.synthesis.text


async def test_no_try_starts_after_the_deadline() -> None:
    slow = await thread_engine("slow", request_delay_ms=3000)
    backup = await thread_engine("backup")
    gateway = Gateway({"slow": slow, "backup": backup}, {"voice": ["slow", "backup"]}, deadline_s=0.3)
    with gave_up(FirstAudioTimeoutError, match="deadline"):
        await gateway.speak(await gateway.plan("voice"))
    assert backup.served == 0


def raised_while_handling(error: Exception, handled: Exception) -> Exception:
    try:
        try:
            raise handled
        except type(handled):
            raise error from None
    except type(error) as caught:
        return caught


def test_retry_reasons_name_the_cause() -> None:
    refused = SynthesisFailedError("endpoint refused")
    refused.__cause__ = ConnectionRefusedError()
    timed_out = raised_while_handling(SynthesisFailedError("no answer within 5 s"), TimeoutError())
    assert [
        retry_reason(exc)
        for exc in (
            SynthesisFailedError("the engine worker died (exit code 70)"),
            refused,
            timed_out,
            SynthesisFailedError("RuntimeError: boom"),
            EngineOverloadedError("e", 1),
            EngineNotReadyError("e", "x"),
        )
    ] == ["died", "refused", "timeout", "failed", "overloaded", "not_ready"]


# ----------------------------------------------------------------- breakers


async def test_the_breaker_opens_fails_fast_half_opens_and_closes() -> None:
    flaky = await thread_engine("flaky", breaker={"failures": 2, "window_s": 60, "open_s": 5})
    backup = await thread_engine("backup")
    gateway = Gateway({"flaky": flaky, "backup": backup}, {"voice": ["flaky", "backup"]}, same_engine_attempts=1)
    clock = FakeClock()
    breaker = gateway.router.breakers["flaky"] = CircuitBreaker(gateway.router.breakers["flaky"].settings, clock)
    for _ in range(2):
        with gave_up(SynthesisFailedError):
            await gateway.speak(await gateway.plan("flaky", "fails #fail"))
    assert gateway.router.breaker_state("flaky") == "open"
    assert gateway.router.breaker_codes() == {"flaky": 2, "backup": 0}
    with gave_up(EngineNotReadyError, match="circuit open"):
        await gateway.speak(await gateway.plan("flaky"))
    assert flaky.served == 2  # failed fast: the engine never saw it
    spoken, _ = await gateway.speak(await gateway.plan("voice"))
    assert (spoken.plan.pool, spoken.retries) == (backup, 0)  # the alias routes around an open breaker
    clock.now += 5
    assert breaker.state == "half_open"
    spoken, _ = await gateway.speak(await gateway.plan("flaky"))
    assert spoken.plan.pool is flaky
    assert gateway.router.breaker_state("flaky") == "closed"


async def test_a_half_open_trial_that_ends_without_a_verdict_frees_its_slot() -> None:
    flaky = await thread_engine("flaky", breaker={"failures": 1, "open_s": 5})
    gateway = Gateway({"flaky": flaky}, {}, same_engine_attempts=1)
    clock = FakeClock()
    breaker = gateway.router.breakers["flaky"] = CircuitBreaker(gateway.router.breakers["flaky"].settings, clock)
    with gave_up(SynthesisFailedError):
        await gateway.speak(await gateway.plan("flaky", "fails #fail"))
    clock.now += 5
    plan = await gateway.plan("flaky")
    with pytest.raises(InvalidSynthesisRequestError):  # a trial the engine rejected: no verdict on the engine
        await gateway.speak(replace(plan, synthesis=replace(plan.synthesis, speaker="\x00")))
    assert breaker.state == "half_open"
    spoken, _ = await gateway.speak(plan)  # the slot was given back: the next trial goes through
    assert spoken.plan.pool is flaky
    assert gateway.router.breaker_state("flaky") == "closed"


# ----------------------------------------------------------------- real worker pools


@asynccontextmanager
async def worker_pool(name: str, **settings: Any) -> AsyncIterator[EnginePool]:
    options = {"seconds_per_char": 0.01, **settings.pop("options", {})}
    pool = EnginePool(name, local_engine_settings(kind="synthetic", options=options, **settings))
    await pool.start()
    try:
        assert await pool.wait_ready(30)
        yield pool
    finally:
        await pool.stop()


async def test_a_worker_killed_before_the_first_audio_is_replaced_and_the_request_served() -> None:
    async with worker_pool("solo", workers=1, options={"request_delay_ms": 1500}) as pool:
        gateway = Gateway({"solo": pool}, {})
        victim = pool.status().pids[0]
        speaking = asyncio.create_task(gateway.speak(await gateway.plan("solo")))
        await wait_for(lambda: pool.status().active_jobs == 1)
        os.kill(victim, signal.SIGKILL)
        spoken, pcm = await speaking
        assert (spoken.retries, len(pcm)) == (1, 10 * 0.01 * 24000 * 2)
        assert victim not in pool.status().pids
        assert gateway.retried("solo", "died") == 1


async def test_a_request_that_kills_its_workers_is_tried_only_so_often() -> None:
    async with worker_pool("fragile", workers=2) as pool:
        gateway = Gateway({"fragile": pool}, {})
        with gave_up(SynthesisFailedError, match="worker died"):
            await gateway.speak(await gateway.plan("fragile", "x" * 10 + " #crash-after=0"))
        assert pool.status().restarts == 2  # same_engine_attempts: two workers, not every worker forever
        assert gateway.retried("fragile", "died") == 1


# ----------------------------------------------------------------- alias settings


def test_aliases_take_the_list_form_and_the_mapping_form() -> None:
    config: dict[str, Any] = {
        "engines": {"chattts": None, "a": {"kind": "synthetic"}, "b": {"kind": "synthetic"}},
        "aliases": {"short": ["a", "b"], "long": {"engines": ["b", "a"], "spill_on_overload": True}},
    }
    settings = Settings(**config)
    assert settings.aliases["short"] == AliasSettings(engines=["a", "b"])
    assert settings.aliases["long"] == AliasSettings(engines=["b", "a"], spill_on_overload=True)
    assert settings.aliases["tts-1"] == AliasSettings(engines=["espeak"])  # the built-in follows chattts's removal
    assert settings.failover == FailoverSettings(same_engine_attempts=2, deadline_s=30.0)


def test_a_mapping_that_sets_only_the_spill_merges_into_the_built_in_alias(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHATTTS_GATEWAY_ALIASES__TTS-1__SPILL_ON_OVERLOAD", "true")
    settings = Settings()
    assert settings.aliases["tts-1"] == AliasSettings(engines=["chattts", "espeak"], spill_on_overload=True)
    assert not settings.aliases["tts-1-hd"].spill_on_overload


@pytest.mark.parametrize(
    "aliases",
    [
        {"x": {"engines": ["missing"]}},
        {"x": {"engines": []}},
        {"x": {"engines": ["espeak"], "spill": True}},
        {"espeak": {"engines": ["espeak"]}},
    ],
)
def test_bad_aliases_are_rejected(aliases: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        Settings(aliases=aliases)


async def test_the_router_takes_either_alias_form_and_orders_ready_engines_first() -> None:
    ready, down = await thread_engine("ready"), await thread_engine("down", unavailable="no weights")
    router = ModelRouter(
        {"ready": ready, "down": down},
        {"listed": ["down", "ready"], "mapped": AliasSettings(engines=["down", "ready"], spill_on_overload=True)},
    )
    assert router.route("listed").engines == (ready, down)
    assert not router.route("listed").spill_on_overload
    assert router.route("mapped").spill_on_overload
    assert router.resolve("mapped") is ready
    assert router.route("down").engines == (down,)  # an engine by its own name: only itself
