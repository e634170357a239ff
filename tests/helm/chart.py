"""What the chart tests share: where the chart is, the release they render, a rendered release to look into, and how
values are merged. A module, not a test module: test modules import from here, never from each other."""

from __future__ import annotations

import base64
import copy
from pathlib import Path
from typing import Any

import yaml

__all__ = ["CHART", "FULLNAME", "RELEASE", "ROOT", "Rendered", "UniqueKeyLoader", "merge"]

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "chattts-gateway"
RELEASE = "rel"
FULLNAME = "rel-chattts-gateway"


class UniqueKeyLoader(yaml.SafeLoader):
    """A YAML loader that rejects duplicate keys (PyYAML silently keeps the last; Kubernetes may not)."""


def _construct_unique_mapping(loader: UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    keys = [loader.construct_object(key, deep=deep) for key, _ in node.value]
    duplicates = sorted({str(k) for k in keys if keys.count(k) > 1})
    if duplicates:
        raise yaml.constructor.ConstructorError(None, None, f"duplicate keys {duplicates}", node.start_mark)
    return loader.construct_mapping(node, deep=deep)


UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping)


class Rendered:
    """The manifests of one render, by kind (and name)."""

    def __init__(self, files: dict[str, str]) -> None:
        self.files = files
        self.docs: list[dict[str, Any]] = [
            doc
            for path, text in sorted(files.items())
            if path.endswith((".yaml", ".yml"))
            for doc in yaml.load_all(text, Loader=UniqueKeyLoader)
            if doc
        ]

    def kinds(self) -> list[str]:
        return [doc["kind"] for doc in self.docs]

    def all(self, kind: str) -> list[dict[str, Any]]:
        return [doc for doc in self.docs if doc["kind"] == kind]

    def one(self, kind: str, name: str = FULLNAME) -> dict[str, Any]:
        found = [doc for doc in self.all(kind) if doc["metadata"]["name"] == name]
        assert len(found) == 1, f"expected one {kind} {name}, got {self.kinds()}"
        return found[0]

    def text(self, template: str) -> str:
        return self.files[f"chattts-gateway/templates/{template}"]

    @property
    def deployment(self) -> dict[str, Any]:
        return self.one("Deployment")

    @property
    def pod(self) -> dict[str, Any]:
        spec: dict[str, Any] = self.deployment["spec"]["template"]["spec"]
        return spec

    @property
    def container(self) -> dict[str, Any]:
        containers = self.pod["containers"]
        assert len(containers) == 1
        return dict(containers[0])

    @property
    def env(self) -> dict[str, dict[str, Any]]:
        return {var["name"]: var for var in self.container["env"]}

    @property
    def config(self) -> dict[str, Any]:
        config: dict[str, Any] = yaml.safe_load(self.one("ConfigMap")["data"]["config.yaml"])
        return config

    @property
    def secret_config(self) -> dict[str, Any]:
        data = self.one("Secret")["data"]["secret.yaml"]
        decoded: dict[str, Any] = yaml.safe_load(base64.b64decode(data))
        return decoded


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged
