"""The official OpenAI Node SDK, as the tests run it: ``node`` with the SDK pinned in ``tests/node``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

__all__ = ["NODE_DIR", "node_with_sdk"]

NODE_DIR = Path(__file__).parent / "node"


def node_with_sdk() -> str:
    """The ``node`` binary, once the pinned SDK is installed; a clear failure otherwise."""
    node = shutil.which("node")
    if node is None:
        pytest.fail("Node.js is not installed: the Node SDK tests need `node` (20 or newer) on PATH")
    pinned = json.loads((NODE_DIR / "package.json").read_text())["dependencies"]
    for package, version in pinned.items():
        installed = NODE_DIR / "node_modules" / package / "package.json"
        if not installed.is_file():
            pytest.fail(f"{package} is not installed in {NODE_DIR}: run `make setup` (or `npm ci --prefix tests/node`)")
        if (found := json.loads(installed.read_text())["version"]) != version:
            pytest.fail(
                f"tests/node has {package} {found} installed but package.json pins {version}: "
                "run `npm ci --prefix tests/node`"
            )
    return node
