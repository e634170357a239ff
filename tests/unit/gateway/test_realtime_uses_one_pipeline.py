"""The realtime sessions speak only through the speech service's public operation (issue #33): the session kernel's
``Speaker`` (``gateway/sessions/lanes.py``) holds the service as ``self._speech`` and touches nothing of it but
``speak``, ``check``, ``open_session``, ``stream_leases`` (the tenant's streams its further lanes hold while they speak)
and ``model_voice``; the dialects hold no service at all, only the kernel's
``Speaker`` (issue #48: one call site of ``speak`` for every socket); each imports the service's module only for
typing. A rule of the pipeline (limits, cache, failover...) reached around that operation would be a rule the HTTP
endpoint and the sessions could each get wrong on their own. ``pyproject.toml`` adds an import-linter contract:
the socket packages (``gateway.sessions``, ``gateway.realtime``, the families' dialects) import none of the
pipeline's inner modules.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SESSIONS = ("gateway/sessions/lanes.py",)
DIALECTS = (
    "gateway/sessions/text_stream.py",
    "gateway/openai/realtime/session.py",
    "gateway/elevenlabs/session.py",
    "gateway/elevenlabs/dialogue_socket.py",
)
PUBLIC_OPERATIONS = frozenset({"speak", "check", "open_session", "stream_leases", "model_voice"})
SERVICE_MODULE = "gateway.speech.service"
_HELD = "_speech"  # the attribute a session keeps the service in
_PARAMETER = "speech"  # the constructor's parameter that hands it over


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _is_held(node: ast.AST) -> bool:
    """``self._speech``."""
    return (
        isinstance(node, ast.Attribute)
        and node.attr == _HELD
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )


def _is_handed_over(node: ast.AST) -> bool:
    """``self._speech = speech``."""
    return isinstance(node, ast.Assign) and [_is_held(target) for target in node.targets] == [True]


def _handles(tree: ast.AST) -> list[ast.AST]:
    """Every expression that is the service: ``self._speech``, and the constructor's ``speech``."""
    return [node for node in ast.walk(tree) if _is_held(node) or (isinstance(node, ast.Name) and node.id == _PARAMETER)]


def service_uses(source: str) -> tuple[set[str], list[str]]:
    """What a session's source uses of the service (attribute names), and how it lets the service escape (the
    lines where it is aliased, passed on or returned: what it does with it there cannot be checked)."""
    tree = ast.parse(source)
    parents = _parents(tree)
    used: set[str] = set()
    escapes: list[str] = []
    for handle in _handles(tree):
        parent = parents[handle]
        if isinstance(parent, ast.Attribute) and parent.value is handle:
            used.add(parent.attr)
        elif not _is_handed_over(parent) and not isinstance(parent, ast.arg):
            escapes.append(f"line {getattr(handle, 'lineno', '?')}: {ast.unparse(parent)}")
    return used, escapes


def _under_type_checking(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and ast.unparse(node.test) in {"TYPE_CHECKING", "typing.TYPE_CHECKING"}:
            return True
    return False


def runtime_service_imports(source: str) -> list[str]:
    """The imports of the service's module that run (outside ``if TYPE_CHECKING:``)."""
    tree = ast.parse(source)
    parents = _parents(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            modules = [node.module or ""] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        else:
            continue
        if any(module.startswith(SERVICE_MODULE) for module in modules) and not _under_type_checking(node, parents):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


@pytest.mark.parametrize("path", SESSIONS)
def test_a_session_uses_only_the_public_operations_of_the_speech_service(path: str) -> None:
    used, escapes = service_uses((ROOT / path).read_text())
    assert "speak" in used, f"{path} no longer holds the service as self.{_HELD}: update this test"
    assert used <= PUBLIC_OPERATIONS, f"{path} reaches into the speech service: {sorted(used - PUBLIC_OPERATIONS)}"
    assert not escapes, f"{path} hands the speech service on: {escapes}"


@pytest.mark.parametrize("path", SESSIONS + DIALECTS)
def test_a_session_imports_the_speech_service_only_for_typing(path: str) -> None:
    assert not runtime_service_imports((ROOT / path).read_text())


def speech_held(source: str) -> list[str]:
    """Where a dialect holds or reaches the service itself: ``self._speech``, or a ``speech`` parameter or name."""
    return [
        f"line {getattr(node, 'lineno', '?')}: {ast.unparse(node)}"
        for node in ast.walk(ast.parse(source))
        if _is_held(node)
        or (
            isinstance(node, ast.Name | ast.arg)
            and _PARAMETER in {getattr(node, "id", None), getattr(node, "arg", None)}
        )
    ]


@pytest.mark.parametrize("path", DIALECTS)
def test_a_dialect_speaks_only_through_the_kernel(path: str) -> None:
    assert not speech_held((ROOT / path).read_text()), f"{path} holds the speech service: speak through its Speaker"


def test_the_check_catches_a_dialect_holding_the_service() -> None:
    assert speech_held("self._speech.speak(principal, request, record)")
    assert speech_held("def __init__(self, speech):\n    pass")
    assert not speech_held("self._speaker.speak(request, record_id='a', markup=m)")


# The checks themselves: each of these is what they are there to catch.
REACHING_IN = {
    "a member": "self._speech.cache.get(key)",
    "an alias": "service = self._speech\nservice.planner.plan(request)",
    "passed on": "helper(self._speech)",
    "kept twice": "self._speech = speech\nself._other = speech",
}


@pytest.mark.parametrize("source", REACHING_IN.values(), ids=REACHING_IN.keys())
def test_the_check_catches_a_session_reaching_around_the_operation(source: str) -> None:
    used, escapes = service_uses(source)
    assert escapes or not used <= PUBLIC_OPERATIONS


def test_the_check_catches_a_runtime_import_and_allows_a_typing_one() -> None:
    runtime = "from gateway.speech.service import SpeechService\n"
    typing_only = (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from gateway.speech.service import SpeechService\n"
    )
    assert runtime_service_imports(runtime) == ["line 1: from gateway.speech.service import SpeechService"]
    assert runtime_service_imports("from gateway.speech import service\n")
    assert runtime_service_imports("import gateway.speech.service\n")
    assert not runtime_service_imports(typing_only)
