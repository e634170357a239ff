"""The chart's rendered configuration, served: real gateway processes (``harness/gateway_process.py``) run the ConfigMap
and Secret that the chart renders, on a machine where ChatTTS's weights cannot be had (no snapshot under the chart's
``/models/hub-cache`` and ``HF_HUB_OFFLINE``, so ChatTTS is ``unavailable`` about a second after start, espeak ready).

What a business gets from the chart's defaults: the OpenAI model names are ChatTTS only, so the pod is not Ready and
callers get 503 with ``Retry-After`` instead of another engine's voice; ``aliasFallback: true`` lets espeak answer,
counted in ``tts_alias_fallbacks_total``. The same on the front of two tiers, whose ChatTTS is a remote engine.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

import helm_python as helm
import httpx
import openai
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from auth.keys import generate_api_key, hash_api_key
from gateway.settings import BUILT_IN_MODEL_NAMES
from harness.gateway_process import GatewayProcess, closed_port
from tests.audio_decode import decode_audio
from tests.helm.chart import CHART, RELEASE, Rendered, merge

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

KEY = generate_api_key()
TENANT = {"name": "acme", "models": ["tts-1"], "api_key_sha256": [hash_api_key(KEY)]}
SERVICE_TOKEN = "svc-" + "0123456789abcdef" * 3
NO_WEIGHTS = {"HF_HUB_OFFLINE": "1"}  # the hub cannot be reached from here: fail at once rather than time out


@pytest.fixture(scope="module")
def chart() -> Iterator[helm.Chart]:
    with helm.Chart.load(CHART) as loaded:
        yield loaded


def render(chart: helm.Chart, values: dict[str, Any]) -> Rendered:
    values = merge({"auth": {"tenants": [TENANT]}, "engineTier": {"serviceToken": SERVICE_TOKEN}}, values)
    return Rendered(chart.render(values, name=RELEASE, namespace="speech", is_install=True))


def gateway_config(rendered: Rendered) -> dict[str, Any]:
    """config.yaml with secret.yaml merged over it, as the gateway merges the two files the pod mounts."""
    secret: dict[str, Any] = yaml.safe_load(base64.b64decode(rendered.one("Secret")["data"]["secret.yaml"]))
    return merge(rendered.config, secret)


def speak(gateway: GatewayProcess, text: str = "Hello from the chart.") -> Any:
    with openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=KEY, max_retries=0) as client:
        response = client.audio.speech.with_raw_response.create(
            model="tts-1", voice="alloy", input=text, response_format="wav"
        )
        return response.http_response


def refused(gateway: GatewayProcess) -> openai.APIStatusError:
    with pytest.raises(openai.InternalServerError) as caught:
        speak(gateway)
    return caught.value


def fallbacks(gateway: GatewayProcess) -> dict[tuple[str, str], float]:
    """``tts_alias_fallbacks_total`` by (alias, engine)."""
    text = httpx.get(f"{gateway.base_url}/metrics", timeout=5).text
    return {
        (sample.labels["alias"], sample.labels["engine"]): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "tts_alias_fallbacks_total"
    }


def assert_not_ready_for_chattts(gateway: GatewayProcess, why: str) -> dict[str, Any]:
    response = httpx.get(f"{gateway.base_url}/readyz", timeout=5)
    body: dict[str, Any] = response.json()
    assert response.status_code == 503, body
    assert body["ready"] is False
    assert body["required"] == {name: ["chattts"] for name in BUILT_IN_MODEL_NAMES}
    models, _, states = body["reason"].partition(" cannot be answered: ")
    assert set(models.split(", ")) == set(BUILT_IN_MODEL_NAMES)  # one line for the names waiting for ChatTTS
    assert states.startswith("chattts is unavailable") and why in states, body["reason"]
    assert body["engines"]["espeak"]["state"] == "ready"  # ready, and still not answering for ChatTTS
    return body


def assert_refused_with_retry_after(gateway: GatewayProcess) -> None:
    error = refused(gateway)
    assert error.status_code == 503
    assert error.response.headers["retry-after"] == "5"
    assert error.code == "engine_not_ready"
    assert "chattts" in error.message
    assert fallbacks(gateway) == {}


def assert_espeak_answers_and_counts(gateway: GatewayProcess) -> None:
    ready = httpx.get(f"{gateway.base_url}/readyz", timeout=5)
    assert ready.status_code == 200, ready.text
    assert ready.json()["required"]["tts-1"] == ["chattts", "espeak"]
    first, again = speak(gateway), speak(gateway)  # the second is a cache hit: espeak's audio all the same
    assert first.headers["x-engine"] == again.headers["x-engine"] == "espeak"
    assert again.headers["x-cache"] == "hit"
    assert decode_audio(first.content, "wav").duration > 0.3
    assert fallbacks(gateway) == {("tts-1", "espeak"): 2.0}
    assert gateway.log().count("alias tts-1 falls back to engine espeak") == 1  # once per change, not per request


def test_the_charts_defaults_are_not_ready_and_refuse_without_chattts(chart: helm.Chart, tmp_path: Path) -> None:
    with GatewayProcess(gateway_config(render(chart, {})), tmp_path, env=NO_WEIGHTS) as gateway:
        assert_not_ready_for_chattts(gateway, "HF_HUB_OFFLINE is set")
        assert_refused_with_retry_after(gateway)


def test_alias_fallback_lets_espeak_answer_and_counts_it(chart: helm.Chart, tmp_path: Path) -> None:
    config = gateway_config(render(chart, {"aliasFallback": True}))
    with GatewayProcess(config, tmp_path, env=NO_WEIGHTS) as gateway:
        assert_espeak_answers_and_counts(gateway)


@pytest.mark.parametrize("alias_fallback", [False, True], ids=["defaults", "alias-fallback"])
def test_the_front_of_two_tiers_with_its_engine_tier_down(
    chart: helm.Chart, tmp_path: Path, alias_fallback: bool
) -> None:
    rendered = render(chart, {"engineTier": {"enabled": True}, "aliasFallback": alias_fallback})
    config = gateway_config(rendered)
    remote = config["engines"]["chattts"]
    assert remote["kind"] == "openai"
    # The engine tier's headless Service does not resolve here: a loopback port nothing listens on stands for it.
    down = f"http://127.0.0.1:{closed_port()}/v1"
    remote["options"]["endpoints"] = [down]
    env = {"TTS_ENGINE_SERVICE_TOKEN": SERVICE_TOKEN}
    with GatewayProcess(config, tmp_path, env=env) as front:
        if alias_fallback:
            assert_espeak_answers_and_counts(front)
        else:
            assert_not_ready_for_chattts(front, f"no endpoint can take requests: {down}")
            assert_refused_with_retry_after(front)


def test_an_engine_pod_is_ready_only_with_the_engines_it_hosts(chart: helm.Chart, tmp_path: Path) -> None:
    rendered = render(chart, {"engineTier": {"enabled": True}})
    node_config: dict[str, Any] = yaml.safe_load(
        rendered.one("ConfigMap", f"{rendered.deployment['metadata']['name']}-engine")["data"]["config.yaml"]
    )
    env = {**NO_WEIGHTS, "CHATTTS_GATEWAY_AUTH__SERVICE_TOKEN": SERVICE_TOKEN}
    with GatewayProcess(node_config, tmp_path, env=env) as node:
        headers = {"authorization": f"Bearer {SERVICE_TOKEN}"}  # the detail is for the front gateways
        response = httpx.get(f"{node.base_url}/readyz", headers=headers, timeout=5)
        assert response.status_code == 503
        body = response.json()
        assert body["required"] == {"chattts": ["chattts"]}
        assert body["reason"].startswith("chattts is unavailable (no ChatTTS snapshot in /models/hub-cache")
