"""One name: every logger of the service under ``chattts_gateway``, and the former names where docs say they stay."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from lifecycle import naming

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("gateway", "engines", "auth", "storage", "lifecycle")
#: Libraries' loggers that the service quiets or configures: not its own.
_LIBRARY_LOGGERS = {"NeMo-text-processing", "httpx", "uvicorn.error"}
_NAMED_LOGGER = re.compile(r"""getLogger\(\s*f?["']([^"']+)["']""")
#: Where the former name stays on purpose (docs/configuration.md, "Former names"): the metrics' app_name label, the
#: models' ``owned_by`` (what clients see stays the same), the asset manifest, the download and grammar caches, and
#: the former environment prefix.
_FORMER_NAME_KEPT = {
    "gateway/app.py",
    "gateway/schemas.py",
    "gateway/settings/__init__.py",
    "engines/chattts/assets.py",
    "engines/chattts/loader.py",
    "engines/chattts/options.py",
    "engines/chattts/normalize/grammars.py",
    "lifecycle/naming.py",
}


def sources() -> list[Path]:
    return sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))


def test_every_logger_named_in_the_service_is_under_the_one_root() -> None:
    named = {
        (path.relative_to(ROOT).as_posix(), name)
        for path in sources()
        for name in _NAMED_LOGGER.findall(path.read_text())
    }
    assert named  # the four modules other work is refactoring name theirs literally
    own = {(where, name) for where, name in named if name not in _LIBRARY_LOGGERS}
    stray = sorted((where, name) for where, name in own if not name.startswith(f"{naming.LOGGER_ROOT}."))
    assert not stray, f"loggers outside {naming.LOGGER_ROOT}: {stray}"


def test_the_former_name_appears_only_where_it_is_kept_on_purpose() -> None:
    former = re.compile(r"(?<![a-z_])tts[_-]gateway", re.IGNORECASE)
    found = sorted(path.relative_to(ROOT).as_posix() for path in sources() if former.search(path.read_text()))
    assert set(found) <= _FORMER_NAME_KEPT, found


def test_a_part_logs_under_the_root_that_the_logging_config_names() -> None:
    root = naming.logger()  # first: a part's logger made before its root hangs from logging's root until then
    assert naming.logger("cache").name == "chattts_gateway.cache"
    assert naming.logger("cache").parent is root


@pytest.mark.parametrize(
    ("environment", "expected"),
    [
        ({"CHATTTS_GATEWAY_CONFIG": "new.yaml", "TTS_GATEWAY_CONFIG": "old.yaml"}, "new.yaml"),
        ({"TTS_GATEWAY_CONFIG": "old.yaml"}, "old.yaml"),
        ({"CHATTTS_GATEWAY_CONFIG": ""}, ""),  # set, though empty: the new name still wins
        ({}, None),
    ],
)
def test_a_variable_under_the_new_prefix_wins_over_the_former(
    environment: dict[str, str], expected: str | None
) -> None:
    assert naming.environ("CONFIG", environment) == expected


def test_the_logging_config_configures_the_root_the_parts_log_under() -> None:
    from gateway.app import _logging_config
    from gateway.settings import Settings

    config = _logging_config(Settings())
    assert naming.LOGGER_ROOT in config.loggers
    assert isinstance(naming.logger(), logging.Logger)
