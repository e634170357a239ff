"""docs/configuration-reference.md documents every setting, and only settings that exist, with its real default.

The document is generated from the settings models' field docstrings (``gateway/cli/config_reference.py``; the one
place a setting's meaning is written): the checked-in file must be what the generator makes now, every field must
have a docstring, and the document is also checked on its own, as written, against the models, so a fault of the
generator cannot hide a missing setting or a wrong default.

The settings are pydantic models, composed in ``gateway/settings/root.py: Settings``. Each table of the document that
documents one is preceded by a marker naming it (several for a table shared by models with the same fields):

    <!-- settings: ServerSettings -->
    | field | default | meaning |

Starting from ``Settings``, every model a setting holds has a marked table, except one held by a single field and
not marked, whose fields are documented in its holder's table as ``field.subfield`` rows (``limits.requests_per_minute``
in a tenant's). In a marked table, the first column names the field and the second gives its default, written as in a
YAML file and compared exactly: ``30``, ``0.25``, ``open``, ``""``, ``[]``, ``{}``, ``true``; ``—`` for unset
(None); ``(required)`` for a field without a default. A remark in parentheses may follow the value (``2592000`` (30
days), ``—`` (unlimited)). A field that holds settings models may point to their table instead (``see below``).
"""

from __future__ import annotations

import json
import re
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, TypeAdapter
from pydantic_core import to_jsonable_python

from gateway.cli.config_reference import render_reference, undocumented_fields
from gateway.settings import Settings

if typing.TYPE_CHECKING:
    from pydantic.fields import FieldInfo

ROOT = Path(__file__).resolve().parents[2]
DOCUMENT = "docs/configuration-reference.md"
REGENERATE = "chattts-gateway config-reference --output docs/configuration-reference.md"
_MARKER = re.compile(r"^<!-- settings: (?P<names>[\w ]+?) -->\n(?=\|)", re.MULTILINE)
_UNSET = "—"
_REQUIRED = "(required)"


@dataclass(frozen=True)
class Table:
    """A marked table: the models it documents, its rows by field name (default cell, line) and its first line."""

    models: tuple[str, ...]
    rows: dict[str, tuple[str, int]]
    line: int


@dataclass(frozen=True)
class Setting:
    """One field of one model, as the document must show it."""

    model: type[BaseModel]
    name: str
    info: FieldInfo
    path: str  # where it sits in the settings, for messages: ``engines.<name>.options.max_batch``


def cells(row: str) -> list[str]:
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", row.strip().strip("|"))]


def marked_tables(text: str) -> list[Table]:
    tables = []
    for marker in _MARKER.finditer(text):
        start_line = text.count("\n", 0, marker.end()) + 1
        lines = text[marker.end() :].split("\n")
        rows: dict[str, tuple[str, int]] = {}
        for offset, row in enumerate(lines[2:], start=2):  # after the header and its separator
            if not row.startswith("|"):
                break
            name, default = cells(row)[:2]
            rows[name.strip("`")] = (default, start_line + offset)
        tables.append(Table(tuple(marker["names"].split()), rows, start_line))
    return tables


def models_in(annotation: Any) -> list[type[BaseModel]]:
    """The settings models an annotation holds, however nested (``list[X]``, ``dict[str, X | Y]``, ``X | None``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for argument in typing.get_args(annotation) for model in models_in(argument)]


def single_model(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds directly (``X`` or ``X | None``), not in a list or mapping."""
    if typing.get_origin(annotation) is typing.Annotated:
        return single_model(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        return single_model(members[0]) if len(members) == 1 else None
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def documented_settings(
    model: type[BaseModel], path: str, marked: set[str], prefix: str = ""
) -> tuple[dict[str, Setting], list[tuple[type[BaseModel], str]]]:
    """The rows ``model``'s table must have (unmarked single models flattened in), and the models held elsewhere."""
    rows: dict[str, Setting] = {}
    held: list[tuple[type[BaseModel], str]] = []
    for name, info in model.model_fields.items():
        key, field_path = prefix + (info.alias or name), f"{path}.{info.alias or name}".lstrip(".")
        nested = single_model(info.annotation)
        if nested is not None and nested.__name__ not in marked:
            nested_rows, nested_held = documented_settings(nested, field_path, marked, key + ".")
            rows |= nested_rows
            held += nested_held
            continue
        rows[key] = Setting(model, name, info, field_path)
        suffix = "" if nested is not None else ".<name>" if typing.get_origin(info.annotation) is dict else "[]"
        held += [(held_model, field_path + suffix) for held_model in models_in(info.annotation)]
    return rows, held


def default_of(setting: Setting) -> Any:
    return to_jsonable_python(setting.info.get_default(call_default_factory=True))


def written(value: Any) -> str:
    """How a default is written in the tables."""
    if value is None:
        return _UNSET
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str):
        return f"`{value}`" if value and yaml.safe_load(value) == value else f"`{json.dumps(value)}`"
    return f"`{json.dumps(value)}`" if not isinstance(value, bool) else f"`{str(value).lower()}`"


def same(documented: Any, actual: Any) -> bool:
    if isinstance(documented, bool) != isinstance(actual, bool):
        return False
    return bool(documented == actual)


def documented_value(cell: str) -> tuple[bool, Any]:
    """Whether ``cell`` writes a value (``—`` or one code span, then maybe a remark in parentheses), and the value."""
    match = re.fullmatch(r"(?P<value>—|`[^`]+`)(?: \(.+\))?", cell)
    if match is None:
        return False, None
    return True, None if match["value"] == _UNSET else yaml.safe_load(match["value"].strip("`"))


def as_default(value: Any, setting: Setting) -> Any:
    """A documented value as the field's default would be: a mapping that holds a model becomes that model."""
    annotation = setting.info.annotation
    if value is None or annotation is None or not models_in(annotation):
        return value
    try:
        return to_jsonable_python(TypeAdapter(annotation).validate_python(value))
    except ValueError:
        return value


def default_problem(cell: str, settings: list[Setting]) -> str | None:
    """What is wrong with the default ``cell`` documents for these fields (one per model of the table), or None."""
    optional = [s for s in settings if not s.info.is_required()]
    is_value, value = documented_value(cell)
    if cell == _REQUIRED or (not is_value and any(models_in(s.info.annotation) for s in settings)):
        return "has a default: write its default" if cell == _REQUIRED and optional else None  # or points to a table
    expected = written(default_of(optional[0])) if optional else _REQUIRED
    if not optional or not is_value or (value is None and not cell.startswith(_UNSET)):
        return f"is documented as {cell}: write {expected}"
    if len(optional) < len(settings) or any(not same(as_default(value, s), default_of(s)) for s in optional):
        return f"defaults to {expected}, documented as {cell}: write {expected}"
    return None


def test_the_reference_is_what_the_docstrings_make() -> None:
    assert (ROOT / DOCUMENT).read_text() == render_reference(), f"regenerate: {REGENERATE}"


def test_every_setting_has_a_docstring() -> None:
    missing = undocumented_fields(Settings)
    assert not missing, "write a docstring under each of these fields (its meaning in the reference):\n" + "\n".join(
        missing
    )


def test_every_setting_is_documented_with_its_default() -> None:
    text = (ROOT / DOCUMENT).read_text()
    tables = marked_tables(text)
    marked = {name for table in tables for name in table.models}
    problems: list[str] = []
    reached: dict[str, str] = {}
    to_visit: list[tuple[type[BaseModel], str]] = [(Settings, "")]
    tables_by_model = {name: table for table in tables for name in table.models}
    models_by_table: dict[int, list[tuple[type[BaseModel], str]]] = {}
    while to_visit:
        model, path = to_visit.pop(0)
        if model.__name__ in reached:
            continue
        reached[model.__name__] = path
        table = tables_by_model.get(model.__name__)
        if table is None:
            problems.append(
                f"{model.__module__}.{model.__name__} (`{path or 'the top level'}`) has no table: add one after a "
                f"line `<!-- settings: {model.__name__} -->`"
            )
        else:
            models_by_table.setdefault(table.line, []).append((model, path))
        to_visit += documented_settings(model, path, marked)[1]
    for table in tables:
        problems += [
            f"{DOCUMENT}:{table.line}: `<!-- settings: {name} -->` names no settings model that Settings holds"
            for name in table.models
            if name not in reached
        ]
        problems += table_problems(table, models_by_table.get(table.line, []), marked)
    assert not problems, "\n".join(problems)


def table_problems(table: Table, models: list[tuple[type[BaseModel], str]], marked: set[str]) -> list[str]:
    expected: dict[str, list[Setting]] = {}
    for model, path in models:
        for key, setting in documented_settings(model, path, marked)[0].items():
            expected.setdefault(key, []).append(setting)
    where = f"{DOCUMENT}:{table.line} (the table of {', '.join(table.models)})"
    problems = [
        f"{where}: `{settings[0].path}` is missing: add the row | `{key}` | {written_default(settings)} | ... | "
        f"(its meaning: the docstring of {qualified_name(settings[0])}; regenerate: {REGENERATE})"
        for key, settings in expected.items()
        if key not in table.rows
    ]
    problems += [
        f"{DOCUMENT}:{line}: `{key}` is no field of {', '.join(table.models)}: remove its row (or fix its name)"
        for key, (_, line) in table.rows.items()
        if key not in expected
    ]
    for key, (cell, line) in table.rows.items():
        if key in expected and (problem := default_problem(cell, expected[key])):
            problems.append(f"{DOCUMENT}:{line}: `{expected[key][0].path}` {problem}")
    return problems


def qualified_name(setting: Setting) -> str:
    return f"{setting.model.__module__}.{setting.model.__name__}.{setting.name}"


def written_default(settings: list[Setting]) -> str:
    if all(s.info.is_required() for s in settings):
        return _REQUIRED
    return written(default_of(next(s for s in settings if not s.info.is_required())))


# The check itself.


class _Inner(BaseModel):
    depth: int = 3


class _Outer(BaseModel):
    port: int = 8000
    mode: str = "open"
    hosts: list[str] = []
    token: str | None = None
    ratio: float = 0.25
    enabled: bool = True
    inner: _Inner = _Inner()
    name: str


@pytest.mark.parametrize(
    ("field", "cell", "wrong"),
    [
        ("port", "`8000`", False),
        ("port", "`8001`", True),
        ("port", "8000", True),
        ("mode", "`open`", False),
        ("mode", '`"open"`', False),
        ("mode", "`closed`", True),
        ("hosts", "`[]`", False),
        ("token", "—", False),
        ("token", "`null`", True),
        ("token", "none", True),
        ("token", "— (unlimited)", False),
        ("token", "unlimited (—)", True),
        ("port", "`8000` (the default port)", False),
        ("port", "`8000` or more", True),
        ("ratio", "`0.25`", False),
        ("enabled", "`true`", False),
        ("enabled", "`1`", True),
        ("inner", "see below", False),
        ("inner", "`{}`", False),
        ("inner", "`{depth: 4}`", True),
        ("name", "(required)", False),
        ("name", "`x`", True),
        ("port", "(required)", True),
    ],
)
def test_a_default_is_compared_exactly(field: str, cell: str, *, wrong: bool) -> None:
    setting = Setting(_Outer, field, _Outer.model_fields[field], field)
    assert (default_problem(cell, [setting]) is not None) is wrong


def test_a_table_is_checked_row_by_row() -> None:
    table = Table(("_Outer",), {"port": ("`8000`", 2), "typo": ("`1`", 3), "inner.depth": ("`4`", 4)}, 1)
    problems = "\n".join(table_problems(table, [(_Outer, "outer")], marked={"_Outer"}))
    assert "`outer.mode` is missing: add the row | `mode` | `open` |" in problems
    assert "`typo` is no field" in problems
    assert "`outer.inner.depth` defaults to `3`, documented as `4`: write `3`" in problems
    assert "`outer.port`" not in problems
