"""The README's map of the folders names every package of the service, so that a new one cannot go unmentioned."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOP_LEVEL = ("gateway", "engines", "auth", "storage", "lifecycle")


def map_entry(top: str) -> str:
    """The README's bullet for ``top/``: from its name to the next bullet."""
    readme = (ROOT / "README.md").read_text()
    found = re.search(rf"^- `{top}/` — (.*?)(?=^- `|^$)", readme, re.MULTILINE | re.DOTALL)
    assert found is not None, f"README.md has no map entry for {top}/"
    return found[1]


@pytest.mark.parametrize("top", TOP_LEVEL)
def test_the_readme_names_every_package(top: str) -> None:
    entry = map_entry(top)
    packages = sorted(init.parent.name for init in (ROOT / top).glob("*/__init__.py"))
    missing = [name for name in packages if f"`{name}/`" not in entry and f"`{top}/{name}/`" not in entry]
    assert not missing, f"README.md's map entry for {top}/ does not name {missing}"
