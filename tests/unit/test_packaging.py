"""The image and the package agree on what the project is made of, and the project installs under its own name."""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from gateway.cli import build_parser, main

ROOT = Path(__file__).parents[2]
DISTRIBUTION = "chattts-gateway"  # `tts-gateway` on PyPI is another project's: `pip install tts-gateway` is not us


def test_the_distribution_and_its_one_command_are_named_chattts_gateway() -> None:
    # Read from pyproject.toml, not from the installed metadata (an older install keeps the old name until
    # `pip install -e .` runs again).
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == DISTRIBUTION
    assert project["scripts"] == {DISTRIBUTION: "gateway.cli:main"}, "one console script, named as the distribution"
    module, _, attribute = project["scripts"][DISTRIBUTION].partition(":")
    assert getattr(importlib.import_module(module), attribute) is main
    assert build_parser().prog == DISTRIBUTION  # what --help and the error messages call it


def test_the_image_copies_every_package_the_project_installs() -> None:
    # A package left out of the Dockerfile installs fine here (editable) and breaks only in the image.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = [pattern.rstrip("*") for pattern in project["tool"]["setuptools"]["packages"]["find"]["include"]]
    dockerfile = (ROOT / "Dockerfile").read_text()
    missing = [package for package in packages if f"COPY {package} ./{package}" not in dockerfile]
    assert not missing, f"the Dockerfile does not copy {missing}"
    assert all((ROOT / package / "__init__.py").is_file() for package in packages)


def _locked(name: str) -> dict[str, Version]:
    """``requirements/NAME.txt``: each package's locked version, by its normalised name."""
    pins: dict[str, Version] = {}
    for line in (ROOT / "requirements" / f"{name}.txt").read_text().splitlines():
        if line and not line.startswith((" ", "#")):
            requirement = Requirement(line)
            (specifier,) = requirement.specifier
            assert specifier.operator == "==", f"{name}.txt: {line} is not an exact pin"
            pins[canonicalize_name(requirement.name)] = Version(specifier.version)
    return pins


def _declared(*extras: str) -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = project["dependencies"] + [dep for extra in extras for dep in project["optional-dependencies"][extra]]
    return [Requirement(dependency) for dependency in declared]


def _pinned_within(pins: dict[str, Version], requirement: Requirement) -> bool:
    pinned = pins.get(canonicalize_name(requirement.name))
    return pinned is not None and pinned in requirement.specifier


@pytest.mark.parametrize(("lock", "extras"), [("serve", ("chattts",)), ("test", ("chattts", "test"))])
def test_the_lock_files_hold_what_pyproject_asks_for(lock: str, extras: tuple[str, ...]) -> None:
    # pyproject.toml changed without `make lock`: the Makefile and the Dockerfile would install the old set.
    pins = _locked(lock)
    unmet = [str(dep) for dep in _declared(*extras) if not _pinned_within(pins, dep)]
    assert not unmet, f"requirements/{lock}.txt lacks or misses {unmet}: run `make lock`"


def test_what_is_tested_is_what_is_served() -> None:
    serve, test = _locked("serve"), _locked("test")
    differ = {name: (version, test.get(name)) for name, version in serve.items() if test.get(name) != version}
    assert not differ, f"serve.txt and test.txt lock different versions (serve, test): {differ}"


def test_the_lock_files_pin_torch_as_the_install_takes_it() -> None:
    # `torch==2.13.0`: the local CPU wheel (2.13.0+cpu) and the CUDA image's (2.13.0+cu128) both satisfy it.
    for lock in ("serve", "test"):
        assert str(_locked(lock)["torch"]) == "2.13.0", f"requirements/{lock}.txt must pin torch==2.13.0"
