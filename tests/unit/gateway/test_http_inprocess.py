"""The HTTP layer in process: handlers, the error table, middlewares and the speech service, under Litestar's test
client with real engines in threads (``tests/inprocess.py``) and the official OpenAI SDK as the client."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

import httpx
import openai
import pytest
from litestar.testing import AsyncTestClient

from auth.keys import generate_api_key, hash_api_key
from engines.factory import create_backend
from engines.synthetic import voice_frequency
from gateway.app import create_app
from gateway.http.ratelimit_headers import UNLIMITED
from gateway.settings import OPENAI_MODEL_NAMES, Settings
from tests.audio_decode import decode_audio, dominant_frequency
from tests.inprocess import ThreadBackend, in_process_app, shared_decoders

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from litestar import Litestar

    from engines.backend import EngineBackend
    from engines.settings import AnyEngineSettings

ADMIN_TOKEN = "in-process-admin-token-0123456789abcdef"
CONFIG: dict[str, Any] = {
    "engines": {
        "chattts": None,  # would load torch into the test process; its own tests cover it
        "tones": {"kind": "synthetic", "options": {"seconds_per_char": 0.01}},
        "espeak": {"kind": "espeak"},
        "broken": {"kind": "synthetic", "options": {"unavailable": "no weights here"}},
    },
    "aliases": {"tts-1": ["tones"], "tts-1-hd": ["tones"], "gpt-4o-mini-tts": ["tones", "espeak"]},
}


@pytest.fixture
async def http() -> AsyncIterator[AsyncTestClient[Litestar]]:
    async with AsyncTestClient(app=in_process_app(CONFIG, capacity=2)) as client:
        yield client


@pytest.fixture
def sdk(http: AsyncTestClient[Litestar]) -> openai.AsyncOpenAI:
    # Not closed by the test: the test client it runs on is the fixture's (and has no transport to close). The SDK
    # takes an httpx client as well as an httpx2 one, but its types name only httpx2's: hence the ignore.
    return openai.AsyncOpenAI(base_url=f"{http.base_url}/v1", api_key="anything", http_client=http, max_retries=0)  # type: ignore[arg-type]


async def test_the_sdk_gets_decodable_audio_from_the_engine_that_spoke(sdk: openai.AsyncOpenAI) -> None:
    response = await sdk.audio.speech.with_raw_response.create(
        model="tts-1", voice="nova", input="Hello there.", response_format="wav"
    )
    assert response.headers["x-engine"] == "tones"
    audio = decode_audio(response.content, "wav")
    assert abs(dominant_frequency(audio) - voice_frequency("nova")) < 5
    assert abs(audio.duration - len("Hello there.") * 0.01) < 0.05


@pytest.mark.parametrize("model", [m for m in OPENAI_MODEL_NAMES if m not in {"tts-1", "tts-1-hd", "gpt-4o-mini-tts"}])
async def test_openais_dated_model_names_are_served(http: AsyncTestClient[Litestar], model: str) -> None:
    # Built in: a client pinned to a dated snapshot must not get a 404. They route to chattts, then espeak.
    response = await http.post(
        "/v1/audio/speech", json={"model": model, "input": "Hi.", "voice": "alloy", "response_format": "pcm"}
    )
    assert response.status_code == 200, response.text
    assert response.headers["x-engine"] == "espeak"
    assert len(response.content) > 1000


async def test_every_rate_limit_header_on_every_response(http: AsyncTestClient[Litestar]) -> None:
    response = await http.post("/v1/audio/speech", json={"model": "tones", "input": "Hi.", "voice": "alloy"})
    assert response.status_code == 200
    for kind in ("requests", "tokens"):
        assert response.headers[f"x-ratelimit-limit-{kind}"] == str(UNLIMITED)
        assert response.headers[f"x-ratelimit-remaining-{kind}"] == str(UNLIMITED)
        assert response.headers[f"x-ratelimit-reset-{kind}"] == "0s"


async def test_a_repeat_is_a_cache_hit_with_the_same_audio(http: AsyncTestClient[Litestar]) -> None:
    body = {"model": "tones", "input": "Cache me.", "voice": "echo", "response_format": "mp3"}
    first = await http.post("/v1/audio/speech", json=body)
    second = await http.post("/v1/audio/speech", json=body)
    assert (first.headers["x-cache"], second.headers["x-cache"]) == ("miss", "hit")
    assert first.content == second.content


async def test_server_sent_events_end_with_usage(http: AsyncTestClient[Litestar]) -> None:
    body = {"model": "tones", "input": "Ten chars.", "voice": "alloy", "stream_format": "sse"}
    response = await http.post("/v1/audio/speech", json=body)
    events = [line.removeprefix("data: ") for line in response.text.splitlines() if line.startswith("data: ")]
    assert '"speech.audio.delta"' in events[0]
    assert events[-1].startswith('{"type": "speech.audio.done"')
    assert '"input_tokens": 10' in events[-1]


@pytest.mark.parametrize(
    ("body", "status", "param", "code"),
    [
        ({"model": "nope", "input": "x", "voice": "alloy"}, 404, "model", "model_not_found"),
        ({"model": "tones", "input": "x", "voice": "nobody"}, 400, "voice", "invalid_value"),
        ({"model": "tones", "input": "   ", "voice": "alloy"}, 400, "input", "invalid_value"),
        ({"model": "tones", "input": "x", "voice": "alloy", "speed": 9}, 400, "speed", "invalid_value"),
        # A value of another JSON type is refused, not converted (Litestar's lax validation once read "2" as 2.0).
        ({"model": "tones", "input": "x", "voice": "alloy", "speed": "2"}, 400, "speed", "invalid_value"),
        ({"model": "tones", "input": "x", "voice": "alloy", "seed": True}, 400, "seed", "invalid_value"),
        (
            {"model": "tones", "input": "x", "voice": "alloy", "sample_rate": "8000"},
            400,
            "sample_rate",
            "invalid_value",
        ),
        (
            {"model": "tones", "input": "x", "voice": "alloy", "control_tokens": "yes"},
            400,
            "control_tokens",
            "invalid_value",
        ),
        ({"model": "tones", "input": "x", "voice": "alloy", "colour": "red"}, 400, "colour", "unknown_parameter"),
        ({"model": "tones", "voice": "alloy"}, 400, "input", "missing_required_parameter"),
        ({"model": "broken", "input": "x", "voice": "alloy"}, 503, None, "engine_not_ready"),
    ],
)
async def test_bad_requests_get_openais_error_body(
    http: AsyncTestClient[Litestar],
    body: dict[str, Any],
    status: int,
    param: str | None,
    code: str,
) -> None:
    response = await http.post("/v1/audio/speech", json=body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert (error["param"], error["code"]) == (param, code)
    assert error["message"]


async def test_a_validators_refusal_is_said_in_its_own_words(http: AsyncTestClient[Litestar]) -> None:
    body = {"model": "tones", "input": "x", "voice": "alloy", "response_format": "wav", "sample_rate": 11025}
    error = (await http.post("/v1/audio/speech", json=body)).json()["error"]
    assert error["message"].startswith("Invalid value for 'sample_rate': wav is encoded at 8000, 16000"), error


async def test_the_sdk_maps_errors_to_its_exceptions(sdk: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        await sdk.audio.speech.create(model="nope", voice="alloy", input="x")
    with pytest.raises(openai.BadRequestError):
        await sdk.audio.speech.create(model="tones", voice="nobody", input="x")


async def test_content_type_and_size_are_checked_before_parsing(http: AsyncTestClient[Litestar]) -> None:
    text = await http.post("/v1/audio/speech", content=b"{}", headers={"content-type": "text/plain"})
    assert (text.status_code, text.json()["error"]["code"]) == (415, "unsupported_media_type")
    huge = await http.post("/v1/audio/speech", json={"model": "tones", "voice": "alloy", "input": "x" * 70_000})
    assert huge.status_code == 413
    assert huge.json()["error"]["type"] == "invalid_request_error"


async def test_overload_is_a_503_with_retry_after() -> None:
    async with AsyncTestClient(app=in_process_app(CONFIG, capacity=0)) as full:
        refused = await full.post("/v1/audio/speech", json={"model": "tones", "input": "x", "voice": "alloy"})
    assert refused.status_code == 503
    assert refused.headers["retry-after"] == "1"
    assert refused.json()["error"]["code"] == "engine_overloaded"


async def test_request_ids_are_echoed_or_made(http: AsyncTestClient[Litestar]) -> None:
    echoed = await http.get("/healthz", headers={"x-request-id": "req-42"})
    assert echoed.headers["x-request-id"] == "req-42"
    unsafe = await http.get("/healthz", headers={"x-request-id": "bad id\r\nx: y"})
    assert unsafe.headers["x-request-id"] != "bad id\r\nx: y"
    assert len(unsafe.headers["x-request-id"]) == 32


async def test_readiness_shows_each_engine_and_its_details(http: AsyncTestClient[Litestar]) -> None:
    body = (await http.get("/readyz")).json()
    assert body["ready"] is True
    assert body["engines"]["broken"] == {
        **body["engines"]["broken"],
        "state": "unavailable",
        "reason": "no weights here",
    }
    assert body["engines"]["tones"]["state"] == "ready"


async def test_models_list_aliases_and_engines(sdk: openai.AsyncOpenAI) -> None:
    models = {model.id: model async for model in sdk.models.list()}
    assert {"tones", "espeak", "tts-1", "gpt-4o-mini-tts-2025-12-15", "tts-1-hd-1106"} <= models.keys()
    assert "chattts" not in models
    # The engine serving each model, as it reported itself at load (neither of these batches requests): an extension
    # the SDK keeps as an extra field. ChatTTS's measured batch size: tests/e2e/test_custom_voices_chattts.py.
    for name in ("tones", "espeak"):
        assert models[name].model_extra == {"engine": {"name": name, "max_batch": 1}}
    assert models["gpt-4o-mini-tts"].model_extra == {"engine": {"name": "tones", "max_batch": 1}}  # its first engine
    assert models["broken"].model_extra == {"engine": None}  # it never loaded
    assert (await sdk.models.retrieve("tts-1")).model_extra == {"engine": {"name": "tones", "max_batch": 1}}


async def test_the_docs_page_needs_nothing_from_the_internet(http: AsyncTestClient[Litestar]) -> None:
    page = (await http.get("/docs")).text
    assert "https://" not in page and "http://" not in page
    bundle = await http.get("/docs/assets/swagger-ui-bundle.js")
    assert bundle.status_code == 200 and len(bundle.content) > 500_000
    assert (await http.get("/docs/openapi.json")).json()["paths"]["/v1/audio/speech"]


async def test_admin_api_with_its_token_issues_keys_that_work() -> None:
    config = {**CONFIG, "auth": {"admin_token": ADMIN_TOKEN}}
    async with AsyncTestClient(app=in_process_app(config)) as http:
        admin = {"authorization": f"Bearer {ADMIN_TOKEN}"}
        assert (await http.post("/admin/tenants", json={"name": "acme"}, headers=admin)).status_code == 201
        key = (await http.post("/admin/tenants/acme/keys", headers=admin)).json()["key"]
        anonymous = await http.post("/v1/audio/speech", json={"model": "tones", "input": "x", "voice": "alloy"})
        assert (anonymous.status_code, anonymous.json()["error"]["code"]) == (401, "invalid_api_key")
        keyed = await http.post(
            "/v1/audio/speech",
            json={"model": "tones", "input": "x", "voice": "alloy"},
            headers={"authorization": f"Bearer {key}"},
        )
        assert keyed.status_code == 200
        usage = (await http.get("/v1/usage", headers={"authorization": f"Bearer {key}"})).json()
        assert (usage["tenant"], usage["requests"]) == ("acme", 1)


async def test_a_key_configured_by_its_hash_is_listed_by_the_start_of_its_hash() -> None:
    """The gateway never saw such a key, so its listing shows what the configuration says of it (which entry it is),
    never an empty hint; a key the admin API issued shows its own end."""
    configured = generate_api_key()
    tenants = [{"name": "acme", "api_key_sha256": [hash_api_key(configured)]}]
    config = {**CONFIG, "auth": {"admin_token": ADMIN_TOKEN, "tenants": tenants}}
    async with AsyncTestClient(app=in_process_app(config)) as http:
        admin = {"authorization": f"Bearer {ADMIN_TOKEN}"}
        issued = (await http.post("/admin/tenants/acme/keys", headers=admin)).json()["key"]
        listed = (await http.get("/admin/tenants/acme/keys", headers=admin)).json()["data"]
    assert [key["hint"] for key in listed] == [f"sha256:{hash_api_key(configured)[:8]}...", f"sk-tts-...{issued[-4:]}"]


async def test_admin_api_answers_as_its_docs_say() -> None:
    config = {**CONFIG, "auth": {"admin_token": ADMIN_TOKEN}}
    async with AsyncTestClient(app=in_process_app(config)) as http:
        admin = {"authorization": f"Bearer {ADMIN_TOKEN}"}
        as_text = await http.post(
            "/admin/tenants", content=b'{"name": "acme"}', headers={**admin, "content-type": "text/plain"}
        )
        assert (as_text.status_code, as_text.json()["error"]["code"]) == (415, "unsupported_media_type")
        nobodys_keys = await http.get("/admin/tenants/nobody/keys", headers=admin)
        assert (nobodys_keys.status_code, nobodys_keys.json()["error"]["code"]) == (404, "tenant_not_found")
        assert (await http.post("/admin/tenants", json={"name": "acme"}, headers=admin)).status_code == 201
        assert (await http.delete("/admin/tenants/acme", headers=admin)).status_code == 200
        retired = (await http.get("/admin/retired-usage/acme", headers=admin)).json()
        assert (retired["object"], len(retired["data"]), retired["has_more"]) == ("list", 1, False)
        assert retired["first_id"] == retired["last_id"] == retired["data"][0]["generation"]


def test_in_process_client_is_an_httpx_client() -> None:
    # The OpenAI SDK takes it as its http_client: the same client code that runs against a real server.
    assert issubclass(AsyncTestClient, httpx.AsyncClient)


async def test_a_remote_engine_lists_no_batch_size_of_its_own() -> None:
    # Its servers batch as they are configured; the front's figure for it would be a guess.
    upstream = {"kind": "openai", "options": {"endpoints": ["http://127.0.0.1:9/v1"]}}
    settings = Settings.model_validate({"engines": {"chattts": None, "upstream": upstream}, "aliases": {}})
    local = partial(ThreadBackend, capacity=1)

    def factory(name: str, engine: AnyEngineSettings) -> EngineBackend:
        return create_backend(name, engine) if engine.kind == "openai" else local(name, engine)

    async with AsyncTestClient(app=create_app(settings, pool_factory=factory, decoders=shared_decoders())) as client:
        listed = (await client.get("/v1/models")).json()["data"]
    assert {model["id"]: model["engine"] for model in listed}["upstream"] == {"name": "upstream", "max_batch": None}
