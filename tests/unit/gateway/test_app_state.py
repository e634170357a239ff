"""The app's state is one typed object: read through ``gateway.state.gateway_state`` only, and complete at start-up.

Litestar's ``app.state`` is a bag of string keys: a handler that reads ``app.state.speech`` is typed by hand and
breaks when the key is renamed, and an entry made on a first request (``state.setdefault(...)``) is a second,
racy place where the app's objects are built. So no module but ``gateway/state.py`` touches an app's state, and
nothing is added to it once the lifespan has started.
"""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from litestar.exceptions import WebSocketDisconnect
from litestar.testing import TestClient

from gateway.state import gateway_state
from tests.inprocess import in_process_app

ROOT = Path(__file__).parents[3]
ACCESSOR = ROOT / "gateway" / "state.py"
ADMIN_TOKEN = "app-state-admin-token-0123456789abcdef"
CONFIG: dict[str, Any] = {
    "engines": {"chattts": None, "tones": {"kind": "synthetic"}},
    "auth": {"admin_token": ADMIN_TOKEN, "tenants": [{"name": "acme"}]},
}

_APPS = {"app", "_app", "litestar_app"}
_STATE_TYPES = {"State", "ImmutableState"}


def _is_app(node: ast.expr) -> bool:
    """``app``, ``<anything>.app``, ``scope["litestar_app"]`` or ``Litestar.from_scope(...)``."""
    match node:
        case ast.Name(id=name) | ast.Attribute(attr=name):
            return name in _APPS
        case ast.Subscript(slice=ast.Constant(value=key)):
            return key in _APPS
        case ast.Call(func=ast.Attribute(attr="from_scope")):
            return True
    return False


def _of_an_app(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "state" and _is_app(node.value)


def _reads_into_a_state(node: ast.expr, parent: ast.AST | None) -> bool:
    """``<anything>.state[...]``, ``<anything>.state.get(...)`` and the like: a state read by key, whoever it is."""
    if not (isinstance(node, ast.Attribute) and node.attr == "state"):
        return False
    if isinstance(parent, ast.Subscript):
        return parent.value is node  # ``codes[breaker.state]`` reads no state
    return isinstance(parent, ast.Attribute) and parent.attr in {"get", "update", "setdefault", "pop", "dict"}


def state_reads(source: str) -> list[str]:
    """Where ``source`` reaches an app's Litestar state itself (``line: code``) instead of through the accessor."""
    tree = ast.parse(source)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found: list[ast.expr | ast.stmt] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.expr) and (_of_an_app(node) or _reads_into_a_state(node, parents.get(node))):
            found.append(node)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("litestar"):
            found += [node] if any(alias.name in _STATE_TYPES for alias in node.names) else []
    return [f"{node.lineno}: {ast.get_source_segment(source, node)}" for node in found]


@pytest.mark.parametrize(
    "code",
    [
        "speech = request.app.state.speech",
        'held = scope["litestar_app"].state.services.held',
        'services = app.state.get("services")',
        "state = socket.app.state",
        'self._app.state["throttle"] = Throttle()',
        "Litestar.from_scope(scope).state.settings",
        'cache.state.setdefault("waiting", Counter())',
        "from litestar.datastructures import State",
    ],
)
def test_the_check_finds_a_state_read_by_key(code: str) -> None:
    assert state_reads(code) != []


@pytest.mark.parametrize(
    "code",
    [
        "state = gateway_state(request.app)",
        'healthy = endpoint.state == "healthy"',
        "redis = await storage.state()",
        "headers = rate_limit_headers(exc.state)",
        "state = pool.status().state",
        "code = BREAKER_STATE_CODES[breaker.state]",
    ],
)
def test_the_check_leaves_other_states_alone(code: str) -> None:
    assert state_reads(code) == []


def test_no_module_but_the_accessor_reads_the_apps_state() -> None:
    reads = {
        str(path.relative_to(ROOT)): found
        for path in sorted((ROOT / "gateway").rglob("*.py"))
        if path != ACCESSOR and (found := state_reads(path.read_text()))
    }
    assert reads == {}, "read the app's state through gateway.state.gateway_state (or a named dependency)"


def test_nothing_is_added_to_the_state_after_start_up() -> None:
    # Each of these made an entry of its own on first use: the credential throttle (a refused key), the admin
    # throttle (a refused admin token), the count of realtime sockets waiting for their credentials.
    app = in_process_app(CONFIG)
    with TestClient(app=app) as client:
        started = dict(app.state)
        state = gateway_state(app)
        wrong_key = client.post(
            "/v1/audio/speech",
            json={"model": "tones", "input": "Hi.", "voice": "alloy"},
            headers={"authorization": "Bearer sk-tts-not-a-key"},
        )
        wrong_admin = client.get("/admin/tenants", headers={"authorization": "Bearer not-the-admin-token"})
        with client.websocket_connect("/v1/audio/speech/stream") as socket:
            socket.send_text(json.dumps({"type": "session.update", "token": "sk-tts-not-a-key"}))
            refused = json.loads(socket.receive_text())
            with pytest.raises(WebSocketDisconnect):
                socket.receive_text()
        assert (wrong_key.status_code, wrong_admin.status_code, refused["error"]["code"]) == (
            401,
            401,
            "invalid_api_key",
        )
        assert dict(app.state) == started
        assert gateway_state(app) is state
        with pytest.raises(dataclasses.FrozenInstanceError):
            state.admin_throttle = state.admin_throttle  # type: ignore[misc]
    with pytest.raises(LookupError):  # the lifespan has ended: its services are stopped, and gone from the app
        gateway_state(app)
