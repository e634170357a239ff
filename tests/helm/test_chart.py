"""The Helm chart (helm/chattts-gateway), checked offline: no helm binary and no cluster are needed.

helm-python-sdk (Helm's Go SDK in a bundled library) lints and renders the chart, kubernetes-validate checks every
rendered manifest against the Kubernetes 1.30 schemas, jsonschema/check-jsonschema check values against
values.schema.json, and the rendered ConfigMap + Secret go through the gateway's own settings loader, so a chart that
drifts from the settings fails here.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import re
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import helm_python as helm
import jsonschema
import kubernetes_validate
import pytest
import yaml
from pydantic import BaseModel
from yamllint import linter
from yamllint.config import YamlLintConfig

from engines.chattts.options import ChatTTSOptions
from engines.settings import ChatTTSEngineSettings, RemoteEngineSettings
from gateway.settings import BUILT_IN_MODEL_NAMES, Settings, load_settings
from storage.redis_url import parse_redis_url
from tests.helm.chart import CHART, FULLNAME, RELEASE, ROOT, Rendered, UniqueKeyLoader, merge

if TYPE_CHECKING:
    from collections.abc import Iterator

HERE = Path(__file__).parent
EVERYTHING = HERE / "values-everything.yaml"
ENGINE_TIER = HERE / "values-engine-tier.yaml"
BAD = HERE / "values-bad.yaml"
KUBE_VERSION = "1.30.0"
CONFIG_PATH = "/etc/chattts-gateway/config.yaml"
SECRET_PATH = "/etc/chattts-gateway/secret/secret.yaml"
TENANT = {
    "name": "acme",
    "models": ["tts-1"],
    "limits": {"requests_per_minute": 60, "concurrent_streams": 2},
    "api_key_sha256": [hashlib.sha256(b"sk-tts-test").hexdigest()],
}


SENTINEL_HOSTS = [f"redis-node-{n}.redis-headless.redis.svc:26379" for n in range(2)] + ["redis-node-2.redis-headless"]
CLUSTER_NODES = [f"redis-cluster-{n}.redis-cluster-headless.redis.svc:6379" for n in range(3)]


def _everything() -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load(EVERYTHING.read_text())
    return values


def _engine_tier() -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load(ENGINE_TIER.read_text())
    return values


@pytest.fixture(scope="module")
def chart() -> Iterator[helm.Chart]:
    with helm.Chart.load(CHART) as loaded:
        yield loaded


@pytest.fixture(scope="module")
def render(chart: helm.Chart) -> Any:
    def _render(values: dict[str, Any] | None = None) -> Rendered:
        return Rendered(chart.render(values or {}, name=RELEASE, namespace="speech", is_install=True))

    return _render


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    import json

    loaded: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
    return loaded


VALUE_SETS = {
    "default": dict[str, Any](),
    "everything": _everything(),
    "existing-secret": {
        "auth": {"existingSecret": "gateway-credentials"},
        "redis": {"host": "redis", "existingSecret": "redis", "existingSecretPasswordKey": "pw"},
    },
    "single": {"replicaCount": 1, "serviceAccount": {"create": False}, "redis": {"host": "redis"}},
    # Bitnami's redis chart with sentinel.enabled: the sentinels share Redis's password; TLS with a private CA.
    "sentinel": {
        "redis": {
            "mode": "sentinel",
            "sentinel": {"hosts": SENTINEL_HOSTS, "masterSet": "mymaster"},
            "existingSecret": "redis",
            "tls": True,
            "tlsCASecret": "redis-ca",
        },
        "networkPolicy": {"enabled": True},
    },
    "cluster": {
        "redis": {"mode": "cluster", "cluster": {"nodes": CLUSTER_NODES}, "password": "cluster-pw"},
        "networkPolicy": {"enabled": True},
    },
}
# The two-tier renders: checked like VALUE_SETS by the lint, schema and Kubernetes tests, and by their own tests below
# (the single-tier tests above expect one tier's pod, weights volume included).
TWO_TIER_SETS = {
    "engine-tier": {"engineTier": {"enabled": True}},
    "engine-tier-everything": _engine_tier(),
    "engine-tier-existing-secret": {
        "engineTier": {"enabled": True, "existingSecret": "engine-token", "existingSecretKey": "token"}
    },
}


# --- lint, Kubernetes schemas, values schema -------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["default", "everything", "engine-tier-everything", "sentinel", "cluster"])
def test_strict_lint_passes(name: str) -> None:
    values = {**VALUE_SETS, **TWO_TIER_SETS}[name]
    report = helm.lint(CHART, values, strict=True, namespace="speech", kube_version=f"v{KUBE_VERSION}")
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert report["errors"] == [] and problems == [], report


def test_strict_lint_reports_broken_values() -> None:
    report = helm.lint(CHART, yaml.safe_load(BAD.read_text()), strict=True)
    assert any("replicaCount" in error for error in report["errors"]), report
    # Helm's lint mode only logs the templates' `fail` calls: those are caught by rendering (test_weights_volume).
    assert helm.lint(CHART, {"weights": {"source": "dir"}}, strict=True)["errors"] == []


@pytest.mark.parametrize("name", sorted(VALUE_SETS | TWO_TIER_SETS))
def test_every_manifest_validates_against_kubernetes(render: Any, name: str) -> None:
    rendered = render({**VALUE_SETS, **TWO_TIER_SETS}[name])
    for doc in rendered.docs:
        if doc["kind"] == "ServiceMonitor":  # a CRD: no schema in kubernetes-validate; see test_service_monitor
            continue
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)


def test_kubernetes_validation_can_fail(render: Any) -> None:
    deployment = copy.deepcopy(render().deployment)
    deployment["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBE_VERSION, strict=True)


def test_everything_renders_every_optional_kind(render: Any) -> None:
    kinds = set(render(VALUE_SETS["everything"]).kinds())
    assert kinds >= {
        "Deployment",
        "Service",
        "ServiceAccount",
        "ConfigMap",
        "Secret",
        "Ingress",
        "NetworkPolicy",
        "HorizontalPodAutoscaler",
        "PodDisruptionBudget",
        "ServiceMonitor",
        "PersistentVolumeClaim",
        "Pod",
    }
    assert not {"Ingress", "NetworkPolicy", "HorizontalPodAutoscaler", "ServiceMonitor", "PersistentVolumeClaim"} & set(
        render().kinds()
    )


def test_rendered_yaml_has_no_duplicate_keys() -> None:
    with pytest.raises(yaml.constructor.ConstructorError, match="duplicate"):
        yaml.load("a: 1\na: 2\n", Loader=UniqueKeyLoader)


@pytest.mark.parametrize("values_file", [CHART / "values.yaml", EVERYTHING, ENGINE_TIER])
def test_values_validate_against_schema(schema: dict[str, Any], chart: helm.Chart, values_file: Path) -> None:
    values = yaml.safe_load(values_file.read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    jsonschema.Draft7Validator(schema).validate(values)
    chart.validate_schema(values)


# Settings the chart sets itself (the container's command line, the engine tier's profile) or from a Secret of its own.
CHART_MANAGED = frozenset({
    "server.host", "server.port", "server.tls_certfile", "server.tls_keyfile", "server.profile", "redis_url",
    "auth.admin_token", "auth.tenants", "auth.jwt", "auth.service_token", "cache.redis_url",
})  # fmt: skip


def test_the_schema_takes_every_setting_the_chart_leaves_to_config(schema: dict[str, Any]) -> None:
    # `config` takes "the same keys as the gateway's YAML file": a setting the docs tell an operator to tune must not
    # be refused by additionalProperties: false.
    config = schema["properties"]["config"]["properties"]
    missing = []
    for name, field in Settings.model_fields.items():
        section = field.annotation
        if name not in config:
            missing += [] if name in CHART_MANAGED else [name]
        elif isinstance(section, type) and issubclass(section, BaseModel) and "properties" in config[name]:
            keys = {f"{name}.{key}" for key in section.model_fields} - CHART_MANAGED
            missing += sorted(keys - {f"{name}.{key}" for key in config[name]["properties"]})
    assert not missing, f"values.schema.json's config refuses these settings: {missing}"


def test_bad_values_are_rejected(schema: dict[str, Any], chart: helm.Chart, render: Any) -> None:
    bad = yaml.safe_load(BAD.read_text())
    messages = {error.message for error in jsonschema.Draft7Validator(schema).iter_errors(bad)}
    assert any("'two' is not of type 'integer'" in m for m in messages), messages
    assert any("'replicas' was unexpected" in m for m in messages), messages
    with pytest.raises(helm.HelmValuesError, match="replicaCount"):
        chart.validate_schema(bad)
    with pytest.raises(helm.HelmError):
        render(bad)
    with pytest.raises(helm.HelmValuesError, match="admin_token"):
        chart.validate_schema({"config": {"auth": {"admin_token": "would land in a ConfigMap"}}})
    remote = {"kind": "openai", "options": {"endpoints": ["https://api.openai.com/v1"], "api_key": "sk-in-a-configmap"}}
    with pytest.raises(helm.HelmValuesError, match="upstream/options': 'not' failed"):  # the key must not be there
        chart.validate_schema({"config": {"engines": {"upstream": remote}}})
    chart.validate_schema({"config": {"engines": {"upstream": {**remote, "options": {"api_key_env": "UPSTREAM_KEY"}}}}})
    with pytest.raises(helm.HelmValuesError, match="enabeld"):
        chart.validate_schema({"engineTier": {"enabeld": True}})
    with pytest.raises(helm.HelmValuesError, match="endpoints"):  # the chart sets them
        chart.validate_schema({"engineTier": {"remoteOptions": {"endpoints": ["http://elsewhere/v1"]}}})


def test_check_jsonschema_cli() -> None:
    cli = [sys.executable, "-m", "check_jsonschema", "--schemafile", str(CHART / "values.schema.json")]
    good = subprocess.run(
        [*cli, str(CHART / "values.yaml"), str(EVERYTHING), str(ENGINE_TIER)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert good.returncode == 0, good.stdout + good.stderr
    bad = subprocess.run([*cli, str(BAD)], capture_output=True, text=True, check=False)
    assert bad.returncode != 0 and "replicaCount" in bad.stdout + bad.stderr


@pytest.mark.parametrize("values_file", [CHART / "values.yaml", EVERYTHING, ENGINE_TIER])
def test_yamllint(values_file: Path) -> None:
    config = YamlLintConfig("extends: relaxed\nrules:\n  line-length: {max: 120}\n")
    problems = [f"{p.line}: {p.desc}" for p in linter.run(values_file.read_text(), config)]
    assert problems == []


def test_every_value_has_a_comment() -> None:
    """helm-docs' rule: every leaf value is documented by a `# --` comment on itself or on a key above it."""
    lines = CHART.joinpath("values.yaml").read_text().splitlines()
    stack: list[tuple[int, bool]] = []  # (indent, documented) of the enclosing keys
    undocumented = []
    for number, line in enumerate(lines):
        match = re.match(r"^( *)([A-Za-z0-9_.\-/\"]+):(.*)$", line)
        if not match:
            continue
        indent, key, rest = len(match[1]), match[2], match[3].split("#")[0].strip()
        while stack and stack[-1][0] >= indent:
            stack.pop()
        comments = []
        for previous in reversed(lines[:number]):
            if not previous.strip().startswith("#"):
                break
            comments.append(previous.strip())
        documented = any(c.startswith("# --") for c in comments) or any(doc for _, doc in stack)
        is_leaf = bool(rest) or not any(
            re.match(rf"^ {{{indent + 1},}}\S", following) for following in lines[number + 1 : number + 2]
        )
        if is_leaf and not documented:
            undocumented.append(key)
        stack.append((indent, documented))
    assert undocumented == []


# --- rendered output ---------------------------------------------------------------------------------------------


def test_replicas_only_without_autoscaling(render: Any) -> None:
    off = render()
    assert off.deployment["spec"]["replicas"] == 2
    assert "HorizontalPodAutoscaler" not in off.kinds()
    on = render(VALUE_SETS["everything"])
    assert "replicas" not in on.deployment["spec"]
    hpa = on.one("HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": FULLNAME}
    metrics = hpa["spec"]["metrics"]
    assert {
        "type": "Resource",
        "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}},
    } in metrics
    assert any(m["type"] == "Pods" and m["pods"]["metric"]["name"] == "tts_engine_queue_depth" for m in metrics)


def test_pod_disruption_budget_only_with_several_replicas(render: Any) -> None:
    assert render().one("PodDisruptionBudget")["spec"] == {
        "minAvailable": 1,
        "selector": {"matchLabels": render().deployment["spec"]["selector"]["matchLabels"]},
    }
    assert "PodDisruptionBudget" not in render({"replicaCount": 1}).kinds()
    assert "PodDisruptionBudget" in render({"replicaCount": 1, "autoscaling": {"enabled": True}}).kinds()
    # An HPA that may go down to one pod: a budget of minAvailable 1 would then block every node drain.
    one = {"replicaCount": 3, "autoscaling": {"enabled": True, "minReplicas": 1}}
    assert "PodDisruptionBudget" not in render(one).kinds()


def test_existing_secret_replaces_the_chart_secret(render: Any) -> None:
    rendered = render(VALUE_SETS["existing-secret"])
    assert "Secret" not in rendered.kinds()
    volumes = {volume["name"]: volume for volume in rendered.pod["volumes"]}
    assert volumes["secret"]["secret"]["secretName"] == "gateway-credentials"
    assert volumes["secret"]["secret"]["items"] == [{"key": "secret.yaml", "path": "secret.yaml"}]
    annotations = rendered.deployment["spec"]["template"]["metadata"]["annotations"]
    assert "checksum/secret" not in annotations and "checksum/config" in annotations
    assert rendered.env["REDIS_PASSWORD"]["valueFrom"] == {"secretKeyRef": {"name": "redis", "key": "pw"}}
    assert render().pod["volumes"][1]["secret"]["secretName"] == FULLNAME


def test_existing_secret_with_a_chart_rendered_redis_password_fails(render: Any) -> None:
    with pytest.raises(helm.HelmRenderError, match=r"redis\.existingSecret"):
        render({"auth": {"existingSecret": "creds"}, "redis": {"host": "redis", "password": "pw"}})


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_probes_point_at_health_routes_on_the_container_port(render: Any, name: str) -> None:
    container = render(VALUE_SETS[name]).container
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports == {"http": 8000}
    assert container["args"] == ["serve", "--host", "0.0.0.0", "--port", "8000"]
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz"), ("startupProbe", "/healthz")):
        assert container[probe]["httpGet"] == {"path": path, "port": "http"}
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 300  # ChatTTS loads for a while


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_security_context(render: Any, name: str) -> None:
    rendered = render(VALUE_SETS[name])
    pods = [rendered.pod, rendered.one("Pod", f"{FULLNAME}-test-connection")["spec"]]
    for pod in pods:
        assert pod["automountServiceAccountToken"] is False
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] == 10001
        assert "fsGroup" in pod["securityContext"]
        for container in pod["containers"]:
            context = container["securityContext"]
            assert context["runAsNonRoot"] is True
            assert context["readOnlyRootFilesystem"] is True
            assert context["allowPrivilegeEscalation"] is False
            assert context["capabilities"]["drop"] == ["ALL"]
            assert context["seccompProfile"] == {"type": "RuntimeDefault"}


def test_service_account_does_not_mount_its_token(render: Any) -> None:
    rendered = render()
    assert rendered.one("ServiceAccount")["automountServiceAccountToken"] is False
    assert rendered.pod["serviceAccountName"] == FULLNAME
    assert render({"serviceAccount": {"create": False}}).pod["serviceAccountName"] == "default"


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_tmp_and_models_are_writable_volumes(render: Any, name: str) -> None:
    rendered = render(VALUE_SETS[name])
    mounts = {mount["mountPath"]: mount for mount in rendered.container["volumeMounts"]}
    volumes = {volume["name"]: volume for volume in rendered.pod["volumes"]}
    for path in ("/tmp", "/models"):
        assert not mounts[path].get("readOnly", False)
        volume = volumes[mounts[path]["name"]]
        assert "emptyDir" in volume or "persistentVolumeClaim" in volume
    assert rendered.env["HOME"]["value"] == "/tmp"


@pytest.mark.parametrize(
    ("values", "spooled_mb"),
    [
        ({}, 512),  # the default 1Gi: half for upload bodies
        ({"tmpSizeLimit": "4Gi"}, 2048),
        ({"tmpSizeLimit": "500M"}, 238),
        ({"tmpSizeLimit": "1.5Gi"}, 768),
        ({"tmpSizeLimit": "20Mi"}, 16),  # never under the setting's least
        ({"tmpSizeLimit": "4Gi", "config": {"uploads": {"max_spooled_mb": 100}}}, 100),  # said outright: kept
    ],
)
def test_upload_bodies_in_flight_fit_in_tmp(render: Any, values: dict[str, Any], spooled_mb: int) -> None:
    assert render(values).config["uploads"]["max_spooled_mb"] == spooled_mb


def test_weights_volume(render: Any) -> None:
    default = render()
    assert "emptyDir" in {v["name"]: v for v in default.pod["volumes"]}["models"]
    options = default.config["engines"]["chattts"]["options"]
    assert options == {"source": "hub", "cache_dir": "/models/hub-cache", "download": True}

    everything = render(VALUE_SETS["everything"])
    claim = everything.one("PersistentVolumeClaim", f"{FULLNAME}-models")
    assert claim["spec"]["resources"]["requests"]["storage"] == "20Gi"
    assert claim["spec"]["storageClassName"] == "fast-ssd"
    volumes = {v["name"]: v for v in everything.pod["volumes"]}
    assert volumes["models"]["persistentVolumeClaim"]["claimName"] == f"{FULLNAME}-models"
    options = everything.config["engines"]["chattts"]["options"]
    assert options == {"source": "dir", "path": "/models/chattts", "device": "cuda", "max_batch": 8}

    existing = render(
        {"weights": {"source": "dir", "persistentVolumeClaim": {"enabled": True, "existingClaim": "chattts-weights"}}}
    )
    assert "PersistentVolumeClaim" not in existing.kinds()
    assert {v["name"]: v for v in existing.pod["volumes"]}["models"]["persistentVolumeClaim"] == {
        "claimName": "chattts-weights"
    }
    with pytest.raises(helm.HelmRenderError, match="persistentVolumeClaim"):
        render({"weights": {"source": "dir"}})


def test_config_map_holds_the_gateway_config(render: Any) -> None:
    config = render().config
    assert config["auth"] == {"required": True}
    assert config["engines"]["chattts"]["kind"] == "chattts" and config["engines"]["espeak"]["kind"] == "espeak"
    # ChatTTS only by default: espeak is listed, and answers only with aliasFallback (test_alias_fallback_value).
    chattts_only = {"engines": ["chattts", "espeak"], "fallback": False}
    assert config["aliases"] == dict.fromkeys(BUILT_IN_MODEL_NAMES, chattts_only)
    assert "redis_url" not in config


def test_alias_fallback_value(render: Any) -> None:
    on = render({"aliasFallback": True}).config["aliases"]
    assert {alias["fallback"] for alias in on.values()} == {True}
    everything = render(VALUE_SETS["everything"]).config
    assert everything["aliases"]["tts-1"]["fallback"] is True
    assert everything["aliases"]["tones-first"] == {"engines": ["tones", "espeak"], "fallback": False}  # its own wins
    assert everything["readiness"] == {"engines": ["chattts", "tones"]}


def test_every_built_in_alias_the_values_leave_out_is_null(render: Any) -> None:
    """The chart's list of the gateway's built-in aliases is the gateway's: none slips back in with its own default
    (``fallback: true``), and one removed from the values stays removed (Helm drops keys set to null)."""
    removed = render({"config": {"aliases": dict.fromkeys(BUILT_IN_MODEL_NAMES)}}).config["aliases"]
    assert removed == dict.fromkeys(BUILT_IN_MODEL_NAMES)
    one = render({"config": {"aliases": {"tts-1-1106": None}}}).config["aliases"]
    assert one["tts-1-1106"] is None and one["tts-1"]["engines"] == ["chattts", "espeak"]


def test_gateway_config_files_are_mounted_where_the_env_var_points(render: Any) -> None:
    rendered = render()
    assert rendered.env["CHATTTS_GATEWAY_CONFIG"]["value"].split(":") == [CONFIG_PATH, SECRET_PATH]
    mounts = {mount["name"]: mount for mount in rendered.container["volumeMounts"]}
    assert mounts["config"]["mountPath"] == CONFIG_PATH and mounts["config"]["subPath"] == "config.yaml"
    assert f"{mounts['secret']['mountPath']}/secret.yaml" == SECRET_PATH


def test_redis_url_uses_the_password_from_a_secret(render: Any) -> None:
    rendered = render(VALUE_SETS["everything"])
    names = [var["name"] for var in rendered.container["env"]]
    # Dependent environment variables expand only names defined earlier in the list.
    assert names.index("REDIS_PASSWORD") < names.index("CHATTTS_GATEWAY_REDIS_URL")
    assert rendered.env["REDIS_PASSWORD"]["valueFrom"] == {"secretKeyRef": {"name": FULLNAME, "key": "redis-password"}}
    assert rendered.env["CHATTTS_GATEWAY_REDIS_URL"]["value"] == (
        "redis://gateway:$(REDIS_PASSWORD)@redis-master.redis.svc:6380/2"
    )
    password = VALUE_SETS["everything"]["redis"]["password"]
    assert password not in rendered.text("deployment.yaml")
    assert password not in rendered.text("configmap.yaml")
    assert base64.b64decode(rendered.one("Secret")["data"]["redis-password"]).decode() == password


def test_redis_url_without_password_or_host(render: Any) -> None:
    assert not {"REDIS_PASSWORD", "CHATTTS_GATEWAY_REDIS_URL"} & set(render().env)
    plain = render({"redis": {"host": "redis.db.svc", "tls": True}})
    assert "REDIS_PASSWORD" not in plain.env
    assert plain.env["CHATTTS_GATEWAY_REDIS_URL"]["value"] == "rediss://redis.db.svc:6379/0"


def test_gpu_limit_only_with_gpu_enabled(render: Any) -> None:
    default = render()
    assert "nvidia.com/gpu" not in default.container["resources"].get("limits", {})
    assert "device" not in default.config["engines"]["chattts"]["options"]
    assert default.container["resources"]["requests"] == {"cpu": "1", "memory": "2Gi"}
    gpu = render({"gpu": {"enabled": True, "count": 2}})
    assert gpu.container["resources"]["limits"]["nvidia.com/gpu"] == 2
    assert gpu.container["resources"]["limits"]["memory"] == "4Gi"
    assert gpu.config["engines"]["chattts"]["options"]["device"] == "cuda"


def test_checksums_follow_the_config_and_secret(render: Any) -> None:
    def annotations(values: dict[str, Any]) -> dict[str, str]:
        result: dict[str, str] = render(values).deployment["spec"]["template"]["metadata"]["annotations"]
        return result

    base = {"auth": {"adminToken": "fixed"}}
    first, again = annotations(base), annotations(base)
    assert first == again  # deterministic when nothing changed
    changed = annotations(merge(base, {"config": {"server": {"log_level": "debug"}}}))
    assert changed["checksum/config"] != first["checksum/config"]
    assert changed["checksum/secret"] == first["checksum/secret"]
    rotated = annotations({"auth": {"adminToken": "rotated"}})
    assert rotated["checksum/secret"] != first["checksum/secret"]
    assert rotated["checksum/config"] == first["checksum/config"]


def test_generated_admin_token_matches_its_checksum(render: Any) -> None:
    rendered = render()
    token = rendered.secret_config["auth"]["admin_token"]
    assert re.fullmatch(r"[A-Za-z0-9]{40}", token)
    secret_yaml = base64.b64decode(rendered.one("Secret")["data"]["secret.yaml"]).decode()
    checksum = rendered.deployment["spec"]["template"]["metadata"]["annotations"]["checksum/secret"]
    assert checksum == hashlib.sha256(secret_yaml.encode()).hexdigest()


def test_termination_grace_covers_the_stream_grace(render: Any) -> None:
    for values, grace in (({}, 30), (VALUE_SETS["everything"], 60)):
        rendered = render(values)
        assert rendered.config["server"]["shutdown_grace_s"] == grace
        sleep = int(rendered.container["lifecycle"]["preStop"]["exec"]["command"][1])
        assert rendered.pod["terminationGracePeriodSeconds"] == sleep + grace + 15


def test_network_policy(render: Any) -> None:
    policy = render(VALUE_SETS["everything"]).one("NetworkPolicy")["spec"]
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    assert policy["ingress"][0]["ports"] == [{"port": "http", "protocol": "TCP"}]
    peers = policy["ingress"][0]["from"]
    assert {
        "podSelector": {
            "matchLabels": {"app.kubernetes.io/name": "chattts-gateway-test", "app.kubernetes.io/instance": RELEASE}
        }
    } in peers
    egress_ports = [port["port"] for rule in policy["egress"] for port in rule["ports"]]
    assert egress_ports == [53, 53, 6380, 443]


def test_service_monitor(render: Any) -> None:
    monitor = render(VALUE_SETS["everything"]).one("ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    service = render(VALUE_SETS["everything"]).one("Service")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["speech"]}
    assert monitor["spec"]["endpoints"] == [
        {"port": "http", "path": "/metrics", "interval": "15s", "scrapeTimeout": "10s"}
    ]
    assert service["spec"]["ports"][0]["name"] == "http"


def test_test_pod_is_a_helm_test_hook_outside_the_service(render: Any) -> None:
    rendered = render()
    pod = rendered.one("Pod", f"{FULLNAME}-test-connection")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    container = pod["spec"]["containers"][0]
    assert container["command"] == ["wget"]
    assert container["args"][-1] == f"http://{FULLNAME}:8000/healthz"
    selector = rendered.one("Service")["spec"]["selector"]
    assert not selector.items() <= pod["metadata"]["labels"].items()


def test_ingress(render: Any) -> None:
    ingress = render(VALUE_SETS["everything"]).one("Ingress")["spec"]
    assert ingress["ingressClassName"] == "nginx"
    assert ingress["tls"] == [{"hosts": ["tts.example.com"], "secretName": "tts-tls"}]
    backend = ingress["rules"][0]["http"]["paths"][0]["backend"]
    assert backend == {"service": {"name": FULLNAME, "port": {"name": "http"}}}


# --- the gateway accepts what the chart renders ------------------------------------------------------------------


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    import os

    for name in list(os.environ):
        if name.startswith(("CHATTTS_GATEWAY_", "TTS_GATEWAY_")):
            monkeypatch.delenv(name)
    return monkeypatch


@pytest.mark.parametrize("name", ["default", "everything", "tenants"])
def test_settings_loader_accepts_the_rendered_config(
    render: Any,
    tmp_path: Path,
    clean_environment: pytest.MonkeyPatch,
    name: str,
) -> None:
    values = {"auth": {"tenants": [TENANT]}} if name == "tenants" else VALUE_SETS[name]
    rendered = render(values)
    config_file, secret_file = tmp_path / "config.yaml", tmp_path / "secret.yaml"
    config_file.write_text(rendered.one("ConfigMap")["data"]["config.yaml"])
    secret_file.write_bytes(base64.b64decode(rendered.one("Secret")["data"]["secret.yaml"]))
    if "CHATTTS_GATEWAY_REDIS_URL" in rendered.env:  # as the kubelet expands it
        url = rendered.env["CHATTTS_GATEWAY_REDIS_URL"]["value"].replace("$(REDIS_PASSWORD)", "pw")
        clean_environment.setenv("CHATTTS_GATEWAY_REDIS_URL", url)

    settings = load_settings([config_file, secret_file])

    assert settings.auth.required is True
    assert settings.auth.admin_token is not None
    assert settings.server.playground is False  # off by default in the chart
    assert set(settings.engines) >= {"chattts", "espeak"}
    for engine in settings.engines.values():
        if engine.kind == "chattts":
            # Typed options: the loader has validated the ones the chart adds against what the engine knows.
            assert isinstance(engine.options, ChatTTSOptions)
    fallbacks = {name: alias.fallback for name, alias in settings.aliases.items()}
    if name != "everything":
        assert fallbacks == dict.fromkeys(BUILT_IN_MODEL_NAMES, False)  # ChatTTS only
        assert settings.readiness.engines is None  # every alias must be answerable: ChatTTS must be ready
    if name == "everything":
        assert fallbacks == {**dict.fromkeys(BUILT_IN_MODEL_NAMES, True), "tones-first": False}
        assert settings.readiness.engines == ["chattts", "tones"]
        assert settings.redis_url == "redis://gateway:pw@redis-master.redis.svc:6380/2"
        assert [t.name for t in settings.auth.tenants] == ["acme"]
        assert settings.auth.jwt is not None and settings.auth.jwt.audience == "tts"
        chattts = settings.engines["chattts"]
        assert isinstance(chattts, ChatTTSEngineSettings) and chattts.workers == 2 and "tones" in settings.engines
        assert settings.server.shutdown_grace_s == 60
        assert settings.server.send_timeout_s == 20
    if name == "tenants":
        assert settings.auth.tenants[0].api_key_sha256 == TENANT["api_key_sha256"]
        assert settings.redis_url is None


def test_settings_loader_needs_the_secret(render: Any, tmp_path: Path, clean_environment: pytest.MonkeyPatch) -> None:
    """The ConfigMap alone sets auth.required without credentials: the gateway must refuse it (the check bites)."""
    config_file = tmp_path / "config.yaml"
    config_file.write_text(render().one("ConfigMap")["data"]["config.yaml"])
    with pytest.raises(ValueError, match=r"auth\.required"):
        load_settings([config_file])


def test_image_matches_the_chart(render: Any) -> None:
    """The Dockerfile's user, port, entrypoint and command are what the chart's pod expects."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    rendered = render()
    assert f"USER {rendered.pod['securityContext']['runAsUser']}:" in dockerfile
    assert "EXPOSE 8000" in dockerfile
    assert 'ENTRYPOINT ["chattts-gateway"]' in dockerfile
    assert f"CMD {rendered.container['args']}".replace("'", '"') in dockerfile
    assert "python scripts/fix_torchaudio.py" in dockerfile


# --- Redis Sentinel and Cluster ---------------------------------------------------------------------------------


def _redis_settings(rendered: Rendered, tmp_path: Path, environment: pytest.MonkeyPatch, **passwords: str) -> Any:
    """The gateway's settings from the render, with the URL as the kubelet expands it from the env vars."""
    config_file, secret_file = tmp_path / "config.yaml", tmp_path / "secret.yaml"
    config_file.write_text(rendered.one("ConfigMap")["data"]["config.yaml"])
    secret_file.write_bytes(base64.b64decode(rendered.one("Secret")["data"]["secret.yaml"]))
    url = rendered.env["CHATTTS_GATEWAY_REDIS_URL"]["value"]
    for name, password in passwords.items():
        url = url.replace(f"$({name})", password)
    environment.setenv("CHATTTS_GATEWAY_REDIS_URL", url)
    return load_settings([config_file, secret_file])


def test_sentinel_values_render_a_sentinel_url_the_gateway_takes(
    render: Any, tmp_path: Path, clean_environment: pytest.MonkeyPatch
) -> None:
    rendered = render(VALUE_SETS["sentinel"])
    url = rendered.env["CHATTTS_GATEWAY_REDIS_URL"]["value"]
    hosts = ",".join(SENTINEL_HOSTS)
    assert (
        url
        == f"rediss+sentinel://:$(REDIS_PASSWORD)@{hosts}/mymaster/0?ssl_ca_certs=/etc/chattts-gateway/redis-ca/ca.crt"
    )
    assert rendered.env["REDIS_PASSWORD"]["valueFrom"] == {"secretKeyRef": {"name": "redis", "key": "redis-password"}}
    assert "REDIS_SENTINEL_PASSWORD" not in rendered.env  # auth redis: the sentinels are sent Redis's password
    mounts = {mount["name"]: mount for mount in rendered.container["volumeMounts"]}
    assert mounts["redis-ca"] == {"name": "redis-ca", "mountPath": "/etc/chattts-gateway/redis-ca", "readOnly": True}
    volumes = {volume["name"]: volume for volume in rendered.pod["volumes"]}
    assert volumes["redis-ca"]["secret"] == {"secretName": "redis-ca", "items": [{"key": "ca.crt", "path": "ca.crt"}]}

    target = parse_redis_url(_redis_settings(rendered, tmp_path, clean_environment, REDIS_PASSWORD="pw").redis_url)
    assert (target.topology, target.tls, target.service, target.db) == ("sentinel", True, "mymaster", 0)
    assert target.addresses == (
        ("redis-node-0.redis-headless.redis.svc", 26379),
        ("redis-node-1.redis-headless.redis.svc", 26379),
        ("redis-node-2.redis-headless", 26379),
    )
    assert (target.password, target.sentinel_password) == ("pw", "pw")
    assert target.tls_options == (("ssl_ca_certs", "/etc/chattts-gateway/redis-ca/ca.crt"),)


@pytest.mark.parametrize(
    ("sentinel", "option", "reference"),
    [
        ({"auth": "none"}, "?sentinel_password=", None),
        (
            {"auth": "own", "existingSecret": "sentinels", "existingSecretPasswordKey": "pw"},
            "?sentinel_password=$(REDIS_SENTINEL_PASSWORD)",
            {"name": "sentinels", "key": "pw"},
        ),
        (
            {"auth": "own", "password": "s3ntinel-pw"},
            "?sentinel_password=$(REDIS_SENTINEL_PASSWORD)",
            {"name": FULLNAME, "key": "redis-sentinel-password"},
        ),
    ],
)
def test_the_sentinels_own_password_comes_from_a_secret(
    render: Any,
    tmp_path: Path,
    clean_environment: pytest.MonkeyPatch,
    *,
    sentinel: dict[str, str],
    option: str,
    reference: dict[str, str] | None,
) -> None:
    values = {"redis": {"mode": "sentinel", "password": "redis-pw", "sentinel": {"hosts": ["s1"], **sentinel}}}
    rendered = render(values)
    assert (
        rendered.env["CHATTTS_GATEWAY_REDIS_URL"]["value"]
        == f"redis+sentinel://:$(REDIS_PASSWORD)@s1/mymaster/0{option}"
    )
    if reference is None:
        assert "REDIS_SENTINEL_PASSWORD" not in rendered.env
    else:
        names = [var["name"] for var in rendered.container["env"]]
        assert names.index("REDIS_SENTINEL_PASSWORD") < names.index("CHATTTS_GATEWAY_REDIS_URL")  # expanded in order
        assert rendered.env["REDIS_SENTINEL_PASSWORD"]["valueFrom"] == {"secretKeyRef": reference}
    secret = rendered.one("Secret")["data"]
    assert ("redis-sentinel-password" in secret) == ("password" in sentinel)
    for password in ("redis-pw", sentinel.get("password", "redis-pw")):
        assert password not in rendered.text("deployment.yaml")
        assert password not in rendered.text("configmap.yaml")
    target = parse_redis_url(
        _redis_settings(
            rendered, tmp_path, clean_environment, REDIS_PASSWORD="redis-pw", REDIS_SENTINEL_PASSWORD="sentinel-pw"
        ).redis_url
    )
    assert target.sentinel_password == (None if reference is None else "sentinel-pw")


def test_cluster_values_render_a_cluster_url_the_gateway_takes(
    render: Any, tmp_path: Path, clean_environment: pytest.MonkeyPatch
) -> None:
    rendered = render(VALUE_SETS["cluster"])
    url = rendered.env["CHATTTS_GATEWAY_REDIS_URL"]["value"]
    assert url == f"redis+cluster://:$(REDIS_PASSWORD)@{','.join(CLUSTER_NODES)}"
    assert base64.b64decode(rendered.one("Secret")["data"]["redis-password"]) == b"cluster-pw"
    target = parse_redis_url(_redis_settings(rendered, tmp_path, clean_environment, REDIS_PASSWORD="pw").redis_url)
    assert (target.topology, target.password, len(target.addresses)) == ("cluster", "pw", 3)


def test_redis_egress_reaches_the_sentinels_and_the_cluster_nodes(render: Any) -> None:
    def egress_ports(values: dict[str, Any]) -> list[int]:
        policy = render(values).one("NetworkPolicy")["spec"]
        return [port["port"] for rule in policy["egress"] for port in rule["ports"] if port["port"] != 53]

    assert egress_ports(VALUE_SETS["sentinel"]) == [6379, 26379]  # the master the sentinels name, the sentinels
    nodes = {"mode": "cluster", "port": 7000, "cluster": {"nodes": ["n1:7000", "n2:7001", "n3"]}}
    assert egress_ports({"redis": nodes, "networkPolicy": {"enabled": True}}) == [7000, 7001, 6379]


def test_notes_warn_only_without_any_redis(render: Any) -> None:
    for name, warned in (("default", True), ("sentinel", False), ("cluster", False), ("single", False)):
        notes = render(VALUE_SETS[name]).files["chattts-gateway/templates/NOTES.txt"]
        assert ("no Redis is configured" in notes) is warned, name


@pytest.mark.parametrize(
    ("redis", "schema_error", "render_error"),
    [
        ({"mode": "sentinel"}, "should be non-empty", "sentinel/hosts': minItems"),
        ({"mode": "cluster"}, "should be non-empty", "cluster/nodes': minItems"),
        ({"mode": "cluster", "db": 2, "cluster": {"nodes": ["n1"]}}, "0 was expected", "db': value must be 0"),
        ({"host": "redis", "tlsCASecret": "ca"}, "True was expected", "tls': value must be true"),
        ({"mode": "sentinel", "sentinel": {"hosts": ["s1,s2"]}}, "does not match", "hosts/0'"),
        ({"mode": "sentinel", "sentinel": {"hosts": ["s1"], "auth": "same"}}, "is not one of", "auth'"),
        ({"mode": "replicated"}, "is not one of", "mode'"),
        # Only the templates can tell: the password may come from either of two values.
        ({"mode": "sentinel", "sentinel": {"hosts": ["s1"], "auth": "own"}}, None, "needs redis.sentinel.password"),
    ],
)
def test_unusable_redis_values_are_refused(
    schema: dict[str, Any],
    render: Any,
    redis: dict[str, Any],
    schema_error: str | None,
    render_error: str,
) -> None:
    # What Helm validates: the values merged over the chart's defaults.
    values = merge(yaml.safe_load((CHART / "values.yaml").read_text()), {"redis": redis})
    messages = [error.message for error in jsonschema.Draft7Validator(schema).iter_errors(values)]
    if schema_error is None:
        assert messages == []
    else:
        assert any(schema_error in message for message in messages), messages
    with pytest.raises(helm.HelmError, match=re.escape(render_error)):
        render({"redis": redis})


# --- the engine tier (engineTier.enabled) -------------------------------------------------------------------------

ENGINE_FULLNAME = f"{FULLNAME}-engine"


def _engine_pod(rendered: Rendered) -> dict[str, Any]:
    spec: dict[str, Any] = rendered.one("Deployment", ENGINE_FULLNAME)["spec"]["template"]["spec"]
    return spec


def _engine_container(rendered: Rendered) -> dict[str, Any]:
    containers = _engine_pod(rendered)["containers"]
    assert len(containers) == 1
    return dict(containers[0])


def _engine_config(rendered: Rendered) -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load(rendered.one("ConfigMap", ENGINE_FULLNAME)["data"]["config.yaml"])
    return config


def _env(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {var["name"]: var for var in container["env"]}


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return selector.items() <= labels.items()


def test_engine_tier_is_off_by_default(render: Any) -> None:
    rendered = render()
    assert not [doc for doc in rendered.docs if doc["metadata"]["name"].startswith(ENGINE_FULLNAME)]
    assert "TTS_ENGINE_SERVICE_TOKEN" not in rendered.env
    assert all(engine["kind"] != "openai" for engine in rendered.config["engines"].values())


def test_engine_tier_renders_an_engine_deployment_behind_a_headless_service(render: Any) -> None:
    rendered = render(TWO_TIER_SETS["engine-tier-everything"])
    assert sorted(d["metadata"]["name"] for d in rendered.all("Deployment")) == [FULLNAME, ENGINE_FULLNAME]
    engine = rendered.one("Deployment", ENGINE_FULLNAME)
    assert "replicas" not in engine["spec"]  # its HPA owns them
    assert render(TWO_TIER_SETS["engine-tier"]).one("Deployment", ENGINE_FULLNAME)["spec"]["replicas"] == 1
    service = rendered.one("Service", ENGINE_FULLNAME)
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["ports"] == [{"port": 8000, "targetPort": "http", "protocol": "TCP", "name": "http"}]
    assert service["metadata"]["annotations"] == {"example.com/owner": "speech"}
    pod_labels = engine["spec"]["template"]["metadata"]["labels"]
    assert _selects(service["spec"]["selector"], pod_labels)
    assert pod_labels["example.com/tier"] == "engine"
    container = _engine_container(rendered)
    assert container["image"] == rendered.container["image"]  # the same image, another profile
    assert container["args"] == ["serve", "--host", "0.0.0.0", "--port", "8000"]
    assert _env(container)["CHATTTS_GATEWAY_CONFIG"]["value"] == CONFIG_PATH
    assert _env(container)["HF_HUB_OFFLINE"]["value"] == "1"
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz"), ("startupProbe", "/healthz")):
        assert container[probe]["httpGet"] == {"path": path, "port": "http"}


def test_the_tiers_select_only_their_own_pods(render: Any) -> None:
    rendered = render(TWO_TIER_SETS["engine-tier-everything"])
    gateway_pod = rendered.deployment["spec"]["template"]["metadata"]["labels"]
    engine_pod = rendered.one("Deployment", ENGINE_FULLNAME)["spec"]["template"]["metadata"]["labels"]
    for name, pod, other in ((FULLNAME, gateway_pod, engine_pod), (ENGINE_FULLNAME, engine_pod, gateway_pod)):
        for kind in ("Service", "PodDisruptionBudget", "NetworkPolicy", "Deployment"):
            doc = rendered.one(kind, name)
            selector = (
                doc["spec"]["selector"]
                if kind == "Service"
                else (doc["spec"].get("podSelector") or doc["spec"]["selector"])["matchLabels"]
            )
            assert _selects(selector, pod) and not _selects(selector, other), (kind, name)


def test_gateway_calls_the_engine_tier_through_a_remote_engine(render: Any) -> None:
    rendered = render(TWO_TIER_SETS["engine-tier-everything"])
    engines = rendered.config["engines"]
    assert engines["chattts"] == {
        "kind": "openai",
        "options": {
            "endpoints": ["http://rel-chattts-gateway-engine.speech.svc.cluster.example:8000/v1"],
            "model": "chattts",
            "api_key_env": "TTS_ENGINE_SERVICE_TOKEN",
            **TWO_TIER_SETS["engine-tier-everything"]["engineTier"]["remoteOptions"],
        },
    }
    assert engines["espeak"]["kind"] == "espeak"  # cheap, stays local: the aliases' fallback
    assert rendered.config["aliases"] == render().config["aliases"]  # model names route as in one tier
    default = render(TWO_TIER_SETS["engine-tier"]).config["engines"]["chattts"]["options"]
    assert default["endpoints"] == ["http://rel-chattts-gateway-engine.speech.svc.cluster.local:8000/v1"]


def test_engine_nodes_run_the_moved_engines_with_the_engine_profile(render: Any) -> None:
    config = _engine_config(render(TWO_TIER_SETS["engine-tier-everything"]))
    assert config["server"]["profile"] == "engine"
    assert config["engines"]["chattts"] == {
        "kind": "chattts",
        "workers": 2,
        "options": {"source": "dir", "path": "/models/chattts", "device": "cuda", "max_batch": 8},
    }
    assert config["engines"]["espeak"] is None  # no built-in engine slips back in through the gateway's defaults
    assert config["readiness"] == {"engines": ["chattts"]}  # a pod is ready when the engines it hosts are
    assert set(config) == {"server", "engines", "readiness"}  # no tenants, limits, cache or credentials


def test_service_token_is_shared_through_a_secret_only(render: Any) -> None:
    values = TWO_TIER_SETS["engine-tier-everything"]
    token = values["engineTier"]["serviceToken"]
    rendered = render(values)
    secret = rendered.one("Secret", ENGINE_FULLNAME)
    assert base64.b64decode(secret["data"]["service-token"]).decode() == token
    reference = {"secretKeyRef": {"name": ENGINE_FULLNAME, "key": "service-token"}}
    assert rendered.env["TTS_ENGINE_SERVICE_TOKEN"]["valueFrom"] == reference
    assert _env(_engine_container(rendered))["CHATTTS_GATEWAY_AUTH__SERVICE_TOKEN"]["valueFrom"] == reference
    for path, text in rendered.files.items():
        if not path.endswith(("secret.yaml", "secret-engine.yaml")):
            assert token not in text, path
    checksums = {
        doc["spec"]["template"]["metadata"]["annotations"]["checksum/service-token"]
        for doc in rendered.all("Deployment")
    }
    assert checksums == {hashlib.sha256(token.encode()).hexdigest()}  # both tiers roll when it changes


def test_generated_service_token_and_existing_secret(render: Any) -> None:
    generated = render(TWO_TIER_SETS["engine-tier"])
    token = base64.b64decode(generated.one("Secret", ENGINE_FULLNAME)["data"]["service-token"]).decode()
    assert re.fullmatch(r"[A-Za-z0-9]{48}", token)
    assert token not in generated.one("ConfigMap", ENGINE_FULLNAME)["data"]["config.yaml"]

    existing = render(TWO_TIER_SETS["engine-tier-existing-secret"])
    assert [doc["metadata"]["name"] for doc in existing.all("Secret")] == [FULLNAME]
    reference = {"secretKeyRef": {"name": "engine-token", "key": "token"}}
    assert existing.env["TTS_ENGINE_SERVICE_TOKEN"]["valueFrom"] == reference
    assert _env(_engine_container(existing))["CHATTTS_GATEWAY_AUTH__SERVICE_TOKEN"]["valueFrom"] == reference
    assert "checksum/service-token" not in existing.deployment["spec"]["template"]["metadata"]["annotations"]


def test_short_service_token_is_refused(chart: helm.Chart, render: Any) -> None:
    short = {"engineTier": {"enabled": True, "serviceToken": "too-short"}}
    with pytest.raises(helm.HelmValuesError, match="serviceToken"):
        chart.validate_schema(short)
    with pytest.raises(helm.HelmError):
        render(short)


def test_engine_tier_needs_an_engine_to_move(render: Any) -> None:
    values = {"engineTier": {"enabled": True}, "config": {"engines": {"chattts": {"kind": "synthetic"}}}}
    with pytest.raises(helm.HelmRenderError, match="engineTier"):
        render(values)


def test_gpus_and_weights_go_to_the_engine_tier_only(render: Any) -> None:
    rendered = render(TWO_TIER_SETS["engine-tier-everything"])
    assert "nvidia.com/gpu" not in rendered.container["resources"].get("limits", {})
    assert rendered.container["resources"]["requests"] == {"cpu": "500m", "memory": "512Mi"}
    assert "/models" not in {mount["mountPath"] for mount in rendered.container["volumeMounts"]}
    assert "models" not in {volume["name"] for volume in rendered.pod["volumes"]}
    assert rendered.pod["nodeSelector"] == {"example.com/pool": "cpu"}
    assert "tolerations" not in rendered.pod

    container, pod = _engine_container(rendered), _engine_pod(rendered)
    assert container["resources"] == {
        "requests": {"cpu": "2", "memory": "6Gi"},
        "limits": {"memory": "12Gi", "nvidia.com/gpu": 2},
    }
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    assert volumes["models"]["persistentVolumeClaim"] == {"claimName": f"{FULLNAME}-models"}
    assert {mount["mountPath"] for mount in container["volumeMounts"]} >= {"/models", "/tmp", CONFIG_PATH}
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert "podAntiAffinity" in pod["affinity"] and pod["topologySpreadConstraints"]
    assert pod["automountServiceAccountToken"] is False
    assert container["securityContext"]["readOnlyRootFilesystem"] is True


def test_both_tiers_have_their_own_hpa_and_pdb(render: Any) -> None:
    rendered = render(TWO_TIER_SETS["engine-tier-everything"])
    targets = {hpa["metadata"]["name"]: hpa["spec"] for hpa in rendered.all("HorizontalPodAutoscaler")}
    assert {name: spec["scaleTargetRef"]["name"] for name, spec in targets.items()} == {
        FULLNAME: FULLNAME,
        ENGINE_FULLNAME: ENGINE_FULLNAME,
    }
    engine_hpa = targets[ENGINE_FULLNAME]
    assert (engine_hpa["minReplicas"], engine_hpa["maxReplicas"]) == (2, 8)
    assert [metric["type"] for metric in engine_hpa["metrics"]] == ["Pods"]  # CPU target turned off
    budgets = {pdb["metadata"]["name"]: pdb["spec"] for pdb in rendered.all("PodDisruptionBudget")}
    assert budgets[FULLNAME]["minAvailable"] == 1
    assert budgets[ENGINE_FULLNAME]["maxUnavailable"] == 1
    single = render(TWO_TIER_SETS["engine-tier"])  # one engine pod, no HPA: no engine PDB
    assert [pdb["metadata"]["name"] for pdb in single.all("PodDisruptionBudget")] == [FULLNAME]
    down_to_one = merge(TWO_TIER_SETS["engine-tier"], {"engineTier": {"autoscaling": {"enabled": True}}})  # min 1
    assert [pdb["metadata"]["name"] for pdb in render(down_to_one).all("PodDisruptionBudget")] == [FULLNAME]
    assert "HorizontalPodAutoscaler" not in single.kinds()


def test_network_policies_let_only_the_gateway_reach_the_engines(render: Any) -> None:
    rendered = render(TWO_TIER_SETS["engine-tier-everything"])
    engine_labels = rendered.one("Deployment", ENGINE_FULLNAME)["spec"]["selector"]["matchLabels"]
    gateway_egress = rendered.one("NetworkPolicy")["spec"]["egress"]
    assert {
        "ports": [{"port": 8000, "protocol": "TCP"}],
        "to": [{"podSelector": {"matchLabels": engine_labels}}],
    } in gateway_egress
    engine_policy = rendered.one("NetworkPolicy", ENGINE_FULLNAME)["spec"]
    peers = engine_policy["ingress"][0]["from"]
    assert peers[0] == {"podSelector": {"matchLabels": rendered.deployment["spec"]["selector"]["matchLabels"]}}
    assert peers[1:] == TWO_TIER_SETS["engine-tier-everything"]["engineTier"]["networkPolicyIngressFrom"]
    assert [port["port"] for rule in engine_policy["egress"] for port in rule["ports"]] == [53, 53, 443]
    # Dedicated jobs pods speak their segments on the same engines: the engine tier takes them too.
    jobs = {"redis": {"host": "redis"}, "jobs": {"runner": "dedicated", "volume": {"existingClaim": "jobs-audio"}}}
    with_jobs = render(merge(TWO_TIER_SETS["engine-tier-everything"], jobs))
    jobs_labels = with_jobs.one("Deployment", JOBS_FULLNAME)["spec"]["selector"]["matchLabels"]
    assert {"podSelector": {"matchLabels": jobs_labels}} in with_jobs.one("NetworkPolicy", ENGINE_FULLNAME)["spec"][
        "ingress"
    ][0]["from"]


def test_notes_describe_the_engine_tier(render: Any) -> None:
    notes = render(TWO_TIER_SETS["engine-tier"]).files["chattts-gateway/templates/NOTES.txt"]
    assert "http://rel-chattts-gateway-engine.speech.svc.cluster.local:8000/v1" in notes
    assert "Engine tier" not in render().files["chattts-gateway/templates/NOTES.txt"]


def test_removed_built_in_engine_stays_removed(
    render: Any, tmp_path: Path, clean_environment: pytest.MonkeyPatch
) -> None:
    """Helm drops keys set to null in values, so the chart names each missing built-in engine null itself."""
    from gateway.settings import BUILT_IN_ENGINES

    rendered = render({"config": {"engines": {"chattts": None}}})
    assert rendered.config["engines"]["chattts"] is None
    assert set(BUILT_IN_ENGINES) <= set(rendered.config["engines"])
    config_file, secret_file = tmp_path / "config.yaml", tmp_path / "secret.yaml"
    config_file.write_text(rendered.one("ConfigMap")["data"]["config.yaml"])
    secret_file.write_bytes(base64.b64decode(rendered.one("Secret")["data"]["secret.yaml"]))
    settings = load_settings([config_file, secret_file])
    assert set(settings.engines) == {"espeak"}
    alias = settings.aliases["tts-1"]
    assert getattr(alias, "engines", alias) == ["espeak"]


def test_settings_loader_accepts_both_tiers_configs(
    render: Any, tmp_path: Path, clean_environment: pytest.MonkeyPatch
) -> None:
    rendered = render(TWO_TIER_SETS["engine-tier-everything"])
    token = TWO_TIER_SETS["engine-tier-everything"]["engineTier"]["serviceToken"]
    files = {
        "config.yaml": rendered.one("ConfigMap")["data"]["config.yaml"],
        "secret.yaml": base64.b64decode(rendered.one("Secret")["data"]["secret.yaml"]).decode(),
        "engine.yaml": rendered.one("ConfigMap", ENGINE_FULLNAME)["data"]["config.yaml"],
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    clean_environment.setenv("CHATTTS_GATEWAY_REDIS_URL", rendered.env["CHATTTS_GATEWAY_REDIS_URL"]["value"])
    clean_environment.setenv("TTS_ENGINE_SERVICE_TOKEN", token)  # as the kubelet sets it from the Secret

    gateway = load_settings([tmp_path / "config.yaml", tmp_path / "secret.yaml"])
    remote = gateway.engines["chattts"]
    assert isinstance(remote, RemoteEngineSettings) and gateway.engines["espeak"].kind == "espeak"
    assert remote.options.credential() == token

    clean_environment.delenv("CHATTTS_GATEWAY_REDIS_URL")
    clean_environment.setenv("CHATTTS_GATEWAY_AUTH__SERVICE_TOKEN", token)
    engine = load_settings([tmp_path / "engine.yaml"])
    assert set(engine.engines) == {"chattts"}
    assert engine.readiness.engines == ["chattts"]
    assert engine.server.profile == "engine"
    assert engine.auth.service_token is not None and engine.auth.service_token.get_secret_value() == token


def _deployment_doc_block(first_line: str) -> dict[str, Any]:
    """The YAML block of docs/deployment.md's two-tier section that starts with ``first_line``."""
    text = (ROOT / "docs" / "deployment.md").read_text()
    blocks = re.findall(r"^```yaml\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    found = [block for block in blocks if block.startswith(first_line + "\n")]
    assert len(found) == 1, f"docs/deployment.md has no single yaml block starting {first_line!r}"
    loaded: dict[str, Any] = yaml.safe_load(found[0])
    return loaded


def test_the_deployment_guide_two_tier_examples_match_the_chart(chart: helm.Chart) -> None:
    values = _deployment_doc_block("# two-tiers.yaml")
    chart.validate_schema(values)
    rendered = Rendered(chart.render(values, name="tts", namespace="speech", is_install=True))
    assert rendered.one("Deployment", "tts-chattts-gateway-engine")
    # The guide's two config excerpts are what the chart renders with the weights on a claim and a GPU.
    excerpt_values = {
        "engineTier": {"enabled": True},
        "gpu": {"enabled": True},
        "weights": {"source": "dir", "persistentVolumeClaim": {"enabled": True}},
    }
    rendered = Rendered(chart.render(excerpt_values, name="tts", namespace="speech", is_install=True))
    front = yaml.safe_load(rendered.one("ConfigMap", "tts-chattts-gateway")["data"]["config.yaml"])
    engine = yaml.safe_load(rendered.one("ConfigMap", "tts-chattts-gateway-engine")["data"]["config.yaml"])
    assert _deployment_doc_block("# front gateway")["engines"] == front["engines"]
    assert _deployment_doc_block("# engine node")["engines"] == engine["engines"]


def test_the_cache_gets_a_redis_of_its_own_from_a_secret(
    render: Any, tmp_path: Path, clean_environment: pytest.MonkeyPatch
) -> None:
    assert "CHATTTS_GATEWAY_CACHE__REDIS_URL" not in render({"redis": {"host": "redis.db.svc"}}).env
    secret = {"existingSecret": "cache-redis", "existingSecretKey": "url"}
    rendered = render(
        {"redis": {"host": "redis.db.svc"}, "cacheRedis": secret, "config": {"cache": {"max_redis_bytes": 1 << 30}}}
    )
    assert rendered.env["CHATTTS_GATEWAY_CACHE__REDIS_URL"]["valueFrom"] == {
        "secretKeyRef": {"name": "cache-redis", "key": "url"}
    }
    plain = render({"cacheRedis": {"url": "redis://cache.db.svc:6379/0"}})
    assert plain.env["CHATTTS_GATEWAY_CACHE__REDIS_URL"]["value"] == "redis://cache.db.svc:6379/0"
    # What the kubelet hands the gateway from the Secret reaches its settings, with the budget from the ConfigMap.
    clean_environment.setenv("CHATTTS_GATEWAY_CACHE__REDIS_URL", "redis+cluster://:pw@cache-0:6379,cache-1:6379")
    settings = _redis_settings(rendered, tmp_path, clean_environment)
    assert (settings.cache.redis_url, settings.cache.max_redis_bytes) == (
        "redis+cluster://:pw@cache-0:6379,cache-1:6379",
        1 << 30,
    )


def test_a_password_in_the_plain_cache_redis_url_is_refused(schema: dict[str, Any]) -> None:
    for refused in ("redis://:secret@cache:6379/0", "redis://user:secret@cache:6379/0", "mysql://cache"):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({"cacheRedis": {"url": refused}}, schema)
    jsonschema.validate({"cacheRedis": {"url": "rediss://user@cache:6379/0"}}, schema)


JOBS_FULLNAME = f"{FULLNAME}-jobs"


def test_jobs_run_on_the_fronts_by_default(render: Any) -> None:
    rendered = render({"redis": {"host": "redis"}})
    assert [d["metadata"]["name"] for d in rendered.all("Deployment")] == [FULLNAME]
    assert "CHATTTS_GATEWAY_JOBS__RUN" not in rendered.env  # jobs.run defaults to true: every pod speaks jobs
    jobs = yaml.safe_load(rendered.one("ConfigMap")["data"]["config.yaml"])["jobs"]
    assert jobs == {"concurrency": 2, "ttl_s": 86400, "max_input_chars": 500000, "storage_quota_bytes": 2147483648}


def test_dedicated_jobs_run_in_a_deployment_of_their_own_outside_the_service(
    render: Any, tmp_path: Path, clean_environment: pytest.MonkeyPatch
) -> None:
    values = {
        "redis": {"host": "redis"},
        "jobs": {
            "runner": "dedicated",
            "replicas": 3,
            "ttlSeconds": 3600,
            "concurrency": 4,
            "volume": {"existingClaim": "jobs-audio"},
        },
        "config": {"jobs": {"priority": "normal"}},
    }
    rendered = render(values)
    assert sorted(d["metadata"]["name"] for d in rendered.all("Deployment")) == [FULLNAME, JOBS_FULLNAME]
    jobs = rendered.one("Deployment", JOBS_FULLNAME)
    assert jobs["spec"]["replicas"] == 3
    front_pod = rendered.deployment["spec"]["template"]["metadata"]["labels"]
    jobs_pod = jobs["spec"]["template"]["metadata"]["labels"]
    assert _selects(jobs["spec"]["selector"]["matchLabels"], jobs_pod)
    for kind in ("Service", "Deployment"):
        doc = rendered.one(kind)
        selector = doc["spec"]["selector"] if kind == "Service" else doc["spec"]["selector"]["matchLabels"]
        assert _selects(selector, front_pod) and not _selects(selector, jobs_pod), kind
    jobs_container = jobs["spec"]["template"]["spec"]["containers"][0]
    assert _env(jobs_container)["CHATTTS_GATEWAY_JOBS__RUN"]["value"] == "true"
    assert rendered.env["CHATTTS_GATEWAY_JOBS__RUN"]["value"] == "false"
    assert _env(jobs_container)["CHATTTS_GATEWAY_REDIS_URL"] == rendered.env["CHATTTS_GATEWAY_REDIS_URL"]
    for deployment in (rendered.deployment, jobs):  # both read and write the jobs' audio files
        pod = deployment["spec"]["template"]["spec"]
        assert {"name": "jobs", "persistentVolumeClaim": {"claimName": "jobs-audio"}} in pod["volumes"]
        assert {"name": "jobs", "mountPath": "/var/lib/tts-jobs"} in pod["containers"][0]["volumeMounts"]
    config_file, secret_file = tmp_path / "config.yaml", tmp_path / "secret.yaml"
    config_file.write_text(rendered.one("ConfigMap")["data"]["config.yaml"])
    secret_file.write_bytes(base64.b64decode(rendered.one("Secret")["data"]["secret.yaml"]))
    clean_environment.setenv("CHATTTS_GATEWAY_JOBS__RUN", "false")
    settings = load_settings([config_file, secret_file])
    assert (settings.jobs.run, settings.jobs.ttl_s, settings.jobs.concurrency) == (False, 3600, 4)
    assert settings.jobs.priority == "normal"  # config.jobs wins over the jobs values
    assert str(settings.jobs.directory) == "/var/lib/tts-jobs"


def test_a_release_of_the_former_chart_name_keeps_its_names(chart: helm.Chart) -> None:
    """``nameOverride: tts-gateway`` (docs/deployment.md): a release of the former chart name upgrades in place."""
    values = {"nameOverride": "tts-gateway", "engineTier": {"enabled": True}}
    rendered = Rendered(chart.render(values, name="tts", namespace="speech", is_install=True))
    for kind in ("Deployment", "Service", "ConfigMap"):
        assert rendered.one(kind, "tts-tts-gateway")
        assert rendered.one(kind, "tts-tts-gateway-engine")
    labels = rendered.one("Deployment", "tts-tts-gateway")["spec"]["selector"]["matchLabels"]
    assert labels["app.kubernetes.io/name"] == "tts-gateway"
