"""An alias's fallback and the readiness rule: the router's rule, its metric and log, and ``/readyz``, on the real app
in process (``tests/inprocess.py``) with the official OpenAI SDK as the client.

The engines: ``primary`` loads nothing ("no weights here", as ChatTTS without weights), ``tones`` and ``backup`` are
synthetic engines that load, and a remote engine (``kind: openai``) whose only endpoint is a port nothing listens on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

import openai
import pytest
from litestar.testing import AsyncTestClient
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError

from engines.factory import create_backend
from engines.settings import RemoteEngineSettings, engine_settings
from gateway.app import create_app
from gateway.settings import AliasSettings, ReadinessSettings, Settings
from gateway.speech.routing import ModelRouter
from harness.gateway_process import closed_port
from tests.inprocess import ThreadBackend

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from litestar import Litestar

    from engines.backend import EngineBackend
    from engines.settings import AnyEngineSettings

ENGINES: dict[str, Any] = {
    "chattts": None,
    "espeak": None,
    "primary": {"kind": "synthetic", "options": {"unavailable": "no weights here"}},
    "tones": {"kind": "synthetic", "options": {"seconds_per_char": 0.01}},
    "backup": {"kind": "synthetic", "options": {"seconds_per_char": 0.01}},
}
ALIASES: dict[str, Any] = {
    "strict": {"engines": ["primary", "backup"], "fallback": False},
    "lenient": ["primary", "backup"],  # the list form: fallback on
}
CLOSED = f"http://127.0.0.1:{closed_port()}/v1"  # nothing listens there: the engine tier is down


def remote_engine() -> dict[str, Any]:
    options = {"endpoints": [CLOSED], "model": "tones", "api_key": "k" * 32, "probe_interval_s": 0.1}
    return {"kind": "openai", "options": options}


def backend(name: str, settings: AnyEngineSettings) -> EngineBackend:
    """The remote engine as production runs it (HTTP, in process); local engines in threads."""
    if isinstance(settings, RemoteEngineSettings):
        return create_backend(name, settings)
    return ThreadBackend(name, settings)


@pytest.fixture
async def served() -> AsyncIterator[Any]:
    """Serve a config (over ``ENGINES`` and ``ALIASES``): an AsyncTestClient and an SDK client on it. One app at a
    time: each registers the speech metrics, so serving another stops the one before."""
    running = contextlib.AsyncExitStack()

    async def serve(**config: Any) -> tuple[AsyncTestClient[Litestar], openai.AsyncOpenAI]:
        nonlocal running
        await running.aclose()
        running = contextlib.AsyncExitStack()
        settings = Settings(**{"aliases": ALIASES, **config, "engines": {**ENGINES, **config.get("engines", {})}})
        http = await running.enter_async_context(AsyncTestClient(app=create_app(settings, pool_factory=backend)))
        await _settled(http)
        # The SDK takes an httpx client as well as an httpx2 one, but its types name only httpx2's: hence the ignore.
        sdk = openai.AsyncOpenAI(base_url=f"{http.base_url}/v1", api_key="x", http_client=http, max_retries=0)  # type: ignore[arg-type]
        return http, sdk

    yield serve
    await running.aclose()


async def _settled(http: AsyncTestClient[Litestar]) -> None:
    """Until no engine is starting (the remote one probes its endpoint first)."""
    async with asyncio.timeout(10):
        while any(e["state"] == "starting" for e in (await http.get("/readyz")).json()["engines"].values()):
            await asyncio.sleep(0.02)


async def counted(http: AsyncTestClient[Litestar], name: str, *labels: str) -> dict[tuple[str, ...], float]:
    """The samples of counter ``name`` in ``/metrics``, by the values of ``labels``."""
    text = (await http.get("/metrics")).text
    return {
        tuple(sample.labels[label] for label in labels): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    }


async def fallbacks(http: AsyncTestClient[Litestar]) -> dict[tuple[str, ...], float]:
    return await counted(http, "tts_alias_fallbacks_total", "alias", "engine")


async def speak(sdk: openai.AsyncOpenAI, model: str, text: str = "Hello there.") -> Any:
    return await sdk.audio.speech.with_raw_response.create(
        model=model, voice="alloy", input=text, response_format="pcm"
    )


# --- the router's rule -----------------------------------------------------------------------------------------


async def started(**engines: dict[str, Any]) -> dict[str, EngineBackend]:
    pools: dict[str, EngineBackend] = {name: ThreadBackend(name, engine_settings(**e)) for name, e in engines.items()}
    for pool in pools.values():
        await pool.start()
    return pools


async def test_an_alias_without_fallback_routes_to_its_first_engine_whatever_its_state() -> None:
    pools = await started(primary=ENGINES["primary"], backup=ENGINES["backup"])
    router = ModelRouter(pools, {name: _alias(alias) for name, alias in ALIASES.items()})
    assert router.route("strict").engines == (pools["primary"],)  # not ready, and still the only one
    assert router.route("lenient").engines == (pools["backup"], pools["primary"])  # ready first


def test_readiness_requirements() -> None:
    pools: dict[str, EngineBackend] = {
        n: ThreadBackend(n, engine_settings(**ENGINES[n])) for n in ("primary", "backup")
    }
    aliases = {name: _alias(alias) for name, alias in ALIASES.items()}
    assert ModelRouter(pools, aliases).requirements() == {"strict": ("primary",), "lenient": ("primary", "backup")}
    assert ModelRouter(pools, {}).requirements() == {"primary": ("primary",), "backup": ("backup",)}
    configured = ModelRouter(pools, aliases, readiness=ReadinessSettings(engines=["backup"]))
    assert configured.requirements() == {"backup": ("backup",)}


async def test_fallbacks_are_counted_per_answer_and_logged_per_change(caplog: pytest.LogCaptureFixture) -> None:
    pools = await started(primary=ENGINES["primary"], tones=ENGINES["tones"], backup=ENGINES["backup"])
    counter = Counter("tts_alias_fallbacks", "test", ["alias", "engine"], registry=CollectorRegistry())
    aliases = {"lenient": _alias(["primary", "backup"]), "spilling": _alias(["tones", "backup"])}
    router = ModelRouter(pools, aliases, fallbacks=counter)
    caplog.set_level(logging.INFO, "chattts_gateway.routing")
    for engine in ("primary", "backup", "backup", "backup", "primary", "primary", "backup"):
        router.record_answer("lenient", engine)
    router.record_answer("backup", "backup")  # an engine by its own name: no alias, no fallback
    router.record_answer("spilling", "backup")  # its first engine is ready: a spill or a retry, not a change of state
    assert counter.labels("lenient", "backup")._value.get() == 4
    assert counter.labels("spilling", "backup")._value.get() == 1
    fell_back = "alias lenient falls back to engine backup: its first engine primary is unavailable (no weights here)"
    assert [record.getMessage() for record in caplog.records] == [
        fell_back,
        "alias lenient is served by its first engine primary again",
        fell_back,
    ]


def test_spilling_needs_fallback_and_readiness_names_known_engines() -> None:
    with pytest.raises(ValidationError, match="spill_on_overload needs fallback"):
        AliasSettings(engines=["primary", "backup"], fallback=False, spill_on_overload=True)
    with pytest.raises(ValidationError, match=r"readiness.engines must list configured engines.*'nope'"):
        Settings.model_validate({"engines": ENGINES, "aliases": {}, "readiness": {"engines": ["nope"]}})
    assert Settings().aliases["tts-1"].fallback  # the embedded default: a newcomer without ChatTTS hears espeak


def _alias(alias: Any) -> AliasSettings:
    return AliasSettings(engines=alias) if isinstance(alias, list) else AliasSettings(**alias)


# --- served: HTTP and /readyz ----------------------------------------------------------------------------------


async def test_without_fallback_the_alias_answers_503_and_readyz_says_why(served: Any) -> None:
    http, sdk = await served()
    with pytest.raises(openai.InternalServerError) as refused:
        await speak(sdk, "strict")
    assert refused.value.status_code == 503
    assert refused.value.response.headers["retry-after"] == "5"
    assert refused.value.code == "engine_not_ready"
    ready = await http.get("/readyz")
    assert ready.status_code == 503
    body = ready.json()
    assert body["required"] == {"strict": ["primary"], "lenient": ["primary", "backup"]}
    assert body["reason"] == "strict cannot be answered: primary is unavailable (no weights here)"
    assert await fallbacks(http) == {}


async def test_with_fallback_the_next_engine_answers_and_is_counted(served: Any) -> None:
    http, sdk = await served(aliases={"lenient": ["primary", "backup"]})
    first = await speak(sdk, "lenient")
    again = await speak(sdk, "lenient")  # a cache hit, by the engine that spoke: a fallback answer all the same
    assert first.headers["x-engine"] == again.headers["x-engine"] == "backup"
    assert again.headers["x-cache"] == "hit"
    assert await fallbacks(http) == {("lenient", "backup"): 2.0}
    ready = await http.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["reason"] == "every model in `required` has a ready engine"


async def test_without_fallback_a_failure_before_the_first_audio_stays_on_the_first_engine(served: Any) -> None:
    http, sdk = await served(aliases={"pinned": {"engines": ["tones", "backup"], "fallback": False}})
    with pytest.raises(openai.InternalServerError) as failed:
        await speak(sdk, "pinned", "#fail please")  # the synthetic engine fails it before its first chunk
    assert failed.value.code == "engine_failed"
    assert failed.value.response.headers["x-retries"] == "1"  # retried on tones, never on backup
    assert await counted(http, "tts_engine_retries_total", "engine", "reason") == {("tones", "failed"): 1.0}
    assert await fallbacks(http) == {}


async def test_readiness_engines_replace_the_alias_rule(served: Any) -> None:
    http, _ = await served(readiness={"engines": ["backup"]})
    ready = await http.get("/readyz")
    assert ready.status_code == 200  # `strict` cannot be answered, but only backup is required
    assert ready.json()["required"] == {"backup": ["backup"]}
    http, _ = await served(readiness={"engines": ["backup", "primary"]})
    ready = await http.get("/readyz")
    assert ready.status_code == 503
    assert ready.json()["reason"] == "primary is unavailable (no weights here)"


async def test_without_aliases_every_engine_is_required_and_one_in_no_alias_is_not(served: Any) -> None:
    http, _ = await served(aliases={})
    body = (await http.get("/readyz")).json()
    assert (body["ready"], body["reason"]) == (False, "primary is unavailable (no weights here)")
    http, _ = await served(aliases={"tts-1": ["tones"]})  # primary and backup are in no alias
    assert (await http.get("/readyz")).status_code == 200


async def test_readyz_keeps_the_redis_rule(served: Any) -> None:
    closed_redis = f"redis://127.0.0.1:{closed_port()}/0"
    http, _ = await served(aliases={"tts-1": ["tones"]}, redis_url=closed_redis, limits={"fail_mode": "closed"})
    body = (await http.get("/readyz")).json()
    assert (body["ready"], body["redis"]) == (False, "unreachable")
    assert "Redis is unreachable" in body["reason"]


# --- served: a remote engine whose endpoint is down (the front of two tiers) --------------------------------------


@pytest.mark.parametrize("fallback", [False, True])
async def test_a_remote_engine_with_its_endpoint_down(served: Any, fallback: bool) -> None:
    aliases = {"tts-1": {"engines": ["remote", "tones"], "fallback": fallback}}
    http, sdk = await served(engines={"remote": remote_engine()}, aliases=aliases)
    ready = await http.get("/readyz")
    assert ready.json()["engines"]["remote"]["state"] == "unavailable"
    if fallback:
        assert ready.status_code == 200
        assert (await speak(sdk, "tts-1")).headers["x-engine"] == "tones"
        assert await fallbacks(http) == {("tts-1", "tones"): 1.0}
        return
    assert ready.status_code == 503
    assert ready.json()["reason"].startswith(
        f"tts-1 cannot be answered: remote is unavailable (no endpoint can take requests: {CLOSED}"
    )
    with pytest.raises(openai.InternalServerError) as refused:
        await speak(sdk, "tts-1")
    assert (refused.value.status_code, refused.value.response.headers["retry-after"]) == (503, "5")
