"""``chattts-gateway config-reference``: docs/configuration-reference.md, rendered from the settings themselves.

The settings' field docstrings are the one place a setting's meaning is written; this renders every model
``Settings`` holds (however nested) as a table of its fields: the key, the default as YAML and the docstring. A model
held by one field with several others (the engine kinds of ``engines``) shares their table. A test compares the
checked-in document with what this renders, so a docstring changed without regenerating fails CI.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import textwrap
import types
import typing
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import BaseModel
from pydantic_core import to_jsonable_python

if TYPE_CHECKING:
    from pydantic.fields import FieldInfo

__all__ = ["REFERENCE", "field_docstrings", "render_reference", "undocumented_fields", "written_default"]

REFERENCE = Path("docs/configuration-reference.md")
_COMMAND = "chattts-gateway config-reference --output docs/configuration-reference.md"
_HEADER = f"""# Configuration reference

Every key of the settings, by the model that holds it: its default as written in a YAML file (`30`, `0.25`, `open`,
`""`, `[]`, `true`; `—` means unset, (required) that there is none) and its meaning. How the settings are loaded
(files, environment variables, built-in engines and aliases) and what the parts are for is in
[configuration.md](configuration.md).

This file is generated from the settings models' field docstrings: edit those, then run `{_COMMAND}`.
"""
_UNSET = "—"
_REQUIRED = "(required)"


@dataclass(frozen=True)
class _Table:
    """Models documented by one table, and where they sit in the settings (``engines.<name>.options``)."""

    models: tuple[type[BaseModel], ...]
    path: str


def models_in(annotation: Any) -> list[type[BaseModel]]:
    """The settings models an annotation holds, however nested (``list[X]``, ``dict[str, X | Y]``, ``X | None``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for argument in typing.get_args(annotation) for model in models_in(argument)]


def _path_suffix(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _path_suffix(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _path_suffix(members[0]) if len(members) == 1 else ""
    return ".<name>" if origin is dict else "[]" if origin in (list, tuple, set, frozenset) else ""


@cache
def _own_docstrings(model: type) -> dict[str, str]:
    """The docstrings written under the fields a class itself declares (``x: int = 1`` then ``\"\"\"...\"\"\"``)."""
    body = ast.parse(textwrap.dedent(inspect.getsource(model))).body[0]
    assert isinstance(body, ast.ClassDef)
    found = {}
    for node, after in zip(body.body, body.body[1:], strict=False):
        text = _string_of(after)
        if text is not None and isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found[node.target.id] = inspect.cleandoc(text)
    return found


def _string_of(node: ast.stmt) -> str | None:
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
        return node.value.value
    return None


def field_docstrings(model: type[BaseModel]) -> dict[str, str]:
    """Each field's docstring, a subclass's over its bases'."""
    found: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if isinstance(cls, type) and issubclass(cls, BaseModel) and cls is not BaseModel:
            found |= _own_docstrings(cls)
    return found


def written_default(value: Any) -> str:
    """A default as a YAML file writes it, in a code span (``—`` for None)."""
    value = to_jsonable_python(value)
    if value is None:
        return _UNSET
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str):
        return f"`{value}`" if value and yaml.safe_load(value) == value else f"`{json.dumps(value)}`"
    return f"`{json.dumps(value)}`" if not isinstance(value, bool) else f"`{str(value).lower()}`"


def _tables(root: type[BaseModel]) -> list[_Table]:
    """Every model ``root`` holds, in the order met (breadth first); models held by one field together share one."""
    tables = [_Table((root,), "")]
    seen = {root}
    for table in tables:
        for model in table.models:
            for name, info in model.model_fields.items():
                held = [m for m in dict.fromkeys(models_in(info.annotation)) if m not in seen]
                if held:
                    seen.update(held)
                    path = f"{table.path}.{info.alias or name}".lstrip(".") + _path_suffix(info.annotation)
                    tables.append(_Table(tuple(held), path))
    return tables


def _anchor(model: type[BaseModel]) -> str:
    return model.__name__.lower()


def _kind(model: type[BaseModel]) -> str:
    """How the text names a model of a shared table: its ``kind`` (``kind: chattts``), else its name."""
    kind = model.model_fields.get("kind")
    if kind is not None and typing.get_origin(kind.annotation) is typing.Literal:
        return f"`kind: {typing.get_args(kind.annotation)[0]}`"
    return model.__name__


def _markdown(docstring: str) -> str:
    """A docstring as one table cell: reStructuredText's double backticks to Markdown's, one line, pipes escaped."""
    text = " ".join(docstring.split())
    return re.sub(r"``(.+?)``", r"`\1`", text).replace("|", "\\|")


def _default_cell(info: FieldInfo) -> str:
    held = list(dict.fromkeys(models_in(info.annotation)))
    if held:
        return "see " + ", ".join(f"[{m.__name__}](#{_anchor(m)})" for m in held)
    if info.is_required():
        return _REQUIRED
    return written_default(info.get_default(call_default_factory=True))


def _meaning(name: str, models: list[type[BaseModel]], table: _Table) -> str:
    texts = {model: field_docstrings(model).get(name, "") for model in models}
    if len(set(texts.values())) == 1:
        meaning = _markdown(next(iter(texts.values())))
    else:
        meaning = "; ".join(f"{_kind(m)}: {_markdown(text)}" for m, text in texts.items())
    if len(models) < len(table.models):
        meaning += f" (only {', '.join(_kind(m) for m in models)})"
    return meaning


def _rows(table: _Table) -> list[str]:
    holders: dict[str, list[type[BaseModel]]] = {}
    for model in table.models:
        for name in model.model_fields:
            holders.setdefault(name, []).append(model)
    rows = []
    for name, models in holders.items():
        info = models[0].model_fields[name]
        rows.append(f"| `{info.alias or name}` | {_default_cell(info)} | {_meaning(name, models, table)} |")
    return rows


def _section(table: _Table) -> str:
    names = [m.__name__ for m in table.models]
    anchors = "".join(f'<a id="{_anchor(m)}"></a>' for m in table.models if len(table.models) > 1)
    where = f"`{table.path}`" if table.path else "the top level of a settings file"
    lines = [f"## {', '.join(names)}", ""]
    if anchors:
        lines += [anchors, ""]
    lines += [f"Where: {where}.", ""]
    described = [(m, inspect.cleandoc(doc)) for m in table.models if (doc := vars(m).get("__doc__"))]
    for model, doc in described:
        lines += [_markdown(doc) if len(described) == 1 else f"{_kind(model)}: {_markdown(doc)}", ""]
    lines += [f"<!-- settings: {' '.join(names)} -->", "| key | default | meaning |", "|---|---|---|"]
    return "\n".join([*lines, *_rows(table)]) + "\n"


def render_reference(root: type[BaseModel] | None = None) -> str:
    """docs/configuration-reference.md: every model the settings hold, every field."""
    if root is None:
        from gateway.settings import Settings

        root = Settings
    return _HEADER + "".join(f"\n{_section(table)}" for table in _tables(root))


def undocumented_fields(root: type[BaseModel]) -> list[str]:
    """``module.Model.field`` for each field the reference would show without a meaning."""
    return [
        f"{model.__module__}.{model.__name__}.{name}"
        for table in _tables(root)
        for model in table.models
        for name in model.model_fields
        if not field_docstrings(model).get(name, "").strip()
    ]
