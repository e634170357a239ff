"""The image and the package agree on what the project is made of."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).parents[2]


def test_the_image_copies_every_package_the_project_installs() -> None:
    # A package left out of the Dockerfile installs fine here (editable) and breaks only in the image.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = [pattern.rstrip("*") for pattern in project["tool"]["setuptools"]["packages"]["find"]["include"]]
    dockerfile = (ROOT / "Dockerfile").read_text()
    missing = [package for package in packages if f"COPY {package} ./{package}" not in dockerfile]
    assert not missing, f"the Dockerfile does not copy {missing}"
    assert all((ROOT / package / "__init__.py").is_file() for package in packages)
